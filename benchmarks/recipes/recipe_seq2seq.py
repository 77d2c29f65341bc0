#!/usr/bin/env python
"""The seq2seq recipes of docs/results/seq2seq_recipes, run with the task's script exactly as a user would.

    python benchmarks/recipes/recipe_seq2seq.py --task translation                  # Bible es→en, seed 42: 11-14 min
    python benchmarks/recipes/recipe_seq2seq.py --task summarization --seeds 42 43 44 --reuse  # keep finished seeds
    python benchmarks/recipes/recipe_seq2seq.py --task translation --max_steps 2400 --no_csv   # more steps, no CSV row
    python benchmarks/recipes/recipe_seq2seq.py --task translation --head margin -- --margin cos --m 0.2 --s 16
    python benchmarks/recipes/recipe_seq2seq.py --task translation --dataset_name ding-de-en   # the same recipe, de→en

Arguments after `--` go to the script after the recipe's (a head's options); `--head` names the family and the
CSV's `head` column (`--label` overrides the column, e.g. `margin-cos`).

What the recipes fix (docs/results/seq2seq_recipes/README.md has the measurements): the built-in `tiny-bart`
(d_model 128) keeps BART's `init_std=0.02`, a value meant for d_model 1024. At d_model 128 the cross-attention
branch (v_proj · out_proj, both std 0.02) starts ~1 % of the residual stream, the decoder learns a target-side LM
first and the source gain (validation NLL with shuffled sources minus NLL with the right source) stays 0.000
nats/token through step 150 at lr 2e-3. With `init_std≈d_model**-0.5=0.088` the same run uses its source
(source gain 0.133 at step 150 and growing).

Writes one CSV row per metric (`task,dataset,head,metric,value,seeds,train_minutes`; value = mean over seeds)
to `--csv` (default docs/results/seq2seq_recipes/results.csv; rows of the same task/dataset/head are replaced).
BLEU / ROUGE / length ratio / distinct are the script's `predict_*` numbers (sacreBLEU 13a and rouge-score on the
word-level tokenizer's decoded text: lowercased, punctuation split, references decoded from the label ids);
chrF is sacreBLEU's chrF on the same strings. Summarization also gets a `lead` row: the first N words of the
article (N = the mean reference length in words) scored the same way.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

COMMON = [
    "--model_name_or_path", "tiny-bart",
    "--word_vocab_size", "10000",
    "--save_strategy", "no",
    "--report_to", "none",
    "--do_train", "--do_predict", "--predict_with_generate",
    "--generation_num_beams", "1",
    "--per_device_eval_batch_size", "64",
]  # fmt: skip

# task -> (script, dataset, the arguments the script gets besides --output_dir / --seed / --head, metrics kept)
RECIPES: dict[str, tuple[str, str, list[str], tuple[str, ...]]] = {
    "translation": (
        "run_translation.py",
        "bible-es-en",
        [
            *COMMON,
            "--config_overrides",
            "init_std=0.088,dropout=0.0",  # ~1 epoch: no dropout
            "--per_device_train_batch_size",
            "64",
            "--learning_rate",
            "2e-3",
            "--warmup_steps",
            "100",
            "--max_steps",
            "450",
            "--logging_steps",
            "50",
            "--max_predict_samples",
            "500",  # bounds greedy decoding time
        ],
        ("bleu", "chrf", "length_ratio", "distinct"),
    ),
    "summarization": (
        "run_summarization.py",
        "bbc-news",
        [
            *COMMON,
            "--config_overrides",
            "init_std=0.088,dropout=0.3",  # ~28 epochs of 1,801 articles
            "--per_device_train_batch_size",
            "32",
            "--learning_rate",
            "1e-3",
            "--warmup_steps",
            "50",
            "--max_steps",
            "1600",
            "--logging_steps",
            "50",
            "--max_source_length",
            "64",  # the lead of the article (256 with --head_tail: R1 0.04, 43% distinct)
            "--max_target_length",
            "24",
        ],
        ("rouge1", "rouge2", "rougeL", "bleu", "distinct"),
    ),
    "question_generation": (
        "run_question_generation.py",
        "faq",
        [
            *COMMON,
            "--config_overrides",
            "init_std=0.088,dropout=0.1",
            "--per_device_train_batch_size",
            "16",
            "--learning_rate",
            "2e-3",
            "--warmup_steps",
            "50",
            "--max_steps",
            "500",  # ~20 epochs of 403 answers
            "--logging_steps",
            "50",
            "--max_source_length",
            "128",
            "--max_target_length",
            "32",
        ],
        ("bleu", "bleu_1", "bleu_2", "bleu_3", "bleu_4", "rouge1", "rouge2", "rougeL", "distinct"),
    ),
}


def _set(args: list[str], flag: str, value: str) -> list[str]:
    args = list(args)
    args[args.index(flag) + 1] = value
    return args


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "generated_predictions.jsonl").read_text().splitlines()]


def _tokenizer(run_dir: Path):
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(run_dir)  # not AutoTokenizer: the run's config has custom code


def _as_scored(tok, texts: list[str], max_length: int) -> list[str]:
    """Texts the way the script scores references: encoded as labels (truncated) and decoded."""
    ids = tok(text_target=texts, max_length=max_length, truncation=True)["input_ids"]
    return [t.strip() for t in tok.batch_decode(ids, skip_special_tokens=True)]


def chrf(run_dir: Path, max_length: int) -> float:
    """sacreBLEU chrF of the predictions against the references as the script scores them (decoded label ids)."""
    import sacrebleu

    rows = _rows(run_dir)
    refs = _as_scored(_tokenizer(run_dir), [r["reference"] for r in rows], max_length)
    return sacrebleu.corpus_chrf([r["prediction"] for r in rows], [refs]).score


def lead_baseline(run_dir: Path, max_length: int) -> dict[str, float]:
    """Summarization's lead-N baseline on the same test articles: the first N words of each article (N = the mean
    reference length in words, rounded), tokenized and scored like the model's predictions."""
    from hf_heads.metrics import distinct_share
    from hf_heads.metrics.builders import _report_bleu, _report_rouge, load_metric

    rows = _rows(run_dir)
    tok = _tokenizer(run_dir)
    refs = _as_scored(tok, [r["reference"] for r in rows], max_length)
    n = round(sum(len(r.split()) for r in refs) / len(refs))
    leads = _as_scored(tok, [" ".join(r["source"].split()[:n]) for r in rows], max_length)
    out = _report_rouge(load_metric("rouge"), leads, refs) | _report_bleu(load_metric("sacrebleu"), leads, refs)
    return {**out, "distinct": distinct_share(leads), "lead_words": n}


def run_seed(task: str, seed: int, out: Path, args: list[str], threads: int, reuse: bool) -> dict:
    script = RECIPES[task][0]
    run_dir = out / f"seed{seed}"
    if not (reuse and (run_dir / "all_results.json").exists()):  # --reuse: a finished run of this seed is re-read
        cmd = [sys.executable, str(ROOT / "run_scripts" / script), "--output_dir", str(run_dir),
               "--overwrite_output_dir", "--seed", str(seed), *args]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
        print(" ".join(cmd), flush=True)
        start = time.time()
        subprocess.run(cmd, check=True, env=env, cwd=ROOT)
        print(f"seed {seed}: wall {(time.time() - start) / 60:.1f} min", flush=True)
    metrics = json.loads((run_dir / "all_results.json").read_text())
    result = {k: metrics[f"predict_{k}"] for k in RECIPES[task][3] if k not in ("chrf", "distinct")}
    if "chrf" in RECIPES[task][3]:
        result["chrf"] = chrf(run_dir, int(_flag(args, "--max_target_length", "64")))
    from hf_heads.metrics import distinct_share

    # from the predictions file: runs made before the scripts reported predict_distinct have it too
    result["distinct"] = distinct_share([r["prediction"] for r in _rows(run_dir)])
    result["train_minutes"] = metrics["train_runtime"] / 60
    print(f"seed {seed}: {result}", flush=True)
    return result


def _flag(args: list[str], flag: str, default: str) -> str:
    return args[args.index(flag) + 1] if flag in args else default


def write_rows(csv_path: Path, key: tuple[str, str, str], results: list[dict], seeds: list[int]) -> None:
    rows = []
    if csv_path.exists():
        with csv_path.open() as f:
            rows = [r for r in csv.DictReader(f) if (r["task"], r["dataset"], r["head"]) != key]
    minutes = sum(r["train_minutes"] for r in results) / len(results)
    for metric in results[0]:
        if metric == "train_minutes":
            continue
        value = sum(r[metric] for r in results) / len(results)
        rows.append(dict(zip(("task", "dataset", "head"), key, strict=True), metric=metric, value=f"{value:.4g}",
                         seeds=" ".join(map(str, seeds)), train_minutes=f"{minutes:.1f}"))  # fmt: skip
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    with csv_path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["task", "dataset", "head", "metric", "value", "seeds", "train_minutes"])
        writer.writeheader()
        writer.writerows(rows)
    write_table(csv_path, rows)
    write_plot(csv_path, rows)
    print(f"wrote {csv_path} and its .md / .png")


def write_table(csv_path: Path, rows: list[dict]) -> None:
    """`results.md` next to the CSV: one line per task / dataset / head, one column per metric (values as in the
    CSV: means over the listed seeds)."""
    metrics: list[str] = []
    runs: dict[tuple[str, str, str], dict] = {}
    for row in rows:
        metrics += [row["metric"]] if row["metric"] not in metrics else []
        run = runs.setdefault((row["task"], row["dataset"], row["head"]), {"seeds": row["seeds"]})
        run |= {row["metric"]: row["value"], "train_minutes": row["train_minutes"]}
    lines = [
        "| task | dataset | head | " + " | ".join(metrics) + " | seeds | train min |",
        "|---|---|---|" + "---:|" * (len(metrics) + 2),
        *[
            f"| {' | '.join(key)} | " + " | ".join(run.get(m, "") for m in metrics)
            + f" | {run['seeds'] or '-'} | {run['train_minutes']} |"
            for key, run in runs.items()
        ],
    ]  # fmt: skip
    csv_path.with_suffix(".md").write_text(
        f"Generated by benchmarks/recipes/recipe_seq2seq.py from {csv_path.name} (values: means over the seeds).\n\n"
        + "\n".join(lines)
        + "\n"
    )


def _seeds_label(seeds: str) -> str:
    n = len(seeds.split())
    return "baseline, no training" if n == 0 else f"{n} seed" + ("s" if n > 1 else "")


MAIN_METRIC = {"translation": "bleu", "summarization": "rouge1", "question_generation": "bleu"}


def write_plot(csv_path: Path, rows: list[dict]) -> None:
    """`results.png` next to the CSV: per task, the main metric (translation / QG: BLEU, summarization: ROUGE-1) of
    every head, each bar labelled with its seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = [t for t in MAIN_METRIC if any(r["task"] == t for r in rows)]
    fig, axes = plt.subplots(len(tasks), 1, figsize=(7, 1.2 + 0.45 * len(rows) / 3), squeeze=False)
    for ax, task in zip(axes[:, 0], tasks, strict=True):
        bars = [r for r in rows if r["task"] == task and r["metric"] == MAIN_METRIC[task]]
        ax.barh(range(len(bars)), [float(r["value"]) for r in bars], color="C0")
        ax.set_yticks(range(len(bars)), [f"{r['head']} ({_seeds_label(r['seeds'])})" for r in bars])
        ax.invert_yaxis()
        ax.set_title(f"{task}, {bars[0]['dataset']}: {MAIN_METRIC[task]} (mean over seeds)", fontsize=9)
    fig.tight_layout()
    fig.savefig(csv_path.with_suffix(".png"), dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", choices=sorted(RECIPES), required=True)
    ap.add_argument("--head", default="softmax", help="The head family (--head of the script).")
    ap.add_argument("--label", default=None, help="The CSV's head column (default: --head).")
    ap.add_argument("--seeds", type=int, nargs="+", default=[42])
    ap.add_argument(
        "--dataset_name", default=None, help="Another corpus of the task (ding-de-en), same recipe arguments."
    )
    ap.add_argument("--out", type=Path, default=None, help="Run directories (default outputs/recipe_<task>[_label]).")
    ap.add_argument("--csv", type=Path, default=ROOT / "docs/results/seq2seq_recipes/results.csv")
    ap.add_argument("--max_steps", type=int, default=None, help="Override the recipe's steps (and nothing else).")
    ap.add_argument(
        "--threads", type=int, default=1,
        help="OMP threads (1: on 2 cores shared with other work, 2 threads ran 3-4x slower per step).",
    )  # fmt: skip
    ap.add_argument("--reuse", action="store_true", help="Re-read a seed whose run in --out has finished.")
    ap.add_argument("--no_csv", action="store_true", help="Do not write the CSV (e.g. with --max_steps).")
    ap.add_argument("head_args", nargs="*", help="After `--`: more arguments for the script (head options).")
    a = ap.parse_args()
    script, dataset, args, _ = RECIPES[a.task]
    recipe_dataset, dataset = dataset, a.dataset_name or dataset
    label = a.label or a.head
    args = [*args, "--dataset_name", dataset, "--head", a.head, *a.head_args]
    if a.max_steps is not None:
        args = _set(args, "--max_steps", str(a.max_steps))
    stem = f"recipe_{a.task}" + ("" if dataset == recipe_dataset else f"_{dataset}")
    out = a.out or ROOT / "outputs" / (stem + ("" if label == "softmax" else f"_{label}"))
    results = [run_seed(a.task, seed, out, args, a.threads, a.reuse) for seed in a.seeds]
    if a.task == "summarization":
        lead = lead_baseline(out / f"seed{a.seeds[0]}", int(_flag(args, "--max_target_length", "64")))
        n = lead.pop("lead_words")
        print(f"lead-{n} baseline: {lead}", flush=True)
        if not a.no_csv:
            keep = [m for m in RECIPES[a.task][3] if m in lead]
            write_rows(a.csv, (a.task, dataset, f"lead-{n}"), [{m: lead[m] for m in keep} | {"train_minutes": 0}], [])
    if not a.no_csv:
        write_rows(a.csv, (a.task, dataset, label), results, a.seeds)


if __name__ == "__main__":
    main()
