#!/usr/bin/env python
"""Small reproduction of the sampling paper's tables 2-4 on the bundled WordNet glosses (word-level
vocabulary 53,726 ≥ 30k).

    python benchmarks/reproduce/reproduce_sampled_lm.py            # 11 criteria + 4 unigram-noise rows on 2 CPU cores
    python benchmarks/reproduce/reproduce_sampled_lm.py --steps 10 --out /tmp/smoke
    python benchmarks/reproduce/reproduce_sampled_lm.py --steps 3000 --seeds 0 1 2 --eval_steps 250   # curves, 3 seeds

    python benchmarks/reproduce/reproduce_sampled_lm.py --rows paper --steps 100 --seeds 0 1 2 --eval_steps 25 \
        --max_eval_blocks 48 --out docs/results/sampled_lm/seeds   # the committed 3-seed run (~2 h, one core)

The s / step column of results.md (2 CPU cores) sums to 14.9 s for the 11 criteria, about 25 minutes of training
at 100 steps; the 4 unigram rows are sampled criteria (0.37-0.44 s per step there). The 3-seed run to a flat curve
has not been made: the three full-vocabulary rows cost 1.9-5.5 s per step (11.6 s together), i.e. about 29 hours for
3,000 steps × 3 seeds, the eight sampled rows 8 more.

A 2-layer GPT-2-style decoder (hidden 128) is trained from scratch for the same number of steps
with each criterion (K = 8,192 log-uniform samples shared over the batch, as in the paper); the
validation perplexity is that of the CORRECTED posterior renormalised over the full vocabulary
(tables 2-3). The self-normalisation columns valid_self_norm_logz_mean / _std (mean / std over every
position of the evaluated validation blocks, the same `--max_eval_blocks` as the perplexity, of
log Σ_c p̃(c|x), the corrected but unnormalised scores; one extra pass over those blocks) are the
perplexity-side view of table 4: 0 means the scores can be used without normalisation; valid_unnormalised_ppl is
exp(mean NLL − mean log Z), the "perplexity" of the unnormalised scores (table 4 without renormalisation).
(Results written before this column existed report self_norm_logz_mean / _std instead: the same statistic on
the first 64 positions of the last training batch.) Writes results.md / results.csv /
perplexity.png into `--out` (default docs/results/sampled_lm).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common: the shared helpers
from _lm_grid import run_grid  # noqa: E402

UNIGRAM = {"noise": "unigram", "noise_add": 1.0}  # smoothed unigram: D(c) ∝ (count_c + 1)^0.75 (head default α)


def grid(k: int, rows: str = "all") -> list:
    """The 11 criteria with log-uniform noise, then table 4's unigram-noise rows: every criterion whose correction
    queries D (BCE / CE with MCS and CPS; the paper switches BCE-MCS / BCE-CPS to a smoothed unigram there).
    rows="paper" leaves out MSE full (in the paper's derivations, not in its tables 2-4) and the CE-CPS rows: CE-CPS
    is CE-MCS (its loss is CE-MCS's plus the constant log(C/K), with the same gradient and correction, eqs. 17-18 vs
    9-10; same seed and samples give the same run, docs/results/README.md)."""
    full = [
        ("full", f"{c.upper()} full", {"family": "sampled", "criterion": c, "method": "full"})
        for c in (("ce", "bce", "mse") if rows == "all" else ("ce", "bce"))
    ]
    out = full[:1]  # CE full first, the costly BCE / MSE full last: an interrupted run keeps the baseline
    for c in ("bce", "ce"):
        for m in ("mcs", "is", "cps", "nce") if rows == "all" or c == "bce" else ("mcs", "is", "nce"):
            head = {"family": "sampled", "criterion": c, "method": m, "num_samples": k, "noise": "log-uniform"}
            out.append((f"{c.upper()} sampled", f"{c.upper()}-{m.upper()} K={k}", head))
    for c in ("bce", "ce"):
        for m in ("mcs", "cps") if rows == "all" or c == "bce" else ("mcs",):
            head = {"family": "sampled", "criterion": c, "method": m, "num_samples": k, **UNIGRAM}
            out.append(("unigram noise", f"{c.upper()}-{m.upper()} K={k} unigram", head))
    return out + full[1:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--num_samples", type=int, default=8192)
    ap.add_argument("--max_eval_blocks", type=int, default=200)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0], help="One run per seed; tables show the mean.")
    ap.add_argument("--eval_steps", type=int, default=None, help="Validation every N steps: curves.csv / .png.")
    ap.add_argument("--rows", choices=("all", "paper"), default="all", help="paper: without MSE full and CE-CPS.")
    ap.add_argument("--resume", action="store_true", help="Keep the rows already in --out; run the others.")
    ap.add_argument("--out", default="docs/results/sampled_lm")
    args = ap.parse_args()
    run_grid(
        grid(args.num_samples, args.rows),
        corpus="wordnet-glosses",
        out=args.out,
        steps=args.steps,
        batch=args.batch,
        block=args.block,
        lr=args.lr,
        max_eval_blocks=args.max_eval_blocks,
        title="Perplexity of the corrected, renormalised posterior; log Z = log Σ_c p̃(c|x) of the corrected, "
        "unnormalised scores over every validation position (0 = self-normalised).",
        self_normalization=True,
        seeds=args.seeds,
        eval_steps=args.eval_steps,
        resume=args.resume,
    )


if __name__ == "__main__":
    main()
