#!/usr/bin/env python
"""A whole-model fine-tuning step as the HF Trainer runs it with `bf16=True` (float32 weights, bf16 autocast, the
loss, backward, AdamW step, zero_grad) on a Llama-style decoder built from a config with a real vocabulary: tokens
per second and peak memory for each output layer, and the largest batch each fits under a memory cap.

    python benchmarks/speed/bench_whole_model.py --device cuda                 # V=128,256, H=2048, 4 layers, 8 x 1024
    python benchmarks/speed/bench_whole_model.py --device cuda --memory_cap_gib 40 --search_trials 6

Rows: transformers' own `LlamaForCausalLM` (its loss casts the (B, T, V) logits to float32, `ForCausalLMLoss`);
Liger-Kernel's patched `LlamaForCausalLM` (`apply_liger_kernel_to_llama` with only `fused_linear_cross_entropy=True`:
the rest of the model is left as transformers has it, so only the head differs; CUDA, where the package imports;
run last in a process, since the patch changes the class); hf_heads' `HeadsForCausalLM` on the same backbone config
with the softmax, margin (arc m=0.001 + log-unigram + max-norm), sparse (k=20) and sampled (BCE-NCE, K=8192
log-uniform noise) heads. Token ids are random; word counts random. Seconds are the median (min–max) of `--repeats`
steps after two warm-up steps; peak memory is `torch.cuda.max_memory_allocated` over the timed steps (weights,
gradients, AdamW's state, activations: the whole process), on a CPU the process's peak resident set. The batch
search (CUDA, `--search_trials` > 0) doubles the batch from `--batch` while a step's peak stays under
`--memory_cap_gib` and does not run out of memory, then bisects between the last batch that fit and the first that
did not, `--search_trials` steps in all; it reports the largest batch that fit (">= b" when every trial fit).
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common: the shared helpers
from _timing import bench_parser, device_line, print_failures, rss_mib, run_isolated, without_failures  # noqa: E402

LIGER = "Liger-Kernel patched LlamaForCausalLM (fused linear CE)"
TRANSFORMERS = "transformers LlamaForCausalLM"
HEADS = {
    TRANSFORMERS: None,
    "hf_heads softmax": {"family": "softmax"},
    "hf_heads margin arc m=0.001 + log-unigram + max-norm": {
        "family": "margin", "margin": "arc", "m": 0.001, "word_norm": "log-unigram", "context_norm": "max-norm",
    },
    "hf_heads sparse k=20": {"family": "sparse", "k": 20},
    "hf_heads sampled bce-nce K=8192 log-uniform": {
        "family": "sampled", "criterion": "bce", "method": "nce", "num_samples": 8192, "noise": "log-uniform",
    },
    LIGER: "liger",
}  # fmt: skip


def llama_config(vocab: int, hidden: int, layers: int, block: int):
    """A Llama-3.2-1B-like decoder config (its intermediate size 4 H, 16 heads of 128 / H/16, 8 KV heads)."""
    from transformers import LlamaConfig

    heads = max(1, hidden // 128)
    return LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=max(1, heads // 2), max_position_embeddings=max(block, 64),
        tie_word_embeddings=False,
    )  # fmt: skip


def unavailable(name: str, device: str) -> str | None:
    """Why a row cannot run here (None: it can)."""
    if HEADS[name] == "liger":
        if importlib.util.find_spec("liger_kernel") is None:
            return "the liger_kernel package does not import (make gpu-wheels)"
        if not device.startswith("cuda"):
            return "its Triton kernels run on CUDA only"
    return None


def build(name: str, config, device: str):
    """The model of row `name` (float32 weights, training mode) and its AdamW."""
    from transformers import LlamaForCausalLM

    from hf_heads import HeadsConfig, HeadsForCausalLM

    spec = HEADS[name]
    torch.manual_seed(0)
    if spec == "liger":
        from liger_kernel.transformers import apply_liger_kernel_to_llama

        apply_liger_kernel_to_llama(
            rope=False, rms_norm=False, swiglu=False, cross_entropy=False, fused_linear_cross_entropy=True
        )
    with torch.device(device):  # initialised where it trains (a CPU init of ~1B parameters takes seconds)
        if spec is None or spec == "liger":
            model = LlamaForCausalLM(config)
        else:
            if "num_samples" in spec:
                spec = {**spec, "num_samples": min(spec["num_samples"], config.vocab_size // 2)}  # K < V at toy sizes
            model = HeadsForCausalLM(HeadsConfig(backbone=config.to_dict(), head=spec, tie_word_embeddings=False))
    if getattr(getattr(model, "head", None), "needs_counts", False):
        model.set_word_counts(torch.randint(1, 1000, (config.vocab_size,)).float())
    model = model.to(device).train()
    return model, torch.optim.AdamW(model.parameters(), lr=1e-5)


def make_step(model, opt, batch: int, block: int, vocab: int, device: str):
    """One Trainer-style bf16 step on random token ids (B, T)."""
    x = torch.randint(0, vocab, (batch, block), device=device)

    def step():
        with torch.autocast(device.split(":")[0], dtype=torch.bfloat16):
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def fits(model, opt, vocab: int, device: str, batch: int, block: int, cap: int) -> bool:
    """Whether one step of `model` at `batch` stays under `cap` bytes of peak memory without running out."""
    try:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        make_step(model, opt, batch, block, vocab, device)()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() <= cap
    except torch.OutOfMemoryError:
        opt.zero_grad(set_to_none=True)
        return False


def largest_batch(model, opt, vocab: int, device: str, start: int, block: int, cap: int, trials: int) -> str:
    """Doubling from `start`, then bisection, `trials` steps in all: the largest batch found to fit ("—" when even
    `start` does not, ">= b" when every trial fit). The model and its optimizer are reused (their state counts)."""
    good, bad, tried = 0, None, 0
    batch = start
    while tried < trials:
        tried += 1
        if fits(model, opt, vocab, device, batch, block, cap):
            good = batch
            batch = batch * 2 if bad is None else (good + bad) // 2
        else:
            bad = batch
            batch = (good + bad) // 2
        if bad is not None and bad - good <= 1:
            break
        if bad is not None and batch <= good:
            break
    if good == 0:
        return "—"
    return str(good) if bad is not None else f">= {good}"


def run_one(name: str, a) -> dict:
    config = llama_config(a.vocab, a.hidden, a.layers, a.block)
    model, opt = build(name, config, a.device)
    step = make_step(model, opt, a.batch, a.block, a.vocab, a.device)
    cuda = a.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for _ in range(2):
        step()
    sync()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(a.repeats):
        start = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else rss_mib() / 1024
    row = {"method": name, "seconds": statistics.median(times), "min_s": min(times), "max_s": max(times)}
    row["peak_gib"] = peak
    del step
    if cuda and a.search_trials > 0:  # the same model and optimizer (its state already allocated), larger batches
        cap = int(a.memory_cap_gib * 2**30)
        row["largest_batch"] = largest_batch(model, opt, a.vocab, a.device, a.batch, a.block, cap, a.search_trials)
    return row


def main() -> None:
    parser = bench_parser(__doc__, tokens=8192, vocab=128_256)
    parser.set_defaults(hidden=2048, repeats=5)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--block", type=int, default=1024)
    parser.add_argument("--memory_cap_gib", type=float, default=40.0)
    parser.add_argument("--search_trials", type=int, default=0, help="batch-search steps per row (CUDA; 0: none)")
    parser.add_argument("--heads", nargs="+", default=None, help="only the rows whose names start with these")
    a = parser.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    if a.one:
        print(json.dumps(run_one(a.one, a)))
        return
    names = [n for n in HEADS if not a.heads or any(n.startswith(p) for p in a.heads)]
    missing = {n: why for n in names if (why := unavailable(n, a.device))}
    names = [n for n in names if n not in missing]
    print(
        f"# whole-model bf16 training step (autocast, AdamW): Llama-style, V={a.vocab:,}, H={a.hidden}, {a.layers} "
        f"layers, batch {a.batch} x {a.block} tokens, random token ids"
    )
    print(device_line(a.device) + f"; memory cap for the batch search {a.memory_cap_gib:g} GiB\n")
    options = dict(
        vocab=a.vocab, hidden=a.hidden, layers=a.layers, batch=a.batch, block=a.block, device=a.device,
        repeats=a.repeats, threads=a.threads, memory_cap_gib=a.memory_cap_gib, search_trials=a.search_trials,
    )  # fmt: skip
    rows = {n: run_isolated(__file__, n, options) for n in names}  # Liger last: its patch changes the class
    measured = without_failures(rows)
    base = measured.get(TRANSFORMERS)
    tokens = a.batch * a.block
    print(
        f"| output layer | tokens / s | s / step, median (min–max) of {a.repeats} | peak GiB | tokens / s vs "
        f"transformers | memory vs transformers | largest batch under {a.memory_cap_gib:g} GiB |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, r in measured.items():
        vs = ["—", "—"] if base is None else [
            f"{base['seconds'] / r['seconds']:.2f}×", f"{r['peak_gib'] / max(base['peak_gib'], 1e-9):.2f}×",
        ]  # fmt: skip
        spread = f"{r['seconds']:.3f} ({r['min_s']:.3f}–{r['max_s']:.3f})"
        cells = [f"{tokens / r['seconds']:,.0f}", spread, f"{r['peak_gib']:.2f}", *vs, r.get("largest_batch", "—")]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print_failures(rows)
    if missing:
        print("\n" + "\n".join(f"not available here: {n}: {why}" for n, why in missing.items()))


if __name__ == "__main__":
    main()
