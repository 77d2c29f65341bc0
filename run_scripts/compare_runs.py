#!/usr/bin/env python
"""Print a results table from the `run_summary.json` files of finished runs.

python run_scripts/compare_runs.py outputs/demo/softmax outputs/demo/margin
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from hf_heads.heads import head_options


def describe(head: dict) -> str:
    """The head's short label (each family's options describe themselves)."""
    return head_options(head).describe()


def main(dirs: list[str]) -> None:
    rows = []
    for d in dirs:
        path = Path(d) / "run_summary.json"
        if not path.exists():
            sys.exit(f"error: {path} not found (did the run finish?)")
        s = json.loads(path.read_text())
        rows.append(
            (
                describe(s["head"]),
                s.get("eval_perplexity"),
                s.get("train_tokens_per_second"),
                s.get("train_peak_rss_mib"),
                d,
            )
        )
    fmt = lambda v, spec: format(v, spec) if isinstance(v, int | float) else "n/a"  # noqa: E731
    ratio = lambda v, base: f"{v / base:.3f}×" if isinstance(v, int | float) and base else "n/a"  # noqa: E731
    first_ppl, first_tps = rows[0][1], rows[0][2]  # row 1: the baseline (the first directory)
    print("\n| head | eval perplexity | train tokens/s | peak RSS (MiB) | perplexity vs row 1 | tokens/s vs row 1 |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, ppl, tps, rss, _ in rows:
        print(
            f"| {name} | {fmt(ppl, '.1f')} | {fmt(tps, '.0f')} | {fmt(rss, '.0f')} | {ratio(ppl, first_ppl)} "
            f"| {ratio(tps, first_tps)} |"
        )
    print("\n" + "\n".join(f"- {name}: {d}" for name, *_, d in rows))
    measured = [(name, tps, ppl) for name, ppl, tps, _, _ in rows if tps is not None and ppl is not None]
    if measured:
        from hf_heads.training.plots import plot_speed_vs_perplexity

        path = plot_speed_vs_perplexity(measured, Path(dirs[0]).resolve().parent / "speed_vs_perplexity.png")
        print(f"\nplot: {path}")


if __name__ == "__main__":
    main(sys.argv[1:])
