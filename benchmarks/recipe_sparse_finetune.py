#!/usr/bin/env python
"""Sparse-softmax in its paper's setting: fine-tune a trained softmax model with sparse-softmax (k = 5, 20) against
continuing softmax for the same steps (Sun et al., "Sparsing and Smoothing for the seq2seq Models", sect. 4: UNILM
fine-tuned on Gigaword and SQuAD question generation; their table 2 / 3 deltas beside ours in
docs/results/seq2seq_recipes/sparse_finetune.md).

    python benchmarks/recipe_sparse_finetune.py --task question_generation --seeds 42 43 44
    python benchmarks/recipe_sparse_finetune.py --task translation --seeds 42 43 44 --steps 150

1. The base: the task's softmax recipe (benchmarks/recipe_seq2seq.py, seed `--base_seed`), trained once and kept
   in outputs/recipe_<task>/seed<base_seed> (re-read when it is there).
2. Each arm continues that model for `--steps` steps with the recipe's batch size and `--lr`, linear decay from
   the first step (no warm-up), the task script run as a user would: `--model_name_or_path <base>` and, for the
   sparse arms, `--change_head --head sparse --k K` (the softmax head's weight and bias load into the sparse
   head; nothing else changes). The seeds vary the fine-tuning (data order); the base is the same for every arm,
   so the arms differ only in the loss.

Writes one row per task/arm/metric (`task,dataset,arm,metric,mean,std,values,seeds,base_seed,steps,train_minutes`)
to `--csv` (default docs/results/seq2seq_recipes/sparse_finetune.csv; rows of the same task and arm replaced).
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from recipe_seq2seq import RECIPES, ROOT, run_seed  # noqa: E402

ARMS = {"softmax": [], "sparse-k5": ["--change_head", "--head", "sparse", "--k", "5"],
        "sparse-k20": ["--change_head", "--head", "sparse", "--k", "20"]}  # fmt: skip
DROP = {
    "--model_name_or_path",  # flags dropped with their values
    "--word_vocab_size",
    "--config_overrides",
    "--warmup_steps",
    "--learning_rate",
}
FIELDS = ["task", "dataset", "arm", "metric", "mean", "std", "values", "seeds", "base_seed", "steps", "train_minutes"]


def finetune_args(task: str, base: Path, steps: int, lr: float) -> list[str]:
    """The recipe's arguments for continuing `base`: its model and tokenizer, no backbone overrides, new steps."""
    args, skip = [], False
    for a in RECIPES[task][2]:
        if skip or a in DROP:
            skip = not skip
            continue
        args.append(a)
    args = [*args, "--model_name_or_path", str(base), "--warmup_steps", "0", "--learning_rate", str(lr)]
    args[args.index("--max_steps") + 1] = str(steps)
    return args


def write_rows(csv_path: Path, rows: list[dict]) -> None:
    keys = {(r["task"], r["arm"]) for r in rows}
    old = []
    if csv_path.exists():
        with csv_path.open() as f:
            old = [r for r in csv.DictReader(f) if (r["task"], r["arm"]) not in keys]
    with csv_path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(old + rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", choices=sorted(RECIPES), required=True)
    ap.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44])
    ap.add_argument("--base_seed", type=int, default=42)
    ap.add_argument("--steps", type=int, default=150, help="Fine-tuning steps of every arm.")
    ap.add_argument("--lr", type=float, default=5e-4, help="Fine-tuning peak learning rate (linear decay).")
    ap.add_argument("--arms", nargs="+", choices=sorted(ARMS), default=list(ARMS))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reuse", action="store_true", help="Re-read finished fine-tuning runs.")
    ap.add_argument("--csv", type=Path, default=ROOT / "docs/results/seq2seq_recipes/sparse_finetune.csv")
    a = ap.parse_args()
    _, dataset, recipe, metrics = RECIPES[a.task]
    base_out = ROOT / "outputs" / f"recipe_{a.task}"
    base_args = [*recipe, "--dataset_name", dataset, "--head", "softmax"]
    run_seed(a.task, a.base_seed, base_out, base_args, a.threads, reuse=True)  # the base: trained once
    base = base_out / f"seed{a.base_seed}"
    rows = []
    for arm in a.arms:
        out = ROOT / "outputs" / f"sparse_finetune_{a.task}_{arm}"
        args = [*finetune_args(a.task, base, a.steps, a.lr), "--dataset_name", dataset, *ARMS[arm]]
        results = [run_seed(a.task, seed, out, args, a.threads, a.reuse) for seed in a.seeds]
        minutes = statistics.mean(r["train_minutes"] for r in results)
        for m in metrics:
            values = [r[m] for r in results]
            rows.append({
                "task": a.task, "dataset": dataset, "arm": arm, "metric": m,
                "mean": f"{statistics.mean(values):.4g}",
                "std": f"{statistics.stdev(values):.3g}" if len(values) > 1 else "",
                "values": " ".join(f"{v:.4g}" for v in values), "seeds": " ".join(map(str, a.seeds)),
                "base_seed": a.base_seed, "steps": a.steps, "train_minutes": f"{minutes:.2f}",
            })  # fmt: skip
        write_rows(a.csv, rows)
        print(f"{arm}: " + ", ".join(f"{r['metric']} {r['mean']}" for r in rows if r["arm"] == arm), flush=True)


if __name__ == "__main__":
    main()
