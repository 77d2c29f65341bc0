#!/usr/bin/env python
"""Sampled criteria vs full softmax: seconds per step and peak memory, side by side in one run.

    python benchmarks/speed/bench_sampled.py            # V=200,000, K=8,192, N=2,048 tokens, H=512, CPU
    python benchmarks/speed/bench_sampled.py --vocab 50000 --device cuda

Two measurements per criterion, each in a fresh process:
- `output layer`: forward+backward of the loss alone on random hidden states (N, H);
- `train step`: forward+backward+AdamW step of a 2-layer GPT-2-style decoder (hidden H, 8 heads,
  context 128) with the hf_heads head, batch N tokens.
Peak memory: on CUDA `torch.cuda.max_memory_allocated` over the step; on the CPU the growth of the
process's peak resident set over the level after set-up. Seconds: median (min–max) of `--repeats` calls after
one warm-up call, over `--rounds` rounds in which every criterion runs in turn.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common: the shared helpers
from _timing import (  # noqa: E402
    autocast,
    bench_parser,
    device_line,
    interleaved,
    measure,
    print_failures,
    ratio_cells,
    seconds_cell,
    without_failures,
)

CRITERIA = [("ce", "full"), ("bce", "full"), ("mse", "full")] + [
    (c, m) for c in ("ce", "bce") for m in ("mcs", "is", "cps", "nce")
]


def head_section(criterion: str, method: str, k: int) -> dict:
    head = {"family": "sampled", "criterion": criterion, "method": method}
    return head if method == "full" else {**head, "num_samples": k, "noise": "log-uniform"}


def run_one(mode, criterion, method, n, hidden, vocab, k, device, repeats, amp=None) -> dict:
    from hf_heads import HeadsConfig, HeadsForCausalLM
    from hf_heads.heads import make_head

    torch.manual_seed(0)
    counts = torch.arange(vocab, 0, -1).float()
    head = head_section(criterion, method, k)
    if mode == "output layer":
        with torch.device(device):  # the (V, H) weight initialised where it runs (seconds on a CPU at V=256k)
            module = make_head(hidden, vocab, head)
        module.set_word_counts(counts)
        h = torch.randn(n, hidden, device=device, requires_grad=True)
        y = torch.randint(0, vocab, (n,), device=device)
        params = [h, *module.parameters()]

        def step():
            with autocast(device, amp):
                loss = module.loss(h, y)
            loss.backward()

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
            with autocast(device, amp):
                loss = model(x, labels=x).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=False)

    for p in params:  # gradients belong to the set-up, not to the method
        p.grad = torch.zeros_like(p)
    return measure(step, device, repeats)


def main() -> None:
    parser = bench_parser(__doc__, tokens=2048, vocab=200_000)
    parser.add_argument("--num_samples", type=int, default=8192)
    parser.add_argument("--modes", nargs="+", default=["output layer", "train step"])
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.one:
        mode, name = args.one.split(":")
        criterion, method = name.split("-")
        result = run_one(
            mode,
            criterion,
            method,
            args.tokens,
            args.hidden,
            args.vocab,
            args.num_samples,
            args.device,
            args.repeats,
            args.autocast,
        )
        print(json.dumps(result))
        return
    precision = f"autocast {args.autocast}" if args.autocast else "float32"
    print(f"# N={args.tokens} tokens, H={args.hidden}, V={args.vocab:,}, K={args.num_samples:,}, {precision}")
    print(device_line(args.device))
    options = dict(
        tokens=args.tokens,
        hidden=args.hidden,
        vocab=args.vocab,
        num_samples=args.num_samples,
        device=args.device,
        repeats=args.repeats,
        threads=args.threads,
        autocast=args.autocast,
    )
    for mode in args.modes:
        names = [f"{mode}:{criterion}-{method}" for criterion, method in CRITERIA]
        rows = {r["method"]: r for r in interleaved(__file__, names, options, args.rounds)}
        measured = without_failures(rows)
        ref = measured.get(names[0])  # ce-full: the full softmax
        print(f"\n{mode}\n")
        print(
            f"| criterion | s / step, median (min–max) of {args.repeats * args.rounds} | peak MiB | "
            "speed-up vs full softmax | memory vs full softmax |"
        )
        print("|---|---:|---:|---:|---:|")
        for method, r in measured.items():
            speed = "—" if ref is None else f"{ref['seconds'] / r['seconds']:.2f}×"  # a speed-up: ref over row
            name = method.split(":")[1]
            print(f"| {name} | {seconds_cell(r)} | {r['peak_mib']:.0f} | {speed} | {ratio_cells(r, ref)[1]} |")
        print_failures(rows)


if __name__ == "__main__":
    main()
