#!/usr/bin/env python
"""Seconds per training step of each head on the translation recipe, one thread, run one after the other (on an idle
machine), and the steps each head can take in the time softmax takes for the recipe's 450 steps ("equal
wall-clock"). Written to docs/results/seq2seq_recipes/step_times.md.

    python benchmarks/recipes/recipe_step_times.py                 # every head below, 60 steps each: ~10 min
    python benchmarks/recipes/recipe_step_times.py --steps 30 --heads softmax margin-cos

Each head trains `--steps` steps of the recipe (batch 64, the recipe's arguments, no evaluation or prediction) with
`run_scripts/run_translation.py`; a step's time is the median of the step-to-step intervals after the first
`--skip` steps (the first steps include one-off work), read from the Trainer's progress log.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from recipe_seq2seq import RECIPES, ROOT  # noqa: E402

# label -> head arguments (the rows of docs/results/seq2seq_recipes/README.md)
HEADS = {
    "softmax": ["--head", "softmax"],
    "margin-cos": ["--head", "margin", "--margin", "cos", "--m", "0.01", "--scale", "64"],
    "sampled-ce-mcs": ["--head", "sampled", "--criterion", "ce", "--method", "mcs", "--num_samples", "512",
                       "--noise", "log-uniform"],
    "sparse-k20": ["--head", "sparse", "--k", "20"],
    "continuous-syn-margin-centred": ["--head", "continuous", "--loss", "syn-margin-projection",
                                      "--center_embeddings", "frequency"],
    "continuous-in-batch-softmax-word2vec": ["--head", "continuous", "--loss", "in-batch-softmax", "--logit_scale",
                                             "20", "--output_vocabulary", "targets", "--embedding_name",
                                             "word2vec-targets"],
}  # fmt: skip
RECIPE_STEPS = 450


def step_seconds(label: str, steps: int, skip: int, out: Path) -> float:
    args = list(RECIPES["translation"][2])
    for flag in ("--do_predict", "--predict_with_generate"):
        args.remove(flag)
    args[args.index("--max_steps") + 1] = str(steps)
    args[args.index("--logging_steps") + 1] = str(steps)
    cmd = [sys.executable, str(ROOT / "run_scripts/run_translation.py"), "--output_dir", str(out / label),
           "--overwrite_output_dir", "--seed", "42", "--dataset_name", "bible-es-en", *args, *HEADS[label],
           "--disable_tqdm", "false"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TQDM_MININTERVAL": "0"}
    start = time.time()
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"{label}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    # tqdm prints "k/steps [mm:ss<..., x.xxs/it]" as steps finish: the elapsed time at each step
    elapsed = {}
    for k, mm, ss in re.findall(rf"(\d+)/{steps} \[(\d+):(\d+)<", proc.stderr):
        elapsed[int(k)] = int(mm) * 60 + int(ss)
    done = sorted(k for k in elapsed if k >= skip)
    if len(done) < 2:
        raise SystemExit(f"{label}: no step times in the log")
    seconds = (elapsed[done[-1]] - elapsed[done[0]]) / (done[-1] - done[0])
    print(
        f"{label}: {seconds:.3f} s/step (steps {done[0]}-{done[-1]}; {time.time() - start:.0f} s in all)", flush=True
    )
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--skip", type=int, default=10, help="Steps left out at the start.")
    ap.add_argument("--heads", nargs="+", choices=list(HEADS), default=list(HEADS))
    ap.add_argument("--out", type=Path, default=ROOT / "outputs" / "step_times")
    ap.add_argument("--md", type=Path, default=ROOT / "docs/results/seq2seq_recipes/step_times.md")
    a = ap.parse_args()
    times = {label: step_seconds(label, a.steps, a.skip, a.out) for label in a.heads}
    base = times.get("softmax")
    lines = [
        "Seconds per training step on the translation recipe (batch 64), one thread, the heads run one after the "
        "other on the otherwise idle 2-core machine; steps in softmax's 450-step time = 450 × softmax's s/step ÷ the "
        "head's. A step's time is read from the progress log's elapsed seconds (1 s resolution: about ±0.02 s/step "
        "over 50 steps).",
        "",
        f"Command: `python benchmarks/recipes/recipe_step_times.py --steps {a.steps} --skip {a.skip}` "
        f"({time.strftime('%Y-%m-%d')})",
        "",
        "| head | s / step | vs softmax | steps in softmax's 450-step time |",
        "|---|---:|---:|---:|",
    ]
    for label, seconds in times.items():
        ratio = f"{seconds / base:.2f}×" if base else "—"
        equal = f"{RECIPE_STEPS * base / seconds:.0f}" if base else "—"
        lines.append(f"| {label} | {seconds:.3f} | {ratio} | {equal} |")
    a.md.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
