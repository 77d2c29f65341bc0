#!/usr/bin/env python
"""Sparse-softmax loss (sparse-softmax paper, eq. 5) vs plain cross-entropy: output-layer forward+backward
seconds and peak memory, side by side in one run.

    python benchmarks/speed/bench_sparse.py                  # N=4096, H=512, V=50,000, k=20 and 50, CPU
    python benchmarks/speed/bench_sparse.py --device cuda

Rows: the naive path (full (N, V) logits, then `F.cross_entropy` or `sparse_softmax_cross_entropy`) and
hf_heads' chunked path (`fused_linear_cross_entropy` / `sparse_linear_cross_entropy`: no (N, V) logits,
gradients chunk by chunk). "vs CE" compares each sparse row with plain CE on the same path (the goal:
<= 1.3x time); "vs naive CE" compares every row with the naive plain-CE row. Each method runs in a fresh
process; peak memory is what the loss adds on top of its inputs and their gradients (CUDA: max allocated;
CPU: growth of peak RSS). Seconds are the median of `--repeats` calls after one warm-up call. `--inputs peaked`:
logits with a trained model's statistics (benchmarks/common/_peaked.py) instead of random h and W.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from hf_heads.losses import fused_linear_cross_entropy, sparse_linear_cross_entropy, sparse_softmax_cross_entropy

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common: the shared helpers
from _peaked import peaked_inputs  # noqa: E402
from _timing import (  # noqa: E402
    autocast,
    bench_parser,
    device_line,
    measure,
    print_failures,
    ratio_cells,
    run_isolated,
    without_failures,
)


def methods(ks: list[int]) -> dict[str, tuple[str, int | None, str]]:
    """name -> (path, k or None for plain CE, the same-path plain-CE row)."""
    out = {"naive logits, CE": ("naive", None, "naive logits, CE")}
    out.update({f"naive logits, sparse k={k}": ("naive", k, "naive logits, CE") for k in ks})
    out["hf_heads chunked, CE"] = ("chunked", None, "hf_heads chunked, CE")
    out.update({f"hf_heads chunked, sparse k={k}": ("chunked", k, "hf_heads chunked, CE") for k in ks})
    return out


def run_one(
    name: str,
    ks: list[int],
    n: int,
    hidden: int,
    vocab: int,
    device: str,
    repeats: int,
    amp: str | None = None,
    inputs: str = "random",
) -> dict:
    path, k, _ = methods(ks)[name]
    torch.manual_seed(0)
    if inputs == "peaked":  # logits with a trained model's statistics (benchmarks/common/_peaked.py)
        h, w, y = peaked_inputs(n, hidden, vocab, device)
    else:
        h, w = torch.randn(n, hidden, device=device), torch.randn(vocab, hidden, device=device) * 0.05
        y = torch.randint(0, vocab, (n,), device=device)
    h, w = h.requires_grad_(), w.requires_grad_()
    b = torch.zeros(vocab, device=device, requires_grad=True)
    for t in (h, w, b):  # the gradients belong to the inputs, not to the method
        t.grad = torch.zeros_like(t)

    def step():
        with autocast(device, amp):
            if path == "naive":
                logits = F.linear(h, w, b)  # (N, V)
                loss = F.cross_entropy(logits, y) if k is None else sparse_softmax_cross_entropy(logits, y, k)
            elif k is None:
                loss = fused_linear_cross_entropy(h, w, b, y)
            else:
                loss = sparse_linear_cross_entropy(h, w, b, y, k)
        loss.backward()
        return loss

    return {"method": name, **measure(step, device, repeats)}


def main() -> None:
    parser = bench_parser(__doc__, vocab=50_000)
    parser.add_argument("--k", type=int, nargs="+", default=[20, 50])
    parser.add_argument("--inputs", choices=["random", "peaked"], default="random", help="random, peaked: _peaked.py")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.one:
        sizes = (args.tokens, args.hidden, args.vocab)
        row = run_one(args.one, args.k, *sizes, args.device, args.repeats, args.autocast, args.inputs)
        print(json.dumps(row))
        return
    print(
        f"# sparse-softmax loss vs CE, output layer forward+backward, N={args.tokens}, H={args.hidden}, "
        f"V={args.vocab:,}, {f'autocast {args.autocast}' if args.autocast else 'float32'}, {args.inputs} inputs"
    )
    print(device_line(args.device) + "\n")
    table = methods(args.k)
    options = dict(
        k=args.k,
        tokens=args.tokens,
        hidden=args.hidden,
        vocab=args.vocab,
        device=args.device,
        repeats=args.repeats,
        threads=args.threads,
        autocast=args.autocast,
        inputs=args.inputs,
    )
    rows = {name: run_isolated(__file__, name, options) for name in table}
    measured = without_failures(rows)
    naive = measured.get("naive logits, CE")
    print("| method | s / step | peak MiB | time vs CE | memory vs CE | time vs naive CE | memory vs naive CE |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, r in measured.items():
        cells = ratio_cells(r, measured.get(table[name][2])) + ratio_cells(r, naive)
        print(f"| {name} | {r['seconds']:.3f} | {r['peak_mib']:.0f} | " + " | ".join(cells) + " |")
    print_failures(rows)


if __name__ == "__main__":
    main()
