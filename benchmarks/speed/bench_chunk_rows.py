#!/usr/bin/env python
"""Rows per chunk of the fused softmax loss: seconds per forward+backward for several chunk sizes, side by side in one
process (the sizes interleaved, `--repeats` rounds), against the three full-size matrix products alone.

    python benchmarks/speed/bench_chunk_rows.py                         # N=4096, H=512, V=50,000: 167, 256, 512 rows
    python benchmarks/speed/bench_chunk_rows.py --tokens 2048 --vocab 200000 --rows 41 128 256 512

What `hf_heads.losses.chunks.MIN_CHUNK_ROWS` was chosen from: each chunk's products read all of W (V, H) for its rows
only, so chunks of few rows (32 MiB of float32 logits at a large V) spend their time re-reading W.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from hf_heads.losses import Impl, output_loss

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common: the shared helpers
from _timing import device_line  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--vocab", type=int, default=50_000)
    parser.add_argument("--rows", type=int, nargs="+", default=[167, 256, 512])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.manual_seed(0)
    dev = args.device
    h = torch.randn(args.tokens, args.hidden, device=dev, requires_grad=True)
    w = (torch.randn(args.vocab, args.hidden, device=dev) * 0.05).requires_grad_()
    b = torch.zeros(args.vocab, device=dev, requires_grad=True)
    y = torch.randint(0, args.vocab, (args.tokens,), device=dev)
    for t in (h, w, b):
        t.grad = torch.zeros_like(t)

    def floor():  # h Wᵀ, G W and Gᵀ h at full size, nothing else
        z = h.detach() @ w.detach().T
        h.grad.copy_(z @ w.detach())
        w.grad.copy_(z.T @ h.detach())

    steps = {"three matmuls alone (the floor)": floor}
    for rows in args.rows:
        steps[f"fused softmax, {rows} rows per chunk"] = lambda r=rows: output_loss(
            h, w, b, y, impl=Impl(chunk_size=r)
        ).backward()
    seconds: dict[str, list[float]] = {name: [] for name in steps}
    for step in steps.values():  # warm-up
        step()
    for _ in range(args.repeats):
        for name, step in steps.items():
            if dev.startswith("cuda"):
                torch.cuda.synchronize()
            start = time.perf_counter()
            step()
            if dev.startswith("cuda"):
                torch.cuda.synchronize()
            seconds[name].append(time.perf_counter() - start)
    print(f"# fused softmax loss by rows per chunk, N={args.tokens}, H={args.hidden}, V={args.vocab:,}, float32")
    print(device_line(dev))
    print(f"\n| method | s / step, median (min–max) of {args.repeats} | vs the floor |\n|---|---:|---:|")
    base = statistics.median(seconds["three matmuls alone (the floor)"])
    for name, values in seconds.items():
        med = statistics.median(values)
        print(f"| {name} | {med:.3f} ({min(values):.3f}–{max(values):.3f}) | {med / base:.2f}× |")


if __name__ == "__main__":
    main()
