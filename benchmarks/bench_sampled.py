#!/usr/bin/env python
"""Sampled criteria vs full softmax: seconds per step and peak memory, side by side in one run.

    python benchmarks/bench_sampled.py            # V=200,000, K=8,192, N=2,048 tokens, H=512, CPU
    python benchmarks/bench_sampled.py --vocab 50000 --device cuda

Two measurements per criterion, each in a fresh process:
- `output layer`: forward+backward of the loss alone on random hidden states (N, H);
- `train step`: forward+backward+AdamW step of a 2-layer GPT-2-style decoder (hidden H, 8 heads,
  context 128) with the hf_heads head, batch N tokens.
Peak memory: on CUDA `torch.cuda.max_memory_allocated` over the step; on the CPU the growth of the
process's peak resident set over the level after set-up. Seconds: median of `--repeats` calls
after one warm-up call.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys

import torch
from _timing import measure

CRITERIA = [("ce", "full"), ("bce", "full"), ("mse", "full")] + [
    (c, m) for c in ("ce", "bce") for m in ("mcs", "is", "cps", "nce")
]


def head_section(criterion: str, method: str, k: int) -> dict:
    head = {"family": "sampled", "criterion": criterion, "method": method}
    return head if method == "full" else {**head, "num_samples": k, "noise": "log-uniform"}


def run_one(mode, criterion, method, n, hidden, vocab, k, device, repeats) -> dict:
    from hf_heads import HeadsConfig, HeadsForCausalLM
    from hf_heads.heads.discrete import DiscreteHead

    torch.manual_seed(0)
    counts = torch.arange(vocab, 0, -1).float()
    head = head_section(criterion, method, k)
    if mode == "output layer":
        module = DiscreteHead(hidden, vocab, head).to(device)
        module.set_word_counts(counts)
        h = torch.randn(n, hidden, device=device, requires_grad=True)
        y = torch.randint(0, vocab, (n,), device=device)
        params = [h, *module.parameters()]

        def step():
            module.loss(h, y).backward()

    else:
        from transformers import GPT2Config

        seq = 128
        backbone = GPT2Config(n_embd=hidden, n_layer=2, n_head=8, n_positions=seq, vocab_size=vocab)
        model = HeadsForCausalLM(HeadsConfig(backbone=backbone.to_dict(), head=head, tie_word_embeddings=False))
        model.set_word_counts(counts)
        model.to(device).train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        x = torch.randint(0, vocab, (n // seq, seq), device=device)
        params = list(model.parameters())

        def step():
            model(x, labels=x).loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=False)

    for p in params:  # gradients belong to the set-up, not to the method
        p.grad = torch.zeros_like(p)
    return measure(step, device, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--vocab", type=int, default=200_000)
    parser.add_argument("--num_samples", type=int, default=8192)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--modes", nargs="+", default=["output layer", "train step"])
    parser.add_argument("--one", nargs=3, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        mode, criterion, method = args.one
        result = run_one(mode, criterion, method, args.tokens, args.hidden, args.vocab, args.num_samples,
                         args.device, args.repeats)  # fmt: skip
        print(json.dumps(result))
        return
    where = torch.cuda.get_device_name() if args.device.startswith("cuda") else platform.processor() or "CPU"
    print(f"# N={args.tokens} tokens, H={args.hidden}, V={args.vocab:,}, K={args.num_samples:,}, float32")
    print(f"# device: {args.device} ({where}), torch {torch.__version__}, {torch.get_num_threads()} threads")
    for mode in args.modes:
        rows = []
        for criterion, method in CRITERIA:
            cmd = [sys.executable, __file__, "--one", mode, criterion, method, "--tokens", str(args.tokens),
                   "--hidden", str(args.hidden), "--vocab", str(args.vocab), "--num_samples", str(args.num_samples),
                   "--device", args.device, "--repeats", str(args.repeats)]  # fmt: skip
            out = subprocess.run(cmd, capture_output=True, text=True, check=True)
            rows.append((f"{criterion}-{method}", json.loads(out.stdout.strip().splitlines()[-1])))
            print(f"  measured {mode} {criterion}-{method}", file=sys.stderr, flush=True)
        ref = rows[0][1]  # ce-full: the full softmax
        print(f"\n{mode}\n")
        print("| criterion | s / step | peak MiB | speed-up vs full softmax | memory vs full softmax |")
        print("|---|---:|---:|---:|---:|")
        for name, r in rows:
            speed = ref["seconds"] / r["seconds"]
            mem = r["peak_mib"] / max(ref["peak_mib"], 1e-9)
            print(f"| {name} | {r['seconds']:.3f} | {r['peak_mib']:.0f} | {speed:.2f}× | {mem:.2f}× |")


if __name__ == "__main__":
    main()
