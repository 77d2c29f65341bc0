#!/usr/bin/env python
"""Small reproduction of the sparse-softmax paper's tables 1, 3 and 5 with the run scripts users run.

    python benchmarks/reproduce/reproduce_sparse.py classification   # table 1: softmax vs k in {1,10,20,50}
    python benchmarks/reproduce/reproduce_sparse.py seq2seq          # tables 3 and 5: beam 1 and beam 5
    python benchmarks/reproduce/reproduce_sparse.py all --out docs/results/sparse

Classification (table 1): the packaged MiniLM encoder fine-tuned on WordNet's 45 lexicographer classes
(and BBC News' 5 topics, long articles truncated head+tail as in the paper) with the softmax head and the
sparse head for each k; macro and micro F1 on the test split. k >= number of classes IS softmax.

Seq2seq (tables 3 and 5): BERT2BERT warm-started from MiniLM (the paper fine-tunes UNILM, a BERT-style
seq2seq model) for question generation (FAQ answer -> question; BLEU-1..4 like table 3) and summarization
(BBC body -> headline; ROUGE-1/2 like table 5), softmax vs sparse k=20, both with
label smoothing 0.1 as in the paper; each trained model is decoded with beam 1 and beam 5 on the test
split (the sparse head keeps k=20 at decoding, which is >= the beam).

Every setting is a `run_scripts/run_*.py` command (printed as it runs); results.md / results.csv and PNG
plots go to `--out`. One seed per setting: differences of a point or two are within seed noise here.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMMON = [
    "--report_to",
    "none",
    "--seed",
    "0",
    "--save_strategy",
    "no",
    "--disable_tqdm",
    "true",
    "--overwrite_output_dir",
]


def run(script: str, out: Path, args: list[str]) -> dict:
    cmd = [sys.executable, str(ROOT / "run_scripts" / script), "--output_dir", str(out), *args, *COMMON]
    print("$", " ".join(cmd[1:]), flush=True)
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode:
        raise SystemExit(f"{script} failed:\n{proc.stderr[-3000:]}")
    summary = json.loads((out / "run_summary.json").read_text())
    summary["wall_seconds"] = time.perf_counter() - start
    return summary


def heads_for(num_classes: int, ks: list[int]) -> list[tuple[str, list[str]]]:
    out = [("softmax", ["--head", "softmax"])]
    for k in ks:
        name = f"sparse k={k}" + (" (= softmax, k >= C)" if k >= num_classes else "")
        out.append((name, ["--head", "sparse", "--k", str(k)]))
    return out


def classification(out: Path, steps: int) -> list[dict]:
    rows = []
    datasets = [
        (
            "wordnet-lexnames",
            45,
            [1, 10, 20, 50],
            ["--max_seq_length", "48", "--per_device_train_batch_size", "32", "--max_steps", str(steps)],
        ),
        (
            "bbc-news",
            5,
            [1, 2, 3],
            [
                "--max_seq_length",
                "128",
                "--head_tail",
                "--per_device_train_batch_size",
                "16",
                "--max_steps",
                str(steps // 2),
            ],
        ),
    ]
    for dataset, classes, ks, extra in datasets:
        for name, flags in heads_for(classes, ks):
            run_dir = out / "runs" / f"clf-{dataset}-{name.split(' (')[0].replace(' ', '').replace('=', '')}"
            s = run(
                "run_classification.py",
                run_dir,
                [
                    "--dataset_name",
                    dataset,
                    "--model_name_or_path",
                    "minilm",
                    "--do_train",
                    "--do_predict",
                    "--learning_rate",
                    "1e-4",
                    "--warmup_steps",
                    str(steps // 10),
                    *extra,
                    *flags,
                ],
            )
            rows.append(
                {
                    "dataset": dataset,
                    "classes": classes,
                    "head": name,
                    "macro_f1": s["predict_f1_macro"],
                    "micro_f1": s["predict_f1_micro"],
                    "majority_class_accuracy": s["predict_majority_class_accuracy"],
                    "train_seconds": s["train_runtime"],
                }
            )
            print(rows[-1], flush=True)
    return rows


def seq2seq(out: Path, steps: int) -> list[dict]:
    rows = []
    tasks = [
        ("run_question_generation.py", "faq", ["--max_source_length", "128", "--max_target_length", "32"]),
        (
            "run_summarization.py",
            "bbc-news",
            ["--max_source_length", "192", "--max_target_length", "24", "--head_tail"],
        ),
    ]
    heads = [("softmax", ["--head", "softmax"]), ("sparse k=20", ["--head", "sparse", "--k", "20"])]
    for script, dataset, extra in tasks:
        for name, flags in heads:
            run_dir = out / "runs" / f"{dataset}-{name.replace(' ', '').replace('=', '')}"
            train = [
                "--dataset_name",
                dataset,
                "--model_name_or_path",
                "minilm",
                "--do_train",
                "--do_predict",
                "--predict_with_generate",
                "--generation_num_beams",
                "1",
                "--max_steps",
                str(steps),
                "--per_device_train_batch_size",
                "16",
                "--learning_rate",
                "2e-4",
                "--warmup_steps",
                str(steps // 10),
                "--head_label_smoothing",
                "0.1",
                *extra,
                *flags,
            ]
            first = run(script, run_dir, train)
            beam5 = run(
                script,
                run_dir.with_name(run_dir.name + "-beam5"),
                [
                    "--model_name_or_path",
                    str(run_dir),
                    "--dataset_name",
                    dataset,
                    "--do_predict",
                    "--predict_with_generate",
                    "--generation_num_beams",
                    "5",
                    *extra,
                ],
            )
            for beams, s, d in ((1, first, run_dir), (5, beam5, run_dir.with_name(run_dir.name + "-beam5"))):
                row = {
                    "task": dataset,
                    "head": name,
                    "beams": beams,
                    "train_seconds": first["train_runtime"],
                    "distinct_predictions": distinct_predictions(d),
                }
                for key in ("rouge1", "rouge2", "rougeL", "bleu_1", "bleu_2", "bleu_3", "bleu_4"):
                    row[key] = s[f"predict_{key}"] * (100 if key.startswith("rouge") else 1)
                rows.append(row)
                print(row, flush=True)
    return rows


def distinct_predictions(run_dir: Path) -> str:
    """How many different outputs the model generated over the test split ("n / N"): a model that ignores
    its input writes one constant text, whatever its BLEU / ROUGE."""
    lines = (run_dir / "generated_predictions.jsonl").read_text(encoding="utf-8").splitlines()
    return f"{len({json.loads(line)['prediction'] for line in lines})} / {len(lines)}"


def write(rows: list[dict], out: Path, name: str, header: str) -> None:
    with open(out / f"{name}.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    keys = list(rows[0])
    lines = [header, "", "| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for r in rows:
        lines.append("| " + " | ".join(f"{v:.2f}" if isinstance(v, float) else str(v) for v in r.values()) + " |")
    (out / f"{name}.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


def plot(rows: list[dict], out: Path, name: str, group: str, label, metrics: list[str], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = list(dict.fromkeys(r[group] for r in rows))
    fig, axes = plt.subplots(1, len(groups), figsize=(5.5 * len(groups), 3.8), dpi=120, squeeze=False)
    for ax, g in zip(axes[0], groups, strict=True):
        sub = [r for r in rows if r[group] == g]
        width = 0.8 / len(sub)
        for i, r in enumerate(sub):
            xs = [j + i * width for j in range(len(metrics))]
            ax.bar(xs, [r[m] for m in metrics], width, label=label(r))
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(metrics))], metrics)
        ax.set_title(f"{title}: {g}")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / f"{name}.png")
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["classification", "seq2seq", "all"])
    ap.add_argument("--classification_steps", type=int, default=200)
    ap.add_argument("--seq2seq_steps", type=int, default=150)
    ap.add_argument("--out", default="docs/results/sparse")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.what in ("classification", "all"):
        rows = classification(out, args.classification_steps)
        for r in rows:
            for key in ("macro_f1", "micro_f1", "majority_class_accuracy"):
                r[key] = 100 * r[key]
        write(
            rows,
            out,
            "classification",
            f"Table 1 analogue: test-split F1 (%) after {args.classification_steps} "
            f"steps (BBC: {args.classification_steps // 2}), MiniLM encoder, one seed.",
        )
        plot(rows, out, "classification", "dataset", lambda r: r["head"], ["macro_f1", "micro_f1"], "F1 (%)")
    if args.what in ("seq2seq", "all"):
        rows = seq2seq(out, args.seq2seq_steps)
        write(
            rows,
            out,
            "seq2seq",
            f"Tables 3 and 5 analogue: test split, {args.seq2seq_steps} steps, BERT2BERT "
            "from MiniLM, label smoothing 0.1, one seed. ROUGE F1 x 100, BLEU-n on 0-100.",
        )
        plot(
            rows,
            out,
            "seq2seq",
            "task",
            lambda r: f"{r['head']}, beam {r['beams']}",
            ["rouge1", "rouge2", "bleu_1", "bleu_2", "bleu_4"],
            "test",
        )


if __name__ == "__main__":
    main()
