#!/usr/bin/env python
"""The sparse-softmax paper's table 1 in its regime (more than 100 classes), with seeds and learning curves.

    python benchmarks/reproduce/reproduce_sparse_many_classes.py                # 6 heads x 3 seeds, 2 runs at a time
    python benchmarks/reproduce/reproduce_sparse_many_classes.py --reuse        # keep finished runs, redo the tables
    python benchmarks/reproduce/reproduce_sparse_many_classes.py --max_steps 300 --seeds 0 --jobs 1 --out /tmp/sparse

Task: `wordnet-hypernyms` (288 classes, 17,529 / 1,000 / 2,000 WordNet noun glosses, label = the direct
hypernym), the built-in `tiny-bert` (2 layers, hidden 128, word-level tokenizer of 8,000 words trained on the
split) trained from scratch with `run_scripts/run_classification.py` exactly as a user runs it, with the softmax
head and the sparse head for k in {1, 10, 20, 50, 100} (the paper's table 1 grid; k < C for every k here).
Validation micro / macro F1 every `--eval_steps` give the learning curves; the test split gives the table (mean ±
sample std over the seeds). The paper fine-tunes BERT-base for 20 epochs; `--model minilm` runs the packaged
pretrained MiniLM instead, but at ~3 s per step of 32 glosses on one core (measured) its 18 runs do not fit this
machine's budget, so the committed table is from scratch, with `--max_steps` as the stated cap (the curves show
whether it flattened).

Writes `many_classes.csv` (one row per run), `many_classes.md` (means ± std) and `many_classes.png` (learning
curves and the test bars) under `--out`; run directories go to `--runs`.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATASET = "wordnet-hypernyms"


def heads(ks: list[int]) -> list[tuple[str, list[str]]]:
    return [("softmax", ["--head", "softmax"])] + [(f"sparse k={k}", ["--head", "sparse", "--k", str(k)]) for k in ks]


def run(name: str, flags: list[str], seed: int, a: argparse.Namespace) -> dict:
    run_dir = a.runs / f"{name.replace(' ', '').replace('=', '')}-seed{seed}"
    summary = run_dir / "run_summary.json"
    if not (a.reuse and summary.exists()):
        cmd = [
            sys.executable,
            str(ROOT / "run_scripts" / "run_classification.py"),
            "--output_dir", str(run_dir), "--overwrite_output_dir",
            "--dataset_name", DATASET, "--model_name_or_path", a.model,
            *(["--word_vocab_size", "8000"] if a.model == "tiny-bert" else []),
            "--do_train", "--do_eval", "--do_predict",
            "--max_seq_length", "48", "--per_device_train_batch_size", "32", "--per_device_eval_batch_size", "128",
            "--learning_rate", str(a.learning_rate), "--warmup_steps", str(a.max_steps // 10),
            "--max_steps", str(a.max_steps), "--eval_strategy", "steps", "--eval_steps", str(a.eval_steps),
            "--logging_steps", str(a.eval_steps), "--save_strategy", "no", "--report_to", "none",
            "--disable_tqdm", "true", "--seed", str(seed), *flags,
        ]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": str(a.threads), "MKL_NUM_THREADS": str(a.threads)}
        print("$", " ".join(cmd[1:]), flush=True)
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
        if proc.returncode:
            raise SystemExit(f"{name} seed {seed} failed:\n{proc.stderr[-3000:]}")
        print(f"  {name} seed {seed}: {time.perf_counter() - start:.0f} s", flush=True)
    s = json.loads(summary.read_text())
    history = json.loads((run_dir / "trainer_state.json").read_text())["log_history"]
    curve = [(h["step"], h["eval_f1_micro"], h["eval_f1_macro"]) for h in history if "eval_f1_micro" in h]
    return {
        "head": name,
        "seed": seed,
        "test_macro_f1": 100 * s["predict_f1_macro"],
        "test_micro_f1": 100 * s["predict_f1_micro"],
        "train_minutes": s["train_runtime"] / 60,
        "curve": curve,
    }


def mean_std(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else float("nan")
    return f"{statistics.mean(values):.2f} ± {sd:.2f}"


def write(rows: list[dict], a: argparse.Namespace, argv: list[str]) -> None:
    a.out.mkdir(parents=True, exist_ok=True)
    keys = ["head", "seed", "test_macro_f1", "test_micro_f1", "train_minutes", "final_val_micro_f1"]
    with open(a.out / "many_classes.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: (r["curve"][-1][1] * 100 if k == "final_val_micro_f1" else r[k]) for k in keys})
    names = list(dict.fromkeys(r["head"] for r in rows))
    seeds = sorted({r["seed"] for r in rows})
    lines = [
        f"Sparse-softmax table 1 analogue: {DATASET} (288 classes), {a.model} trained {a.max_steps} steps × 32, "
        f"lr {a.learning_rate}; test split (2,000 glosses), F1 in %, mean ± std over seeds {seeds}.",
        "",
        "| head | macro F1 | micro F1 | val micro F1 at the last 3 evals | train min |",
        "|---|---:|---:|---|---:|",
    ]
    for n in names:
        sub = [r for r in rows if r["head"] == n]
        last = range(-min(3, len(sub[0]["curve"])), 0)
        tail = [statistics.mean(r["curve"][i][1] * 100 for r in sub) for i in last]
        lines.append(
            f"| {n} | {mean_std([r['test_macro_f1'] for r in sub])} | {mean_std([r['test_micro_f1'] for r in sub])}"
            f" | {' → '.join(f'{v:.1f}' for v in tail)} | {statistics.mean(r['train_minutes'] for r in sub):.1f} |"
        )
    lines += ["", f"Command: `python benchmarks/reproduce/{Path(__file__).name} {' '.join(argv)}`".rstrip()]
    (a.out / "many_classes.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    plot(rows, names, a.out / "many_classes.png")


def plot(rows: list[dict], names: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4), dpi=120)
    for n in names:
        sub = [r for r in rows if r["head"] == n]
        steps = [p[0] for p in sub[0]["curve"]]
        mean = [statistics.mean(r["curve"][i][1] * 100 for r in sub) for i in range(len(steps))]
        left.plot(steps, mean, marker=".", label=n)
    left.set(xlabel="step", ylabel="validation micro F1 (%)", title=f"{DATASET}: mean over seeds")
    left.grid(alpha=0.3)
    left.legend(fontsize=7)
    for j, metric in enumerate(("test_macro_f1", "test_micro_f1")):
        for i, n in enumerate(names):
            vals = [r[metric] for r in rows if r["head"] == n]
            sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
            right.bar(j + i * 0.8 / len(names), statistics.mean(vals), 0.8 / len(names), yerr=sd, capsize=2,
                      color=f"C{i}", label=n if j == 0 else None)  # fmt: skip
    right.set_xticks([0.4 - 0.4 / len(names), 1.4 - 0.4 / len(names)], ["macro F1", "micro F1"])
    right.set(ylabel="test F1 (%)", title="test split (bars: mean, whiskers: std over seeds)")
    right.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ks", type=int, nargs="+", default=[1, 10, 20, 50, 100])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--model", default="tiny-bert", choices=["tiny-bert", "minilm"])
    ap.add_argument("--max_steps", type=int, default=2000)
    ap.add_argument("--eval_steps", type=int, default=250)
    ap.add_argument("--learning_rate", type=float, default=1e-3)
    ap.add_argument("--jobs", type=int, default=2, help="Runs at a time (each with --threads OMP threads).")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reuse", action="store_true", help="Keep runs whose run_summary.json exists.")
    ap.add_argument("--runs", type=Path, default=ROOT / "outputs" / "sparse_many_classes")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "sparse")
    argv = sys.argv[1:]
    a = ap.parse_args(argv)
    grid = [(name, flags, seed) for seed in a.seeds for name, flags in heads(a.ks)]
    with ThreadPoolExecutor(max_workers=a.jobs) as pool:
        rows = list(pool.map(lambda g: run(*g, a), grid))
    write(rows, a, argv)


if __name__ == "__main__":
    main()
