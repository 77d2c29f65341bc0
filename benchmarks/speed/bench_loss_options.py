#!/usr/bin/env python
"""What the peers' loss options cost against the plain chunked softmax step, side by side in one process: the z-loss
(λ·lse² per row, its gradient inside the chunk kernel), class weights (a (V,) weight per target), both, the rows'
log-sum-exp handed back (`returns=("z_loss", "lse")`), the same-pass predictions and ranks (`returns=("predictions",)`
/ `("rank",)`: the token accuracy and the top-k accuracy, as `HeadsTrainer` logs them) and the confidence penalty
(loss − 0.1·H, its gradient from a backward that recomputes the chunks). Forward + backward of the output layer
(`output_loss` with a `CrossEntropy`), the options taking turns in every round (alternating, so that drift of the
machine hits each alike; each round starts at the next option), median (min–max) of the rounds, and the ratio to the
plain step.

    python benchmarks/speed/bench_loss_options.py                                # N=4096, H=512, V=50k, CPU, eager
    python benchmarks/speed/bench_loss_options.py --kernel compiled
    python benchmarks/speed/bench_loss_options.py --only predictions --rounds 20 # one option and the plain step
    python benchmarks/speed/bench_loss_options.py --device cuda --autocast bf16 --tokens 8192 --hidden 2304 \
        --vocab 256000
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

from hf_heads.losses import CrossEntropy, output_loss

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common: the shared helpers
from _timing import autocast, bench_parser, device_line  # noqa: E402

# name: (the cross-entropy's options, what `returns` asks for); class_weight True: the weights drawn in main
OPTIONS = {
    "plain softmax": ({}, ()),
    "z-loss 1e-4": ({"z_loss": 1e-4}, ()),
    "class weights": ({"class_weight": True}, ()),
    "z-loss + class weights": ({"z_loss": 1e-4, "class_weight": True}, ()),
    "z-loss, returns z_loss": ({"z_loss": 1e-4}, ("z_loss", "lse")),
    "same-pass accuracy (returns predictions)": ({}, ("predictions",)),
    "same-pass top-k accuracy (returns rank)": ({}, ("rank",)),
    "confidence penalty 0.1 (loss - 0.1 H)": ({"confidence_penalty": 0.1}, ()),
}


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--kernel", default=None, help="chunk kernel (default: the automatic choice)")
    parser.add_argument(
        "--only", nargs="+", default=None, help="the options whose names contain one of these (and the plain step)"
    )
    parser.set_defaults(rounds=7)
    args = parser.parse_args()
    options_run = {
        name: options
        for name, options in OPTIONS.items()
        if args.only is None or name == "plain softmax" or any(part in name for part in args.only)
    }
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = args.device
    h = torch.randn(args.tokens, args.hidden, device=device, requires_grad=True)
    w = (torch.randn(args.vocab, args.hidden, device=device) * 0.05).requires_grad_()
    b = torch.zeros(args.vocab, device=device, requires_grad=True)
    y = torch.randint(0, args.vocab, (args.tokens,), device=device)
    weights = torch.rand(args.vocab, device=device) + 0.5
    cuda = device.startswith("cuda")

    def step(options: tuple) -> None:
        ce, returns = options
        criterion = CrossEntropy(**{**ce, "class_weight": weights if ce.get("class_weight") else None})
        with autocast(device, args.autocast):
            out = output_loss(h, w, b, y, criterion=criterion, returns=returns, impl=args.kernel)
        (out.loss if returns else out).backward()  # the penalty's entropy: a backward that recomputes the chunks
        h.grad = w.grad = b.grad = None

    times = {name: [] for name in options_run}
    peaks = {name: 0.0 for name in options_run}
    for options in options_run.values():  # warm-up (the compiled kernel compiles each variant here)
        step(options)
    names = list(options_run)
    for round_ in range(args.rounds):  # each round in another order: no option always runs first or last
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            options = options_run[name]
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            start = time.perf_counter()
            step(options)
            if cuda:
                torch.cuda.synchronize()
                peaks[name] = max(peaks[name], torch.cuda.max_memory_allocated() / 2**20)
            times[name].append(time.perf_counter() - start)
    kernel = args.kernel or "automatic"
    print(device_line(device))
    print(f"# N={args.tokens}, H={args.hidden}, V={args.vocab:,}, {args.autocast or 'float32'}, kernel {kernel}\n")
    memory = " | peak MiB" if cuda else ""
    print(f"| option | s / step, median (min–max) of {args.rounds} | vs plain{memory} |")
    print("|---|---:|---:|" + ("---:|" if cuda else ""))
    plain = statistics.median(times["plain softmax"])
    for name, values in times.items():
        median = statistics.median(values)
        cells = [name, f"{median:.3f} ({min(values):.3f}–{max(values):.3f})", f"{median / plain:.3f}×"]
        if cuda:
            cells.append(f"{peaks[name]:.0f}")
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
