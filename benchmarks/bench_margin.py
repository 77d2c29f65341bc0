#!/usr/bin/env python
"""Output-layer forward+backward: seconds and peak memory, naive logits vs chunked losses.

    python benchmarks/bench_margin.py                 # N=4096, H=512, V=50,000 and 200,000, CPU
    python benchmarks/bench_margin.py --vocab 50000 --device cuda
    python benchmarks/bench_margin.py --vocab 50000 --paired 1   # each hf_heads row against hf_heads softmax, paired

"three matmuls alone" is the floor of any exact method (h Wᵀ, G W and Gᵀ h, nothing else). The peers' fused
linear cross-entropy rows (Liger-Kernel, Cut Cross-Entropy: Triton, CUDA only) run where their package imports.
"compiled kernel" rows run the chunk engine's torch.compile'd kernel (`HF_HEADS_CHUNK_KERNEL=compiled`; its one-off
compilation is in the warm-up call, its compiler's memory in the peak); "triton kernel" rows the hand-written Triton
kernel, "triton-half kernel" rows its variant with half-precision logits under autocast (GPU only: left out on a
CPU). "naive logits, softmax" is a plain model's output layer
(`F.cross_entropy(F.linear(h, W, b), y)`: under `--autocast` a half-precision GEMM); the naive margin rows are
`margin_logits` (its products in float32, also under autocast), so under autocast compare the margin rows with the
naive softmax row as well. Each method runs in a fresh process; with `--rounds R` the methods run in turn
R times (so a slow spell of a noisy machine is shared by all of them) and each row reports the median, min and max
over all its timed calls. `--paired 1` times each hf_heads row (eager kernel, trainable W) against hf_heads softmax
instead: both steps on the same inputs in one process, alternating AB, BA, ... for `--repeats` pairs per round, and
reports the median (min–max) of the pairs' ratios, free of the drift between processes that the table's ratios carry.
Peak memory is what the loss adds on top of its inputs
(hidden, weight, bias and their gradients): on CUDA `torch.cuda.max_memory_allocated`, on the CPU
the growth of the process's peak resident set (ru_maxrss) over the level after the inputs were
allocated. Each process times `--repeats` calls after one warm-up call.
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import time

import torch
import torch.nn.functional as F
from _timing import (
    autocast,
    bench_parser,
    device_line,
    interleaved,
    measure,
    print_failures,
    ratio_cells,
    run_isolated,
    seconds_cell,
    without_failures,
)

from hf_heads.losses import margin_cross_entropy, margin_logits
from hf_heads.losses.chunks import KERNEL_ENV

ARC = dict(margin="arc", m=0.001, word_norm="log-unigram", context_norm="max-norm")
LSM = dict(margin="lsm", m=2)
SOFTMAX = "hf_heads softmax"
# name: (implementation, margin options, the naive row it is compared with)
METHODS = {
    "naive logits, softmax": ("naive", {}, "naive logits, softmax"),
    "three matmuls alone (the floor)": ("floor", {}, "naive logits, softmax"),
    "torch F.linear_cross_entropy (chunked)": ("torch", {}, "naive logits, softmax"),
    "Liger-Kernel fused linear CE": ("liger", {}, "naive logits, softmax"),
    "Cut Cross-Entropy (no bias)": ("cce", {}, "naive logits, softmax"),
    SOFTMAX: ("ours", {}, "naive logits, softmax"),
    "hf_heads softmax, compiled kernel": ("ours", {"kernel": "compiled"}, "naive logits, softmax"),
    "hf_heads softmax, triton kernel": ("ours", {"kernel": "triton"}, "naive logits, softmax"),
    "hf_heads softmax, triton-half kernel": ("ours", {"kernel": "triton-half"}, "naive logits, softmax"),
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


def _liger(h, w, b, y):
    from liger_kernel.transformers.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyLoss

    return LigerFusedLinearCrossEntropyLoss()(w, h, y, b)


def _cce(h, w, b, y):  # Cut Cross-Entropy has no bias argument
    from cut_cross_entropy import linear_cross_entropy

    return linear_cross_entropy(h, w, y)


# peers' fused linear cross-entropy (CUDA only: Triton), run where their package imports; `pip download --no-deps -d
# .whl liger-kernel cut-cross-entropy` beside the repository, then benchmarks/gpu.sh installs them from there
PEERS = {"liger": _liger, "cce": _cce}
PEER_MODULES = {"liger": "liger_kernel", "cce": "cut_cross_entropy"}
AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _pairs_with_softmax(method: str) -> bool:
    """Whether `--paired` times this row against hf_heads softmax: another hf_heads row with the eager kernel and a
    trainable W, as softmax's."""
    kind, opts, _ = METHODS[method]
    return kind == "ours" and method != SOFTMAX and "kernel" not in opts and not opts.get("frozen", False)


def _available(kind: str, device: str) -> bool:
    """Whether a row of this kind can run here (the peers' kernels: a CUDA device and their package)."""
    if kind == "torch":
        return hasattr(F, "linear_cross_entropy")
    if kind in PEERS:
        return device.startswith("cuda") and importlib.util.find_spec(PEER_MODULES[kind]) is not None
    return True


def _inputs(n: int, hidden: int, vocab: int, device: str, frozen: bool) -> tuple:
    """h (n, H), W (V, H), b (V,), labels (n,) and word counts (V,), seeded; the gradients allocated up front (they
    belong to the inputs, not the method)."""
    torch.manual_seed(0)
    h = torch.randn(n, hidden, device=device, requires_grad=True)
    w = (torch.randn(vocab, hidden, device=device) * 0.05).requires_grad_(not frozen)
    b = torch.zeros(vocab, device=device, requires_grad=not frozen)
    y = torch.randint(0, vocab, (n,), device=device)
    counts = torch.randint(1, 10_000, (vocab,), device=device).float()
    for t in (h, w, b):
        if t.requires_grad:
            t.grad = torch.zeros_like(t)
    return h, w, b, y, counts


def make_step(method: str, inputs: tuple, device: str, amp: str | None = None):
    """One forward+backward of `method` on `inputs` (`_inputs`), as a function of no arguments."""
    kind, opts, _ = METHODS[method]
    opts = {k: v for k, v in opts.items() if k not in ("kernel", "frozen")}
    h, w, b, y, counts = inputs
    kw = {**opts, "word_counts": counts} if opts.get("word_norm", "no-mod") != "no-mod" else dict(opts)

    if kind == "floor":  # h Wᵀ, then d h = G W and d W = Gᵀ h with G the logits' size: what any exact method does

        def floor():
            with autocast(device, amp):
                z = h.detach() @ w.detach().T  # (N, V)
                h.grad.copy_(z @ w.detach())
                w.grad.copy_(z.T @ h.detach())
            return z

        return floor

    def forward():
        if kind == "naive" and not kw:  # a plain model: under autocast a half-precision GEMM (frozen: no d W)
            return F.cross_entropy(F.linear(h, w, b), y)
        if kind == "naive":  # the margin reference: its products in float32, also under autocast
            return F.cross_entropy(margin_logits(h, w, b, y, **kw), y)
        if kind == "torch":
            return F.linear_cross_entropy(h, w, y, linear_bias=b, options=torch.nn.LinearCrossEntropyOptions())
        if kind in PEERS:  # their Triton kernels take the half-precision tensors a bf16 model would hand them
            h_in, w_in = (h, w) if amp is None else (h.to(AMP_DTYPES[amp]), w.to(AMP_DTYPES[amp]))
            return PEERS[kind](h_in, w_in, b, y)
        return margin_cross_entropy(h, w, b, y, **kw)

    def step():
        with autocast(device, amp):
            loss = forward()
        loss.backward()
        return loss

    return step


def run_one(method: str, n: int, hidden: int, vocab: int, device: str, repeats: int, amp: str | None = None) -> dict:
    opts = METHODS[method][1]
    os.environ[KERNEL_ENV] = opts.get("kernel", "eager")  # the chunk kernel (hf_heads.losses.chunks)
    inputs = _inputs(n, hidden, vocab, device, opts.get("frozen", False))
    return {"method": method, **measure(make_step(method, inputs, device, amp), device, repeats)}


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
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.one:
        run = run_pair if args.paired else run_one
        row = run(args.one, args.tokens, args.hidden, args.vocab[0], args.device, args.repeats, args.autocast)
        print(json.dumps(row))
        return
    precision = f"autocast {args.autocast}" if args.autocast else "float32"
    print(f"# output layer forward+backward, N={args.tokens} tokens, H={args.hidden}, {precision}")
    print(device_line(args.device))
    for vocab in args.vocab:
        methods = [m for m in METHODS if _available(METHODS[m][0], args.device)]
        if args.device == "cpu":  # the Triton kernel runs on GPUs (on a CPU only under its interpreter, for tests)
            methods = [m for m in methods if not METHODS[m][1].get("kernel", "").startswith("triton")]
        if args.methods:
            methods = [m for m in methods if any(m.startswith(prefix) for prefix in args.methods)]
        methods = [m for m in methods if not any(part in m for part in args.exclude)]
        options = dict(
            tokens=args.tokens,
            hidden=args.hidden,
            vocab=vocab,
            device=args.device,
            repeats=args.repeats,
            threads=args.threads,
            autocast=args.autocast,
        )
        print(f"\nV={vocab:,}\n")
        if args.paired:
            print_paired(paired_rows([m for m in methods if _pairs_with_softmax(m)], options, args.rounds))
            continue
        by_name = {r["method"]: r for r in interleaved(__file__, methods, options, args.rounds)}
        calls = args.repeats * args.rounds
        print(
            f"| method | s / step, median (min–max) of {calls} | peak MiB | time vs naive | memory vs naive | "
            f"time vs {SOFTMAX} |"
        )
        print("|---|---:|---:|---:|---:|---:|")
        measured = without_failures(by_name)
        for name in [m for m in methods if m in measured]:
            r, naive = measured[name], METHODS[name][2]
            vs_naive = " | ".join(ratio_cells(r, measured.get(naive) if naive is not None else None))
            ours = METHODS[name][0] == "ours" and SOFTMAX in measured
            vs_softmax = ratio_cells(r, measured[SOFTMAX])[0] if ours else "—"
            print(f"| {name} | {seconds_cell(r)} | {r['peak_mib']:.0f} | {vs_naive} | {vs_softmax} |")
        print_failures(by_name)


if __name__ == "__main__":
    main()
