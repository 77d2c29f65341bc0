#!/usr/bin/env python
"""The time / memory curve of `memory_budget`: seconds per forward+backward step and peak memory of the fused softmax
loss for several budgets (MiB of each chunk's (rows, V) float32 logits), against the naive step, each budget in a
fresh process (its own peak), the budgets run in turn `--rounds` times.

    python benchmarks/speed/bench_memory_budget.py        # N=4096, H=512, V=50,000, CPU: 8 ... 512 MiB and the default
    python benchmarks/speed/bench_memory_budget.py --budgets 256 1024 --device cuda

A larger budget takes more rows per chunk: fewer reads of W and fewer read-modify-writes of the float32 (V, H)
weight-gradient accumulator per step (the "(V, H) GB" column: benchmarks/common/_traffic.py's count for the eager
kernel), a larger (rows, V) workspace. Peak memory is what the step adds on top of its inputs and their gradients:
on the CPU the growth of the process's peak resident set, on CUDA `torch.cuda.max_memory_allocated`.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from hf_heads.losses import Impl, output_loss
from hf_heads.losses.chunks import rows_per_chunk

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common: the shared helpers
from _timing import device_line, interleaved, measure  # noqa: E402
from _traffic import step_bytes  # noqa: E402

DEFAULT = "default"


def _one(args: argparse.Namespace) -> None:
    """Time one method in this process and print its row as JSON (run by `interleaved` in a fresh process)."""
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    dev = args.device
    h = torch.randn(args.tokens, args.hidden, device=dev, requires_grad=True)
    w = (torch.randn(args.vocab, args.hidden, device=dev) * 0.05).requires_grad_()
    b = torch.zeros(args.vocab, device=dev, requires_grad=True)
    y = torch.randint(0, args.vocab, (args.tokens,), device=dev)
    for t in (h, w, b):
        t.grad = torch.zeros_like(t)
    if args.one == "naive":
        row = measure(lambda: F.cross_entropy(F.linear(h, w, b), y).backward(), dev, args.repeats)
    else:
        budget = None if args.one == DEFAULT else int(args.one)
        row = measure(lambda: output_loss(h, w, b, y, impl=Impl(memory_budget=budget)).backward(), dev, args.repeats)
    print(json.dumps({"method": args.one, **row}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--vocab", type=int, default=50_000)
    parser.add_argument("--budgets", type=int, nargs="+", default=[8, 32, 128, 512], help="MiB")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per process, after one warm-up call")
    parser.add_argument("--rounds", type=int, default=3, help="processes per method, the methods in turn")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # run one method in this process
    args = parser.parse_args()
    if args.one:
        _one(args)
        return
    methods = ["naive", DEFAULT, *(str(b) for b in args.budgets)]
    options = {k: getattr(args, k) for k in ("tokens", "hidden", "vocab", "repeats", "threads", "device")}
    rows = interleaved(__file__, methods, options, args.rounds)
    n, v = args.tokens, args.vocab
    print(f"# fused softmax loss by memory_budget, N={n}, H={args.hidden}, V={v:,}, float32, eager kernel")
    print(device_line(args.device))
    print(
        f"\n| method | rows per chunk | chunks | s / step, median (min–max) of {args.rounds * args.repeats} "
        "| time vs naive | peak MiB | memory vs naive | (V, H) GB per step, by count |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|"
    )
    naive = next(r for r in rows if r["method"] == "naive")
    for row in rows:
        if "error" in row:
            print(f"| {row['method']} | — | — | failed: {row['error']} | | | | |")
            continue
        method = row["method"]
        if method == "naive":
            name, chunk, traffic = "naive logits, softmax", n, step_bytes("naive", n, args.hidden, v)
        else:
            budget = None if method == DEFAULT else int(method) << 20
            chunk = rows_per_chunk(n, v, budget, device=args.device)
            name = "memory_budget unset (the default)" if budget is None else f"memory_budget={method}"
            traffic = step_bytes("hf_heads-eager", n, args.hidden, v, chunk_rows=chunk)
        time_ratio = row["seconds"] / naive["seconds"] if "error" not in naive else math.nan
        mem_ratio = row["peak_mib"] / naive["peak_mib"] if "error" not in naive and naive["peak_mib"] > 0 else math.nan
        seconds = f"{row['seconds']:.3f} ({row['min_s']:.3f}–{row['max_s']:.3f})"
        print(
            f"| {name} | {chunk} | {math.ceil(n / chunk)} | {seconds} | {time_ratio:.2f}× | {row['peak_mib']:.0f} "
            f"| {mem_ratio:.2f}× | {traffic['(V, H)'] / 1e9:.2f} |"
        )


if __name__ == "__main__":
    main()
