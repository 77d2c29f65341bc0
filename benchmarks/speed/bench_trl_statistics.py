#!/usr/bin/env python
"""What TRL's per-token statistics cost a softmax head's training step: `fused_lm_head=True` asks the model for the
per-token loss and, without gradient, each position's entropy and top-1 hit (`mean_token_accuracy`). Two ways, side
by side in one process: the per-token loss, then a second pass over the output layer for the statistics
(`OutputHead.statistics`, what `token_loss_output` did before), and the statistics from the loss's own pass
(`head(..., token_statistics=True)`: the chunk kernels' argmax and entropy). Forward + backward of the head
(reduction "none", summed), taking turns in every round (alternating, each round starting at the next way), median
(min–max) of the rounds, and the ratio to the per-token loss alone.

    python benchmarks/speed/bench_trl_statistics.py --rounds 10              # N=4096, H=512, V=50k, CPU, eager
    python benchmarks/speed/bench_trl_statistics.py --device cuda --autocast bf16 --tokens 8192 --hidden 2304 \
        --vocab 256000
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

from hf_heads.heads import make_head

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common: the shared helpers
from _timing import autocast, bench_parser, device_line  # noqa: E402


def main() -> None:
    parser = bench_parser(__doc__)
    parser.set_defaults(rounds=7)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = args.device
    head = make_head(args.hidden, args.vocab, {"family": "softmax"}).to(device).train()
    hidden = torch.randn(args.tokens, args.hidden, device=device, requires_grad=True)
    labels = torch.randint(0, args.vocab, (args.tokens,), device=device)
    cuda = device.startswith("cuda")

    def loss_alone() -> None:
        with autocast(device, args.autocast):
            loss, _ = head(hidden, labels, reduction="none", return_logits=False)
        loss.sum().backward()

    def second_pass() -> None:
        with autocast(device, args.autocast):
            loss, _ = head(hidden, labels, reduction="none", return_logits=False)
            stats = head.statistics(hidden.detach(), labels)
        (stats["rank"] == 0).sum(), stats["entropy"].sum()
        loss.sum().backward()

    def same_pass() -> None:
        with autocast(device, args.autocast):
            loss, stats = head(hidden, labels, reduction="none", token_statistics=True)
        stats["is_top1"].sum(), stats["entropy"].sum()
        loss.sum().backward()

    ways = {
        "per-token loss alone": loss_alone,
        "loss + statistics second pass": second_pass,
        "loss and statistics in one pass (token_statistics)": same_pass,
    }
    times = {name: [] for name in ways}
    for step in ways.values():  # warm-up
        step()
    names = list(ways)
    for round_ in range(args.rounds):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            if cuda:
                torch.cuda.synchronize()
            start = time.perf_counter()
            ways[name]()
            if cuda:
                torch.cuda.synchronize()
            times[name].append(time.perf_counter() - start)
            hidden.grad = None
            head.zero_grad(set_to_none=True)
    print(device_line(device))
    print(f"# N={args.tokens}, H={args.hidden}, V={args.vocab:,}, {args.autocast or 'float32'}, softmax head\n")
    print(f"| way | s / step, median (min–max) of {args.rounds} | vs the loss alone |")
    print("|---|---:|---:|")
    alone = statistics.median(times["per-token loss alone"])
    for name, values in times.items():
        median = statistics.median(values)
        print(f"| {name} | {median:.3f} ({min(values):.3f}–{max(values):.3f}) | {median / alone:.3f}× |")


if __name__ == "__main__":
    main()
