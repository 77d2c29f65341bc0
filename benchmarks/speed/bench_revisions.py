"""One output-layer step of two source trees of hf_heads, timed in alternating pairs: does a change make a row slower?

Each round runs every row once per tree, the two trees in turn (the order flips each round), each in a fresh process
that imports hf_heads from its tree (`PYTHONPATH`), warms up once and times `--calls` forward+backward steps; a row's
ratio is new / old per round, and the table gives the median and the range over the rounds, so both trees see the
same state of the machine. The rows: the softmax head's loss, the margin head's (arc + log-unigram + max-norm) and the
sparse head's (k=20), each on the eager kernel, and the naive step (logits, then `F.cross_entropy`) as a yardstick.

    python benchmarks/speed/bench_revisions.py --old /path/to/old/tree --new . --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROWS = ("naive", "softmax", "margin arc+log-unigram+max-norm", "sparse k=20")

CHILD = r"""
import json, statistics, sys, time
import torch
torch.set_num_threads(int(sys.argv[5]))
row, n, h, v, calls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[6])
from hf_heads.losses import fused_linear_cross_entropy, margin_cross_entropy, sparse_linear_cross_entropy
g = torch.Generator().manual_seed(0)
hidden = torch.randn(n, h, generator=g).requires_grad_()
weight = (torch.randn(v, h, generator=g) * 0.05).requires_grad_()
bias = torch.zeros(v).requires_grad_()
y = torch.randint(0, v, (n,), generator=g)
counts = torch.arange(v, 0, -1, dtype=torch.float64)
def step():
    if row == "naive":
        return torch.nn.functional.cross_entropy(hidden @ weight.T + bias, y)
    if row == "softmax":
        return fused_linear_cross_entropy(hidden, weight, bias, y, impl="eager")
    if row.startswith("margin"):
        return margin_cross_entropy(hidden, weight, bias, y, margin="arc", m=0.2, word_norm="log-unigram",
                                    context_norm="max-norm", word_counts=counts, impl="eager")
    return sparse_linear_cross_entropy(hidden, weight, bias, y, 20, impl="eager")
def timed():
    for t in (hidden, weight, bias):
        t.grad = None
    start = time.perf_counter()
    step().backward()
    return time.perf_counter() - start
timed()
print(json.dumps(statistics.median([timed() for _ in range(calls)])))
"""


def run(tree: Path, row: str, args) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree.resolve()), "HF_HUB_OFFLINE": "1"}
    argv = [sys.executable, "-c", CHILD, row, str(args.rows), str(args.hidden), str(args.vocab), str(args.threads)]
    out = subprocess.run([*argv, str(args.calls)], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def git_rev(tree: Path) -> str:
    out = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() or "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, required=True, help="the source tree to compare against")
    parser.add_argument("--new", type=Path, default=Path("."), help="the source tree measured (default: here)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating pairs per row (default 5)")
    parser.add_argument("--calls", type=int, default=3, help="timed steps per process, their median kept")
    parser.add_argument("--rows", type=int, default=4096, help="tokens N")
    parser.add_argument("--hidden", type=int, default=512, help="H")
    parser.add_argument("--vocab", type=int, default=50_000, help="V")
    parser.add_argument("--threads", type=int, default=2, help="torch threads per process")
    parser.add_argument("--only", nargs="+", choices=ROWS, default=ROWS, help="the rows to time (default: all)")
    args = parser.parse_args()
    import torch

    print(f"# python {' '.join(sys.argv)}")
    print(f"# old tree {args.old} ({git_rev(args.old)}), new tree {args.new} ({git_rev(args.new)})")
    print(
        f"# device: cpu, torch {torch.__version__}, {args.threads} threads; N={args.rows}, H={args.hidden}, "
        f"V={args.vocab:,}, float32, eager kernel; {args.rounds} alternating pairs of {args.calls} timed steps"
    )
    print()
    print("| row | old s / step, median | new s / step, median | new / old, median (min–max) of the pairs |")
    print("|---|---:|---:|---:|")
    for row in args.only:
        old, new, ratio = [], [], []
        for i in range(args.rounds):
            first, second = (args.old, args.new) if i % 2 == 0 else (args.new, args.old)
            a, b = run(first, row, args), run(second, row, args)
            o, n = (a, b) if first is args.old else (b, a)
            old.append(o), new.append(n), ratio.append(n / o)
        print(
            f"| {row} | {statistics.median(old):.3f} | {statistics.median(new):.3f} | "
            f"{statistics.median(ratio):.3f}× ({min(ratio):.3f}–{max(ratio):.3f}) |",
            flush=True,
        )


if __name__ == "__main__":
    main()
