#!/usr/bin/env python
"""Output-layer forward+backward: seconds, peak memory and bytes moved, naive logits vs chunked losses vs peers.

    python benchmarks/speed/bench_margin.py                 # N=4096, H=512, V=50,000 and 200,000, CPU
    python benchmarks/speed/bench_margin.py --vocab 50000 --device cuda
    python benchmarks/speed/bench_margin.py --vocab 50000 --paired 1   # each hf_heads row against hf_heads softmax
    python benchmarks/speed/bench_margin.py --device cuda --tokens 8192 --hidden 2304 --vocab 256000 --autocast bf16 \
        --inputs peaked                               # the Gemma-sized row as benchmarks/gpu/gpu.sh runs it

Rows. "naive logits, softmax" is a plain model's output layer, `F.cross_entropy(F.linear(h, W, b), y)`: under
`--autocast` a half-precision GEMM whose logits autocast's log_softmax turns into float32; "+ float32 upcast
(transformers)" casts the logits to float32 first, as transformers' causal-LM loss (`ForCausalLMLoss`) does; "half
weights" rows (under `--autocast` only) take h, W (and b) already in the autocast dtype, as a bf16 model hands them
over, and run without autocast, as Liger-Kernel's and Cut Cross-Entropy's own benchmarks do. "three bare GEMMs"
is h Wᵀ, d z W and d zᵀ h into one (N, V) buffer (allocated in the warm-up call) with the inputs cast to the
products' dtype beforehand: nothing else, no softmax; "FLOP floor" rows are not measured but computed, 6·N·H·V
FLOPs (4·N·H·V with a frozen W) at the device's peak rate for the products' dtype, measured by one large matmul at
the start (and the vendor's dense figure where the device is in `VENDOR_PEAK_TFLOPS`). The peers' fused linear
cross-entropy: torch's `F.linear_cross_entropy` where the installed torch has it; Liger-Kernel (no bias, and a
separate row with a bias) and Cut Cross-Entropy (its gradient filter on, `filter_eps="auto"`, and off, `None`; no
bias) on CUDA where their package imports (under `--autocast` with half weights); where a row cannot run it is
listed under the table as "not available here", with the reason. "compiled kernel" rows run the chunk engine's
torch.compile'd kernel (`HF_HEADS_CHUNK_KERNEL=compiled`; its compilation is in the warm-up call), "triton kernel"
rows the hand-written Triton kernel, "triton-half kernel" rows its variant with half-precision logits under autocast
(GPU only: left out on a CPU unless Triton's interpreter is on, `TRITON_INTERPRET=1`); the other hf_heads rows the
eager kernel. The naive margin rows are `margin_logits` (its products in float32, also under autocast), so under
autocast compare the margin rows with the naive softmax row as well: every row has its time and memory against the
naive softmax of the same table, and against its own reference.

Inputs (`--inputs`): "random" (h, W Gaussian: a flat softmax, nothing for CCE's filter to skip) or "peaked" (logits
with the statistics of the packaged SmolLM2-135M on real text: benchmarks/common/_peaked.py). Float32 tables run with
TF32 off unless `--tf32 1` (`torch.set_float32_matmul_precision("high")`).

"GB moved" is each implementation's own count of the bytes its passes over the (rows, V) and (V, H) buffers read and
write per step (benchmarks/common/_traffic.py: the formula and every pass), not a measurement. Each method runs in a
fresh process (with HF_HEADS_BENCH_IN_PROCESS=1, as on CUDA in benchmarks/gpu/gpu.sh, in this one); with `--rounds R`
the methods run in turn R times and each row reports the median, min and max over all its timed calls. `--paired 1`
times each hf_heads row (eager kernel, trainable W) against hf_heads softmax instead: both steps on the same inputs in
one process, alternating AB, BA, ... for `--repeats` pairs per round, and reports the median (min–max) of the pairs'
ratios. Peak memory is what the loss adds on top of its inputs (hidden, weight, bias and their gradients): on CUDA
`torch.cuda.max_memory_allocated`, on the CPU the growth of the process's peak resident set (ru_maxrss) over the level
after the inputs were allocated. Each process times `--repeats` calls after one warm-up call.
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from hf_heads.losses import margin_cross_entropy, margin_logits
from hf_heads.losses.chunks import KERNEL_ENV, rows_per_chunk

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common: the shared helpers
from _peaked import peaked_inputs  # noqa: E402
from _timing import (  # noqa: E402
    autocast,
    bench_parser,
    device_line,
    interleaved,
    measure,
    print_failures,
    run_isolated,
    seconds_cell,
    without_failures,
)
from _traffic import gb_cell, step_bytes  # noqa: E402

ARC = dict(margin="arc", m=0.001, word_norm="log-unigram", context_norm="max-norm")
LSM = dict(margin="lsm", m=2)
SOFTMAX = "hf_heads softmax"
NAIVE = "naive logits, softmax"
HALF = {"half": True, "bias": False}  # h and W (no bias) in the autocast dtype, run without autocast
# name: (implementation, options, the naive row it is compared with besides NAIVE). Options: margin options, "kernel"
# (the chunk kernel), "frozen" (W without gradient), "half" (half weights, under --autocast only), "bias" (False: no
# bias), "upcast" (the naive row's float32 logits), "filter" (CCE's filter_eps)
METHODS = {
    NAIVE: ("naive", {}, NAIVE),
    "naive logits, softmax + float32 upcast (transformers)": ("naive", {"upcast": True}, NAIVE),
    "naive logits, softmax, half weights, no bias": ("naive", HALF, NAIVE),
    "three bare GEMMs (no softmax, one (N, V) buffer)": ("floor", {}, NAIVE),
    "torch F.linear_cross_entropy (chunked)": ("torch", {}, NAIVE),
    "Liger-Kernel fused linear CE, no bias": ("liger", HALF, NAIVE),
    "Liger-Kernel fused linear CE, with bias": ("liger", {"half": True}, NAIVE),
    "Cut Cross-Entropy, filter on, no bias": ("cce", {**HALF, "filter": "auto"}, NAIVE),
    "Cut Cross-Entropy, filter off, no bias": ("cce", {**HALF, "filter": None}, NAIVE),
    SOFTMAX: ("ours", {}, NAIVE),
    "hf_heads softmax, compiled kernel": ("ours", {"kernel": "compiled"}, NAIVE),
    "hf_heads softmax, triton kernel": ("ours", {"kernel": "triton"}, NAIVE),
    "hf_heads softmax, triton-half kernel": ("ours", {"kernel": "triton-half"}, NAIVE),
    "hf_heads softmax, half weights, no bias, triton kernel": ("ours", {**HALF, "kernel": "triton"}, NAIVE),
    "hf_heads softmax, half weights, no bias, triton-half kernel": ("ours", {**HALF, "kernel": "triton-half"}, NAIVE),
    "naive logits, arc+log-unigram+max-norm": ("naive", ARC, "naive logits, arc+log-unigram+max-norm"),
    "hf_heads arc+log-unigram+max-norm": ("ours", ARC, "naive logits, arc+log-unigram+max-norm"),
    "hf_heads arc+log-unigram+max-norm, compiled kernel": (
        "ours",
        {**ARC, "kernel": "compiled"},
        "naive logits, arc+log-unigram+max-norm",
    ),  # fmt: skip
    "hf_heads arc+log-unigram+max-norm, triton kernel": (
        "ours",
        {**ARC, "kernel": "triton"},
        "naive logits, arc+log-unigram+max-norm",
    ),  # fmt: skip
    "hf_heads arc+log-unigram+max-norm, triton-half kernel": (
        "ours",
        {**ARC, "kernel": "triton-half"},
        "naive logits, arc+log-unigram+max-norm",
    ),  # fmt: skip
    "naive logits, lsm m=2": ("naive", LSM, "naive logits, lsm m=2"),
    "hf_heads lsm m=2": ("ours", LSM, "naive logits, lsm m=2"),
    "hf_heads lsm m=2, triton kernel": ("ours", {**LSM, "kernel": "triton"}, "naive logits, lsm m=2"),
    # every other margin option alone, compared with hf_heads' own softmax
    "hf_heads arc m=0.001": ("ours", dict(margin="arc", m=0.001), None),
    "hf_heads cos m=0.1": ("ours", dict(margin="cos", m=0.1), None),
    "hf_heads cos m=0.1, scale 30": ("ours", dict(margin="cos", m=0.1, scale=30.0), None),
    **{
        f"hf_heads word_norm {n}": ("ours", dict(word_norm=n), None)
        for n in ("uniform", "log-rank", "unigram", "log-unigram")
    },
    "hf_heads context_norm max-norm": ("ours", dict(context_norm="max-norm"), None),
    # a frozen output layer (LoRA, linear probing): no weight gradient, two products instead of three
    "naive logits, softmax, frozen W": ("naive", {"frozen": True}, "naive logits, softmax, frozen W"),
    "hf_heads softmax, frozen W": ("ours", {"frozen": True}, "naive logits, softmax, frozen W"),
    "hf_heads arc+log-unigram+max-norm, frozen W": (
        "ours",
        {**ARC, "frozen": True},
        "naive logits, softmax, frozen W",
    ),
}
# options that are not margin options (what `make_step` passes on to the loss is the rest)
ROW_OPTIONS = ("kernel", "frozen", "half", "bias", "upcast", "filter")
# dense peak TFLOP/s (no sparsity) from the vendors' data sheets, by a part of torch.cuda.get_device_name(); checked in
# order (the first match wins): for the "FLOP floor" rows beside the measured peak
VENDOR_PEAK_TFLOPS = {
    "H200": {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9},
    "H100 PCIe": {"bf16": 756.5, "fp16": 756.5, "tf32": 378.0, "fp32": 51.2},
    "H100": {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9},  # SXM ("NVIDIA H100 80GB HBM3")
    "A100": {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5},
}


def _liger(h, w, b, y, opts):
    from liger_kernel.transformers.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyLoss

    return LigerFusedLinearCrossEntropyLoss()(w, h, y, b)


def _cce(h, w, b, y, opts):  # no bias: cut-cross-entropy 25.1.1 (PyPI) has no bias argument
    from cut_cross_entropy import linear_cross_entropy

    return linear_cross_entropy(h, w, y, filter_eps=opts["filter"])


# peers' fused linear cross-entropy (Triton, CUDA only), run where their package imports: `make gpu-wheels` puts them
# in .whl/, from where benchmarks/gpu/gpu.sh installs them
PEERS = {"liger": _liger, "cce": _cce}
PEER_MODULES = {"liger": "liger_kernel", "cce": "cut_cross_entropy"}
AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _pairs_with_softmax(method: str) -> bool:
    """Whether `--paired` times this row against hf_heads softmax: another hf_heads row with the eager kernel and a
    trainable W, as softmax's."""
    kind, opts, _ = METHODS[method]
    return kind == "ours" and method != SOFTMAX and not any(k in opts for k in ("kernel", "frozen", "half"))


def _unavailable(method: str, device: str, amp: str | None) -> str | None:
    """Why a row cannot run here (None: it can)."""
    kind, opts, _ = METHODS[method]
    if opts.get("half") and amp is None and kind in ("naive", "ours"):
        return "half weights: under --autocast only"
    if kind == "torch" and not hasattr(F, "linear_cross_entropy"):
        return f"torch {torch.__version__} has no F.linear_cross_entropy"
    if kind in PEERS:
        if importlib.util.find_spec(PEER_MODULES[kind]) is None:
            return f"the {PEER_MODULES[kind]} package does not import (make gpu-wheels)"
        if not device.startswith("cuda"):
            return "its Triton kernels run on CUDA only"
        # cut-cross-entropy 25.1.1 raises "Backwards requires embeddings to be bf16 or fp16"
        if kind == "cce" and amp is None:
            return "its backward takes bf16 / fp16 inputs only (float32 refused)"
    if opts.get("kernel", "").startswith("triton"):
        from hf_heads.losses.triton_kernel import triton_available

        if not triton_available():
            return "no triton package"
        if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
            return "a GPU kernel (on a CPU only under TRITON_INTERPRET=1)"
    return None


def _inputs(n: int, hidden: int, vocab: int, device: str, frozen: bool, mode: str = "random") -> tuple:
    """h (n, H), W (V, H), b (V,), labels (n,) and word counts (V,), seeded; "random": Gaussian h and W ("peaked":
    benchmarks/common/_peaked.py); the gradients allocated up front (they belong to the inputs, not the method)."""
    torch.manual_seed(0)
    if mode == "peaked":
        h, w, y = peaked_inputs(n, hidden, vocab, device)
    else:
        h = torch.randn(n, hidden, device=device)
        w = torch.randn(vocab, hidden, device=device) * 0.05
        y = torch.randint(0, vocab, (n,), device=device)
    h, w = h.requires_grad_(), w.requires_grad_(not frozen)
    b = torch.zeros(vocab, device=device, requires_grad=not frozen)
    counts = torch.randint(1, 10_000, (vocab,), device=device).float()
    for t in (h, w, b):
        if t.requires_grad:
            t.grad = torch.zeros_like(t)
    return h, w, b, y, counts


def _as_half(inputs: tuple, dtype: torch.dtype, bias: bool) -> tuple:
    """The inputs as a half model hands them over: h, W (and b, or None) leaves in `dtype`, gradients allocated."""
    h, w, b, y, counts = inputs
    out = [t.detach().to(dtype).requires_grad_(t.requires_grad) for t in (h, w, b)]
    for t in out:
        if t.requires_grad:
            t.grad = torch.zeros_like(t)
    return out[0], out[1], out[2] if bias else None, y, counts


def make_step(method: str, inputs: tuple, device: str, amp: str | None = None):
    """One forward+backward of `method` on `inputs` (`_inputs`), as a function of no arguments."""
    kind, row, _ = METHODS[method]
    opts = {k: v for k, v in row.items() if k not in ROW_OPTIONS}
    if row.get("half"):  # the inputs in the autocast dtype (float32 without --autocast), run without autocast
        inputs = _as_half(inputs, AMP_DTYPES[amp] if amp else torch.float32, row.get("bias", True))
    h, w, b, y, counts = inputs
    kw = {**opts, "word_counts": counts} if opts.get("word_norm", "no-mod") != "no-mod" else dict(opts)
    step_amp = None if row.get("half") else amp

    if kind == "floor":  # z = h Wᵀ, d h = z W, d W = zᵀ h in the products' dtype: what any exact method computes
        dtype = AMP_DTYPES[amp] if amp else h.dtype
        h_c, w_c = h.detach().to(dtype), w.detach().to(dtype)
        buffers: dict[str, torch.Tensor] = {}

        def floor():
            if not buffers:  # allocated in the warm-up call: counted in the peak, not in the time
                buffers.update(
                    z=torch.empty(h_c.shape[0], w_c.shape[0], dtype=dtype, device=h_c.device),
                    gh=torch.empty_like(h_c),
                    gw=torch.empty_like(w_c),
                )
            torch.mm(h_c, w_c.T, out=buffers["z"])  # (N, V)
            torch.mm(buffers["z"], w_c, out=buffers["gh"])  # (N, H)
            torch.mm(buffers["z"].T, h_c, out=buffers["gw"])  # (V, H)

        return floor

    def forward():
        if kind == "naive" and not kw:  # a plain model: under autocast a half-precision GEMM (frozen: no d W)
            logits = F.linear(h, w, b)
            return F.cross_entropy(logits.float() if row.get("upcast") else logits, y)
        if kind == "naive":  # the margin reference: its products in float32, also under autocast
            return F.cross_entropy(margin_logits(h, w, b, y, **kw), y)
        if kind == "torch":
            return F.linear_cross_entropy(h, w, y, linear_bias=b, options=torch.nn.LinearCrossEntropyOptions())
        if kind in PEERS:
            return PEERS[kind](h, w, b, y, row)
        margin = {k: v for k, v in kw.items() if k != "kernel"}
        return margin_cross_entropy(h, w, b, y, impl=kw.get("kernel"), **margin)

    def step():
        with autocast(device, step_amp):
            loss = forward()
        loss.backward()
        return loss

    return step


def _set_tf32(on: bool) -> None:
    """TF32 for float32 matmuls on (torch's "high" precision) or off ("highest", torch's default)."""
    torch.set_float32_matmul_precision("high" if on else "highest")


def run_one(
    method: str,
    n: int,
    hidden: int,
    vocab: int,
    device: str,
    repeats: int,
    amp: str | None = None,
    inputs: str = "random",
    tf32: int = 0,
) -> dict:
    opts = METHODS[method][1]
    os.environ[KERNEL_ENV] = opts.get("kernel", "eager")  # the chunk kernel (hf_heads.losses.chunks)
    _set_tf32(bool(tf32))
    try:
        data = _inputs(n, hidden, vocab, device, opts.get("frozen", False), inputs)
        return {"method": method, **measure(make_step(method, data, device, amp), device, repeats)}
    finally:
        _set_tf32(False)


def traffic(method: str, n: int, hidden: int, vocab: int, device: str, amp: str | None) -> dict[str, int] | None:
    """The row's bytes per step by its own count (benchmarks/common/_traffic.py), or None where not counted."""
    kind, opts, _ = METHODS[method]
    if kind == "torch" or (kind == "naive" and any(k not in ROW_OPTIONS for k in opts)):
        return None  # torch's chunking and the naive margin references: not counted
    half = AMP_DTYPES.get(amp, torch.float32).itemsize
    gemm = half if amp else 4
    weight = half if (opts.get("half") and amp) else 4
    bias = opts.get("bias", True)
    frozen = opts.get("frozen", False)
    if kind == "naive":
        impl = "naive-upcast" if opts.get("upcast") else "naive"
        return step_bytes(
            impl, n, hidden, vocab, gemm=gemm, weight=weight, bias=bias, frozen=frozen,
            autocast_log_softmax=amp is not None and not opts.get("half"),
        )  # fmt: skip
    if kind == "floor":
        return step_bytes("floor", n, hidden, vocab, gemm=gemm)
    if kind in PEERS:
        return step_bytes(kind, n, hidden, vocab, gemm=gemm, weight=weight, bias=bias and kind == "liger")
    if any(k in opts for k in ("margin", "word_norm", "context_norm")):
        return None  # the margin rows' norms and target rows: not counted
    from hf_heads.losses.kernels import adds_half_products_in_place, writes_half_products_in_float32

    kernel = opts.get("kernel", "eager")
    amp_dtype = AMP_DTYPES.get(amp, torch.float32)
    in_place = adds_half_products_in_place(torch.zeros(1, device=device), amp_dtype)
    direct = writes_half_products_in_float32(torch.zeros(1, device=device), amp_dtype)
    return step_bytes(
        f"hf_heads-{kernel}", n, hidden, vocab, gemm=gemm, weight=weight,
        chunk_rows=rows_per_chunk(n, vocab, device=device), bias=bias, frozen=frozen, in_place_dw=in_place,
        gemm_writes_float32=direct, scales_by_grad_out=device != "cpu",
    )  # fmt: skip


def measured_peak_tflops(device: str, dtype: torch.dtype, size: int, calls: int = 10) -> float:
    """The rate of one (size, size) @ (size, size) matmul in `dtype` (under the current TF32 setting), median of
    `calls` after a warm-up: TFLOP/s."""
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    a @ b
    sync()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        a @ b
        sync()
        times.append(time.perf_counter() - start)
    return 2 * size**3 / statistics.median(times) / 1e12


def flop_floor_rows(n: int, hidden: int, vocab: int, device: str, amp: str | None, tf32: int) -> dict[str, dict]:
    """The "FLOP floor" rows: 6·N·H·V FLOPs (and 4·N·H·V, frozen W) at the measured peak and the vendor's."""
    key = amp or ("tf32" if tf32 else "fp32")
    dtype = AMP_DTYPES.get(amp, torch.float32)
    _set_tf32(bool(tf32))
    try:
        measured = measured_peak_tflops(device, dtype, 8192 if device.startswith("cuda") else 1024)
    finally:
        _set_tf32(False)
    peaks = {f"measured: one matmul, {measured:.0f} TFLOP/s" if measured >= 10 else
             f"measured: one matmul, {measured:.2g} TFLOP/s": measured}  # fmt: skip
    if device.startswith("cuda"):
        name = torch.cuda.get_device_name(device)
        vendor = next((v for part, v in VENDOR_PEAK_TFLOPS.items() if part in name), None)
        if vendor is not None:
            peaks[f"the vendor's dense {key} figure, {vendor[key]:.0f} TFLOP/s"] = vendor[key]
    rows = {}
    for label, tflops in peaks.items():
        for frozen, products in ((False, 6), (True, 4)):
            name = f"FLOP floor{', frozen W' if frozen else ''} ({products}·N·H·V at {label})"
            rows[name] = {"method": name, "seconds": products * n * hidden * vocab / (tflops * 1e12), "computed": 1}
    return rows


def run_pair(method: str, n: int, hidden: int, vocab: int, device: str, repeats: int, amp: str | None = None) -> dict:
    """`repeats` pairs of calls, `method`'s step and hf_heads softmax's on the same inputs in one process, in the
    order AB, BA, AB, ... after one warm-up call of each: each pair's ratio is free of the machine's drift between
    processes and over minutes (the eager kernel; the methods' own table gives their memory)."""
    os.environ[KERNEL_ENV] = "eager"
    inputs = _inputs(n, hidden, vocab, device, False)
    steps = {"method": make_step(method, inputs, device, amp), "softmax": make_step(SOFTMAX, inputs, device, amp)}
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    for step in steps.values():
        step()
    sync()
    times: dict[str, list[float]] = {"method": [], "softmax": []}
    for i in range(repeats):
        for name in ("method", "softmax") if i % 2 == 0 else ("softmax", "method"):
            start = time.perf_counter()
            steps[name]()
            sync()
            times[name].append(time.perf_counter() - start)
    ratios = [a / b for a, b in zip(times["method"], times["softmax"], strict=True)]
    return {
        "method": method,
        "seconds": statistics.median(times["method"]),
        "times": times["method"],
        "softmax_times": times["softmax"],
        "ratios": ratios,
    }


def paired_rows(methods: list[str], options: dict, rounds: int) -> list[dict]:
    """`run_pair` for every method (each in a fresh process), in turn, `rounds` times; per method its pairs pooled
    (or the row of its first failure, with its "error"), as `interleaved` pools the table's calls."""
    runs: dict[str, list[dict]] = {m: [] for m in methods}
    for _ in range(rounds):
        for method in methods:
            runs[method].append(run_isolated(__file__, method, {**options, "paired": 1}))
    out = []
    for method, rows in runs.items():
        failed = [r for r in rows if "error" in r]
        keys = ("times", "softmax_times", "ratios")
        out.append(failed[0] if failed else {"method": method, **{k: [x for r in rows for x in r[k]] for k in keys}})
    return out


def print_paired(rows: list[dict]) -> None:
    """The paired table: each method's median seconds, softmax's in the same pairs, and the ratios' median
    (min–max)."""
    pairs = max((len(r["ratios"]) for r in rows if "error" not in r), default=0)
    print(
        f"| method | s / step, median | {SOFTMAX} in the same pairs | "
        f"time vs {SOFTMAX}, median (min–max) of {pairs} pairs |"
    )
    print("|---|---:|---:|---:|")
    for r in rows:
        if "error" in r:
            continue
        ratios = r["ratios"]
        print(
            f"| {r['method']} | {statistics.median(r['times']):.3f} | {statistics.median(r['softmax_times']):.3f} | "
            f"{statistics.median(ratios):.3f}× ({min(ratios):.3f}–{max(ratios):.3f}) |"
        )
    print_failures({r["method"]: r for r in rows})


def main() -> None:
    parser = bench_parser(__doc__, vocab=[50_000, 200_000])
    parser.add_argument("--methods", nargs="+", default=None, help="only the rows whose names start with these")
    parser.add_argument("--exclude", nargs="+", default=(), help="leave out the rows whose names contain these")
    parser.add_argument(
        "--paired",
        type=int,
        choices=[0, 1],
        default=0,
        help="1: time each hf_heads row (eager, trainable W) against hf_heads softmax in pairs of calls in one "
        "process (`--repeats` pairs per round) instead of the table",
    )
    parser.add_argument(
        "--inputs", choices=["random", "peaked"], default="random", help="random h, W or peaked (_peaked.py)"
    )
    parser.add_argument("--tf32", type=int, choices=[0, 1], default=0, help="1: TF32 float32 matmuls (CUDA)")
    parser.add_argument(
        "--compile_backend", default="inductor", help="the compiled kernel's torch.compile backend (eager: no codegen)"
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.one:
        from hf_heads.losses.kernels import CompiledKernel

        CompiledKernel.backend = args.compile_backend
        if args.paired:
            row = run_pair(args.one, args.tokens, args.hidden, args.vocab[0], args.device, args.repeats, args.autocast)
        else:
            row = run_one(
                args.one, args.tokens, args.hidden, args.vocab[0], args.device, args.repeats, args.autocast,
                args.inputs, args.tf32,
            )  # fmt: skip
        print(json.dumps(row))
        return
    precision = f"autocast {args.autocast}" if args.autocast else f"float32, TF32 {'on' if args.tf32 else 'off'}"
    print(
        f"# output layer forward+backward, N={args.tokens} tokens, H={args.hidden}, {precision}, {args.inputs} inputs"
    )
    print(device_line(args.device))
    for vocab in args.vocab:
        methods = list(METHODS)
        if args.methods:
            methods = [m for m in methods if any(m.startswith(prefix) for prefix in args.methods)]
        methods = [m for m in methods if not any(part in m for part in args.exclude)]
        missing = {m: why for m in methods if (why := _unavailable(m, args.device, args.autocast))}
        methods = [m for m in methods if m not in missing]
        options = dict(
            tokens=args.tokens,
            hidden=args.hidden,
            vocab=vocab,
            device=args.device,
            repeats=args.repeats,
            threads=args.threads,
            autocast=args.autocast,
            inputs=args.inputs,
            tf32=args.tf32,
            compile_backend=args.compile_backend,
        )
        print(f"\nV={vocab:,}\n")
        if args.paired:
            print_paired(paired_rows([m for m in methods if _pairs_with_softmax(m)], options, args.rounds))
            continue
        by_name = {r["method"]: r for r in interleaved(__file__, methods, options, args.rounds)}
        print_table(methods, by_name, args, vocab)
        if missing:
            print("\n" + "\n".join(f"not available here: {name}: {why}" for name, why in missing.items()))


def print_table(methods: list[str], by_name: dict[str, dict], args, vocab: int) -> None:
    """The table: each measured row (then the computed FLOP floors) with its bytes, and its time and memory against
    the naive softmax, its own naive reference and hf_heads softmax; failed rows listed under it."""
    calls = args.repeats * args.rounds
    print(
        f"| method | s / step, median (min–max) of {calls} | peak MiB | GB moved per step, own count "
        f"((rows, V) + (V, H)) | time vs naive softmax | memory vs naive softmax | time vs its naive reference | "
        f"time vs {SOFTMAX} |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    measured = without_failures(by_name)
    naive = measured.get(NAIVE)

    def ratio(r: dict, ref: dict | None, key: str = "seconds") -> str:
        return "—" if ref is None or key not in r else f"{r[key] / max(ref[key], 1e-12):.2f}×"

    for name in [m for m in methods if m in measured]:
        r, kind, ref = measured[name], METHODS[name][0], METHODS[name][2]
        own = measured.get(ref) if ref not in (None, NAIVE) else None
        ours = kind == "ours" and name != SOFTMAX
        counted = traffic(name, args.tokens, args.hidden, vocab, args.device, args.autocast)
        cells = [
            seconds_cell(r), f"{r['peak_mib']:.0f}", gb_cell(counted), ratio(r, naive), ratio(r, naive, "peak_mib"),
            ratio(r, own), ratio(r, measured.get(SOFTMAX)) if ours else "—",
        ]  # fmt: skip
        print(f"| {name} | " + " | ".join(cells) + " |")
    if naive is not None:  # the computed floors, after the measured rows
        for name, r in flop_floor_rows(args.tokens, args.hidden, vocab, args.device, args.autocast, args.tf32).items():
            print(f"| {name} | {r['seconds']:.4f} (computed) | — | — | {ratio(r, naive)} | — | — | — |")
    print_failures(by_name)


if __name__ == "__main__":
    main()
