#!/usr/bin/env python
"""Correctness of every chunk kernel on the device: the fused cross-entropy of each registered kernel against a naive
float64 reference (loss and gradients, every option of the kernel seam, shapes that are no multiple of the chunk
size), then under autocast bf16 against float32 (loss within 2%, each gradient within 5%, finite, in each input's
dtype). Then every family's head: its training loss and gradients on the device against the same head on the CPU
(float64), and its training step (loss and backward, padded labels, a tensor num_items_in_batch) under
`torch.cuda.set_sync_debug_mode("error")`: any host synchronisation fails the case.

    python benchmarks/gpu/gpu_check.py --device cuda      # prints one line per case and exits 1 on any mismatch
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from copy import deepcopy
from unittest.mock import patch

import torch

from hf_heads.losses import CrossEntropy
from hf_heads.losses.chunks import CHUNK_KERNELS, KERNEL_ENV
from hf_heads.losses.fused_linear import chunked_loss
from hf_heads.losses.kernels import adds_half_products_in_place, writes_half_products_in_float32

# bf16 gradients against float32's (relative Frobenius error): 0.3-1%, and 2.3% with top-k, whose support moves with
# the rounding of the logits (every kernel alike, on a CPU at --rows 100 --vocab 503); a wrong accumulation: ~100%
GRAD_TOL = 0.05
OPTIONS = {
    "plain": {},
    "smoothing": {"label_smoothing": 0.1},
    "softcap": {"softcap": 30.0},
    "target-logit": {"target": True},
    "top-k": {"top_k": 20},
    "top-k-target-smoothing": {"top_k": 20, "target": True, "label_smoothing": 0.1},
    "frozen-w": {"frozen": True},  # W without a gradient (LoRA, linear probing): no weight product
    "z-loss": {"z_loss": 1e-3},
    "class-weights": {"class_weight": True},  # a weight per class, drawn in check_kernel
    "z-loss-weights-top-k": {"z_loss": 1e-3, "class_weight": True, "top_k": 20, "target": True},
    "predictions": {"predictions": True},  # same-pass argmax against the naive logits' argmax
}


def engine(h, w, b, y, *, top_k=None, label_smoothing=0.0, z_loss=0.0, class_weight=None, **rest):
    """The chunked loss (`chunked_loss`, what the kernels serve) with the cross-entropy's options of OPTIONS."""
    criterion = CrossEntropy(top_k=top_k, label_smoothing=label_smoothing, z_loss=z_loss, class_weight=class_weight)
    return chunked_loss(h, w, b, y, criterion=criterion, **rest)


def naive(h, w, b, y, t, top_k=None, label_smoothing=0.0, softcap=None, z_loss=0.0, class_weight=None):
    z = h @ w.T + b
    if t is not None:
        z = z.scatter(1, y[:, None], t[:, None])
    if softcap is not None:
        z = softcap * torch.tanh(z / softcap)
    support = z if top_k is None else z.topk(top_k, dim=1).values
    lse = torch.logsumexp(support, dim=1)
    loss = lse - z.gather(1, y[:, None]).squeeze(1)
    rows = (1 - label_smoothing) * loss + label_smoothing * (lse - support.mean(1))
    mean = rows.mean() if class_weight is None else (class_weight[y] * rows).sum() / class_weight[y].sum()
    return mean + z_loss * (lse**2).mean()  # the z-loss: averaged over tokens, not class-weighted


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=5003)
    ap.add_argument("--kernels", nargs="+", default=None, help="these chunk kernels only (default: every one)")
    ap.add_argument(
        "--options",
        nargs="+",
        default=None,
        choices=sorted(OPTIONS),
        help="these option sets only (default: every one)",
    )
    ap.add_argument(
        "--compile_backend", default="inductor", help="the compiled kernel's torch.compile backend (eager: no codegen)"
    )
    a = ap.parse_args()
    from hf_heads.losses.kernels import CompiledKernel
    from hf_heads.losses.triton_kernel import TritonKernel
    from hf_heads.losses.triton_programs import _scales_on

    CompiledKernel.backend = a.compile_backend
    failures = 0
    in_place = adds_half_products_in_place(torch.zeros(1, device=a.device), torch.bfloat16)
    print(f"bf16 products added into the float32 weight gradient inside the GEMM (addmm out_dtype): {in_place}")
    direct = writes_half_products_in_float32(torch.zeros(1, device=a.device), torch.bfloat16)
    print(f"bf16 products written as float32 logits by the GEMM (mm out_dtype): {direct}")
    if TritonKernel().available(torch.device(a.device)):  # its first check: 2.5 and 1 against torch, else a warning
        scales = _scales_on(torch.device(a.device))
        print(f"{'ok  ' if scales else 'FAIL'} gradients scaled by d loss on the device (Triton; d loss = 1: no pass)")
        failures += not scales
    g = torch.Generator(device="cpu").manual_seed(0)
    h32 = torch.randn(a.rows, a.hidden, generator=g)
    w32 = torch.randn(a.vocab, a.hidden, generator=g) * 0.2
    b32, t32 = torch.randn(a.vocab, generator=g) * 0.1, torch.randn(a.rows, generator=g)
    y = torch.randint(0, a.vocab, (a.rows,), generator=g).to(a.device)
    for kernel in sorted(a.kernels or CHUNK_KERNELS):
        os.environ[KERNEL_ENV] = kernel
        for name, options in OPTIONS.items():
            if a.options is not None and name not in a.options:
                continue
            try:
                ok, detail = check_kernel(a, kernel, options, (h32, w32, b32, t32), y)
            except Exception as error:  # noqa: BLE001 - one failing case is reported, the others still run
                ok, detail = False, f"error: {type(error).__name__}: {str(error).splitlines()[0][:160]}"
            failures += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {kernel:11s} {name:24s} {detail}", flush=True)
    failures += check_heads(a.device)
    failures += check_exports(a.device)
    failures += check_scoring(a.device)
    from hf_heads.losses.chunks import automatic_kernel

    chosen = {v: automatic_kernel(torch.device(a.device), torch.bfloat16, v) for v in (50_000, 256_000)}
    print("automatic chunk kernel for bf16 products: " + ", ".join(f"V={v:,} {k}" for v, k in chosen.items()))
    print(f"{failures} failures")
    return 1 if failures else 0


def check_kernel(a, kernel: str, options: dict, data: tuple, y: torch.Tensor) -> tuple[bool, str]:
    """One kernel and option set: float64 against the naive reference, bf16 autocast against float32."""
    h32, w32, b32, t32 = data
    opts = dict(options)
    use_t = opts.pop("target", False)
    frozen = opts.pop("frozen", False)
    predictions = opts.pop("predictions", False)
    if opts.get("class_weight"):
        opts["class_weight"] = torch.rand(w32.shape[0], generator=torch.Generator().manual_seed(2)) + 0.5
    results = {}
    for precision in ("float64", "bf16"):
        dtype = torch.float64 if precision == "float64" else torch.float32
        h, w, b, t = (x.to(a.device, dtype, copy=True).requires_grad_() for x in (h32, w32, b32, t32))
        w.requires_grad_(not frozen)
        if "class_weight" in opts:
            opts["class_weight"] = opts["class_weight"].to(a.device, dtype)
        inputs = (h, b) if frozen else (h, w, b)
        kw = dict(target_logit=t if use_t else None, chunk_size=333, **opts)
        if precision == "float64":
            loss = engine(h, w, b, y, **kw)
            ref = naive(h, w, b, y, t if use_t else None, **opts)
            got = torch.autograd.grad(loss, inputs)
            want = torch.autograd.grad(ref, inputs)
            ok = torch.allclose(loss, ref, rtol=1e-9) and all(
                torch.allclose(x, z, rtol=1e-7, atol=1e-10) for x, z in zip(got, want, strict=True)
            )
            detail = f"|Δloss| {abs(loss - ref).item():.1e}"
            if predictions:  # the kernel's own argmax (lowest index on a tie) and each label's rank in that order
                out = engine(h, w, b, y, returns=("rank",), **kw)
                z = h @ w.T + b
                z_y = z.gather(1, y[:, None])
                lower = torch.arange(z.shape[1], device=z.device)[None] < y[:, None]
                want_rank = (z > z_y).sum(1) + ((z == z_y) & lower).sum(1)
                same = bool((out.predictions == z.argmax(1)).all())
                same_rank = bool((out.target_rank == want_rank).all())
                ok = ok and same and same_rank and torch.allclose(out.loss, ref, rtol=1e-9)
                detail += f", predictions {'equal' if same else 'DIFFER'}, ranks {'equal' if same_rank else 'DIFFER'}"
            results[precision] = (ok, detail)
        else:
            full = engine(h, w, b, y, **kw)
            want = torch.autograd.grad(full, inputs)
            with torch.autocast(a.device.split(":")[0], dtype=torch.bfloat16):
                loss = engine(h, w, b, y, **kw)
            loss.backward()
            rel = abs(loss.item() - full.item()) / abs(full.item())
            finite = all(torch.isfinite(x.grad).all() for x in inputs)
            # each gradient's relative error (Frobenius) against float32's
            grad_rel = max(
                float((x.grad - g).norm() / g.norm().clamp_min(1e-30)) for x, g in zip(inputs, want, strict=True)
            )
            ok = (
                rel <= 0.02
                and grad_rel <= GRAD_TOL
                and finite
                and all(x.grad.dtype == torch.float32 for x in inputs)
                and (w.grad is None) == frozen
            )
            results[precision] = (ok, f"bf16 vs float32 {rel:.2%}, gradients {grad_rel:.2%}")
    return all(r[0] for r in results.values()), "; ".join(r[1] for r in results.values())


HEADS = {
    "softmax": {},
    "softmax, smoothing": {"label_smoothing": 0.1},
    "sparse k=20": {"family": "sparse", "k": 20},
    "margin arc, log-unigram, max-norm": {
        "family": "margin", "margin": "arc", "m": 0.2, "word_norm": "log-unigram", "context_norm": "max-norm",
    },
    "margin lsm m=2, unigram": {"family": "margin", "margin": "lsm", "m": 2, "word_norm": "unigram"},
    "margin cos, scale 30": {"family": "margin", "margin": "cos", "m": 0.1, "scale": 30.0},
    "softmax z-loss, balanced class weights": {"z_loss": 1e-3, "class_weights": "balanced"},
    "margin arc, z-loss, class weights": {
        "family": "margin", "margin": "arc", "m": 0.2, "z_loss": 1e-3, "class_weights": "balanced",
    },
    "sampled ce is, log-uniform": {"family": "sampled", "criterion": "ce", "method": "is", "num_samples": 64},
    "sampled bce nce, hits removed": {
        "family": "sampled", "criterion": "bce", "method": "nce", "num_samples": 64, "remove_accidental_hits": True,
    },
    "sampled bce full": {"family": "sampled", "criterion": "bce", "method": "full"},
}  # fmt: skip


def check_heads(device: str, hidden: int = 48, vocab: int = 3001) -> int:
    """Each head's loss and gradients on `device` (float32) against the CPU (float64) with the same parameters and
    noise draws; then one training step under the CUDA sync debug mode. Returns the number of failures (a case
    that raises is one, and the others still run)."""
    os.environ.pop(KERNEL_ENV, None)  # each head's own (automatic) chunk kernel choice
    failures = 0
    g = torch.Generator().manual_seed(1)
    states = torch.randn(4, 97, hidden, generator=g)  # (B, T, H)
    labels = torch.randint(0, vocab, (4, 97), generator=g)
    labels[1, 50:] = -100  # padding
    counts = torch.randint(1, 10_000, (vocab,), generator=g).float()
    for name, options in HEADS.items():
        try:
            ok, detail = check_head(device, name, options, (states, labels, counts), g, hidden, vocab)
        except Exception as error:  # noqa: BLE001 - one failing head is reported, the others still run
            ok, detail = False, f"error: {type(error).__name__}: {str(error).splitlines()[0][:160]}"
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} head {name:40s} {detail}", flush=True)
    return failures


def check_head(device: str, name: str, options: dict, data: tuple, g, hidden: int, vocab: int) -> tuple[bool, str]:
    """One head: its loss and gradients on `device` against the CPU in float64, then its step under the sync debug
    mode (CUDA)."""
    from hf_heads.heads import make_head
    from hf_heads.losses import sampled

    states, labels, counts = data
    torch.manual_seed(0)
    head = make_head(hidden, vocab, {"family": "softmax", "chunk_size": 100, **options}).train()
    if head.needs_counts:
        head.set_word_counts(counts)
    noise = head.noise_probs() if hasattr(head, "noise_probs") else None
    draws = None if noise is None else torch.multinomial(noise, head.options.num_samples, True, generator=g)
    results = []
    for dev, dtype in (("cpu", torch.float64), (device, torch.float32)):
        copy = deepcopy(head).to(dev, dtype)
        x = states.to(dev, dtype).requires_grad_()
        fixed = None if draws is None else draws.to(dev)
        with patch.object(sampled, "draw_samples", lambda *args, fixed=fixed, **kwargs: fixed):  # same draws
            loss = copy.loss(x, labels.to(dev), num_items_in_batch=torch.tensor(300, device=dev))
        grads = torch.autograd.grad(loss, (x, copy.weight))
        results.append([loss.detach().double().cpu(), *(t.double().cpu() for t in grads)])
    close = all(torch.allclose(a, b, rtol=1e-3, atol=1e-5) for a, b in zip(*results, strict=True))
    synced = ""
    if device.startswith("cuda"):
        step = deepcopy(head).to(device)
        if step.needs_counts:
            step.counts()  # read once when the counts are set, not at every step
        if noise is not None:
            step.noise_probs()  # likewise
        x = states.to(device).requires_grad_()
        y, items = labels.to(device), torch.tensor(300, device=device)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            step.loss(x, y, num_items_in_batch=items).backward()
        except RuntimeError as error:
            frames = [f for f in traceback.extract_tb(error.__traceback__) if "hf_heads" in f.filename]
            where = f" at {frames[-1].filename.split('hf_heads/')[-1]}:{frames[-1].lineno}" if frames else ""
            synced = f"; host sync{where}: {str(error).splitlines()[0][:80]}"
        finally:
            torch.cuda.set_sync_debug_mode("default")
    delta = float((results[0][0] - results[1][0]).abs())
    return close and not synced, f"|Δloss| vs CPU float64 {delta:.1e}{synced}"


def check_exports(device: str) -> int:
    """`to_base` of a tiny causal LM and a tiny classifier on `device`: the export's own check compares the hf_heads
    model's log-probabilities with the base model's on probe inputs made on that device. Returns the failures."""
    from transformers import AutoConfig

    from hf_heads import HeadsConfig, HeadsForCausalLM, HeadsForSequenceClassification

    small = dict(num_hidden_layers=1, num_attention_heads=2, vocab_size=97)
    cases = {
        "causal LM, margin cos": (
            HeadsForCausalLM,
            AutoConfig.for_model(
                "gpt2", n_embd=32, n_layer=1, n_head=2, vocab_size=97, n_positions=32, bos_token_id=1, eos_token_id=2
            ),
            {"family": "margin", "margin": "cos", "m": 0.1},
        ),
        "classifier, softmax": (
            HeadsForSequenceClassification,
            AutoConfig.for_model("bert", hidden_size=32, intermediate_size=32, **small),
            {"family": "softmax"},
        ),
    }
    failures = 0
    for name, (cls, backbone, head) in cases.items():
        torch.manual_seed(0)
        try:
            model = cls(HeadsConfig(backbone=backbone.to_dict(), head=head)).eval().to(device)
            base = model.to_base()  # verify=True: the probe on `device`
            ok, detail = next(base.parameters()).device.type == torch.device(device).type, "same distribution"
        except Exception as error:  # noqa: BLE001 - one failing export is reported, the other still runs
            ok, detail = False, f"error: {type(error).__name__}: {str(error).splitlines()[0][:160]}"
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} to_base {name:32s} {detail}", flush=True)
    return failures


def check_scoring(device: str) -> int:
    """`token_log_probs` of a tiny BART seq2seq model (softmax head) on `device` against the same model on the CPU:
    the source, decoder inputs and targets must be placed on the model's device. Returns the failures."""
    from transformers import AutoConfig

    from hf_heads import HeadsConfig, HeadsForSeq2SeqLM
    from hf_heads.data import build_word_tokenizer
    from hf_heads.scoring import token_log_probs

    tok = build_word_tokenizer([" ".join(f"w{i:02d}" for i in range(4, 50))])  # <unk> <pad> <s> </s> w04 ... w49
    layers = dict(encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2)
    backbone = AutoConfig.for_model(
        "bart", vocab_size=50, d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64, pad_token_id=1, bos_token_id=2,
        eos_token_id=3, decoder_start_token_id=3, **layers,
    )  # fmt: skip
    texts, sources = ["w05 w09 w17", "w07 w07 w30 w12"], ["w04 w08", "w11 w12 w13"]
    torch.manual_seed(0)
    model = HeadsForSeq2SeqLM(HeadsConfig(backbone=backbone.to_dict(), head={"family": "softmax"})).eval()
    try:
        want = token_log_probs(model, tok, texts, sources=sources)
        got = token_log_probs(model.to(device), tok, texts, sources=sources)
        worst = max(float((g.cpu() - w).abs().max()) for g, w in zip(got, want, strict=True))
        ok, detail = worst <= 1e-4, f"max |d log p| {worst:.2g} against the CPU"
    except Exception as error:  # noqa: BLE001 - reported as a failure
        ok, detail = False, f"error: {type(error).__name__}: {str(error).splitlines()[0][:160]}"
    print(f"{'ok  ' if ok else 'FAIL'} token_log_probs seq2seq on the device  {detail}", flush=True)
    return not ok


if __name__ == "__main__":
    sys.exit(main())
