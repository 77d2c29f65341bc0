#!/usr/bin/env python
"""A margin head's word-norm column scale s (V,), side by side in one process: applied to a scaled (V, H) copy of
W before the chunked loss (the old path) vs inside each chunk (`chunked_loss(column_scale=s)`, what
the margin scorer runs). Forward+backward of the output layer, the two alternating, median (min–max) of
`--repeats` calls each after one warm-up.

    python benchmarks/speed/bench_column_scale.py            # N=4096, H=512, V=50,000, CPU
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from hf_heads.losses.fused_linear import chunked_loss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--vocab", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    h = torch.randn(args.tokens, args.hidden, requires_grad=True)
    w = (torch.randn(args.vocab, args.hidden) * 0.05).requires_grad_()
    b = torch.zeros(args.vocab, requires_grad=True)
    s = (torch.rand(args.vocab) + 0.5).requires_grad_()
    y = torch.randint(0, args.vocab, (args.tokens,))
    paths = {
        "scaled copy of W, then the chunked loss": lambda: chunked_loss(h, w * s[:, None], b, y),
        "column scale inside each chunk": lambda: chunked_loss(h, w, b, y, column_scale=s),
    }
    times = {name: [] for name in paths}
    for step in paths.values():
        step().backward()
    for _ in range(args.repeats):
        for name, step in paths.items():
            start = time.perf_counter()
            step().backward()
            times[name].append(time.perf_counter() - start)
    print(f"# N={args.tokens}, H={args.hidden}, V={args.vocab:,}, float32, {torch.get_num_threads()} threads\n")
    print(f"| path | s / step, median (min–max) of {args.repeats} | vs the copy |")
    print("|---|---:|---:|")
    first = statistics.median(next(iter(times.values())))
    for name, values in times.items():
        median = statistics.median(values)
        print(f"| {name} | {median:.3f} ({min(values):.3f}–{max(values):.3f}) | {median / first:.2f}× |")


if __name__ == "__main__":
    main()
