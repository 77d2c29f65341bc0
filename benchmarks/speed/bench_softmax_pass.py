"""The softmax head's CPU training step beside the naive step and three bare GEMMs, in alternating rounds.

Each round times one forward+backward step of every row in turn (the order rotating each round), so the rows see the
same state of the machine; a row's ratio to the naive step is taken per round, and the table gives the median and
the range over the rounds. The rows: the naive step (logits, then `F.cross_entropy`), three bare GEMMs of the naive
step's shapes (its floor), and hf_heads' softmax loss on the eager kernel with each chunk's softmax written over its
logits in one pass (`hf_heads.losses.kernels.softmax_in_place`, the default) and with the log-softmax and exp passes
it replaced (that probe set to False).

    python benchmarks/speed/bench_softmax_pass.py --rounds 8
    python benchmarks/speed/bench_softmax_pass.py --profile    # where one hf_heads softmax step spends its time
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

ROWS = ("naive", "three bare GEMMs", "hf_heads softmax", "hf_heads softmax, log-softmax then exp")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8, help="rounds of one step per row (default 8)")
    parser.add_argument("--rows", type=int, default=4096, help="tokens N")
    parser.add_argument("--hidden", type=int, default=512, help="H")
    parser.add_argument("--vocab", type=int, default=50_000, help="V")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--profile", action="store_true", help="profile one hf_heads softmax step instead (by op)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from hf_heads.losses import fused_linear_cross_entropy, kernels

    g = torch.Generator().manual_seed(0)
    n, v = args.rows, args.vocab
    hidden = torch.randn(n, args.hidden, generator=g).requires_grad_()
    weight = (torch.randn(v, args.hidden, generator=g) * 0.05).requires_grad_()
    bias = torch.zeros(v).requires_grad_()
    y = torch.randint(0, v, (n,), generator=g)
    probe = ("softmax-in-place", torch.device("cpu"), torch.float32)
    kernels.softmax_in_place(torch.zeros(1, 2))  # probed once: True where this torch takes it

    def ours(in_place: bool):
        def step():
            kernels._PROBED[probe] = in_place
            fused_linear_cross_entropy(hidden, weight, bias, y, impl="eager").backward()

        return step

    def naive():
        torch.nn.functional.cross_entropy(hidden @ weight.T + bias, y).backward()

    def gemms():  # the naive step's three products: logits, d h, d W
        with torch.no_grad():
            z = hidden @ weight.T
            z @ weight
            z.T @ hidden

    steps = dict(zip(ROWS, (naive, gemms, ours(True), ours(False)), strict=True))
    taken = kernels._PROBED[probe]

    def timed(step) -> float:
        for t in (hidden, weight, bias):
            t.grad = None
        start = time.perf_counter()
        step()
        return time.perf_counter() - start

    for step in steps.values():
        timed(step)
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            timed(steps["hf_heads softmax"])
        print(f"# python benchmarks/speed/bench_softmax_pass.py --profile; N={n}, H={args.hidden}, V={v:,}")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=8))
        return
    seconds: dict[str, list[float]] = {row: [] for row in ROWS}
    for r in range(args.rounds):
        for row in ROWS[r % len(ROWS) :] + ROWS[: r % len(ROWS)]:
            seconds[row].append(timed(steps[row]))
    print(f"# python benchmarks/speed/bench_softmax_pass.py --rounds {args.rounds}")
    print(
        f"# device: cpu, torch {torch.__version__}, {args.threads} threads; N={n}, H={args.hidden}, V={v:,}, "
        f"float32, eager kernel; softmax in place taken by this torch: {taken}; {args.rounds} rounds, one step "
        "of each row per round"
    )
    print("\n| row | s / step, median (min–max) | time vs naive, median (min–max) of the rounds |")
    print("|---|---:|---:|")
    for row in ROWS:
        s = seconds[row]
        ratios = [a / b for a, b in zip(s, seconds["naive"], strict=True)]
        print(
            f"| {row} | {statistics.median(s):.3f} ({min(s):.3f}–{max(s):.3f}) | "
            f"{statistics.median(ratios):.3f}× ({min(ratios):.3f}–{max(ratios):.3f}) |"
        )


if __name__ == "__main__":
    main()
