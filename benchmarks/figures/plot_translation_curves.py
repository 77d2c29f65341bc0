#!/usr/bin/env python
"""BLEU against training steps and against training wall-clock, and teacher-forced accuracy@1/5, for translation
runs made by `recipe_seq2seq.py` with validation BLEU during training (the continuous-output paper's claim is speed).

    python benchmarks/recipes/recipe_seq2seq.py --task translation --head continuous --label continuous-vmf-centred \\
        -- --loss vmf --center_embeddings frequency \\
        --do_eval --eval_strategy steps --eval_steps 150 --max_eval_samples 200
    python benchmarks/figures/plot_translation_curves.py outputs/recipe_translation_*-centred/seed42 \\
        outputs/recipe_translation_softmax-curves/seed42 --out docs/results/seq2seq_recipes/continuous_curves

Each run directory's `trainer_state.json` gives validation BLEU (greedy, the first 200 validation verses) at each
evaluation; its wall-clock is the training time only: step × (train_runtime − the evaluations' runtime) / steps,
i.e. the run's mean seconds per step (steps cost the same throughout a run). `run_summary.json` gives the test BLEU
and the final teacher-forced accuracy@k on the validation verses (`eval_accuracy@k`). Writes `<out>.md` and
`<out>.png`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def load(run_dir: Path) -> dict:
    state = json.loads((run_dir / "trainer_state.json").read_text())
    summary = json.loads((run_dir / "run_summary.json").read_text())
    history = state["log_history"]
    end = next(i for i, h in enumerate(history) if "train_runtime" in h)  # evaluations before it ran in training
    evals = [h for h in history[:end] if "eval_bleu" in h]
    if not evals:
        raise SystemExit(f"{run_dir}: no validation BLEU during training (run with --do_eval --eval_strategy steps)")
    steps = state["global_step"]
    seconds_per_step = (history[end]["train_runtime"] - sum(h["eval_runtime"] for h in evals)) / steps
    label = f"{run_dir.parent.name.removeprefix('recipe_translation_')} ({run_dir.name})"  # e.g. softmax (seed42)
    return {
        "label": label,
        "curve": [(h["step"], h["step"] * seconds_per_step / 60, h["eval_bleu"]) for h in evals],
        "seconds_per_step": seconds_per_step,
        "test_bleu": summary.get("predict_bleu"),
        "acc1": summary.get("eval_accuracy@1"),
        "acc5": summary.get("eval_accuracy@5"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", type=Path, nargs="+")
    ap.add_argument("--out", type=Path, required=True, help="Path stem of the .md and .png written.")
    a = ap.parse_args()
    runs = [load(r) for r in a.runs]
    steps = sorted({s for r in runs for s, _, _ in r["curve"]})
    lines = [
        "Bible es→en translation recipe: validation BLEU (greedy, first 200 verses) during training, test "
        "BLEU (500 verses), teacher-forced validation accuracy@1/@5 (%) after training, training seconds per step "
        "(one thread on the shared 2-core machine; runs overlapped with other jobs, so compare them loosely).",
        "",
        "| run | " + " | ".join(f"BLEU @{s}" for s in steps) + " | test BLEU | acc@1 | acc@5 | s/step |",
        "|---|" + "---:|" * (len(steps) + 4),
    ]
    for r in runs:
        by_step = {s: b for s, _, b in r["curve"]}
        cells = [f"{by_step[s]:.2f}" if s in by_step else "–" for s in steps]
        acc = [f"{100 * v:.1f}" if v is not None else "–" for v in (r["acc1"], r["acc5"])]
        test = f"{r['test_bleu']:.2f}" if r["test_bleu"] is not None else "–"
        lines.append(
            f"| {r['label']} | {' | '.join(cells)} | {test} | {' | '.join(acc)} | {r['seconds_per_step']:.2f} |"
        )
    command = " ".join(map(str, [*a.runs, "--out", a.out]))
    lines += ["", f"Command: `python benchmarks/figures/plot_translation_curves.py {command}`"]
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), dpi=120)
    for i, r in enumerate(runs):
        xs_step, xs_min, ys = zip(*r["curve"], strict=True)
        axes[0].plot(xs_step, ys, marker="o", color=f"C{i}", label=r["label"])
        axes[1].plot(xs_min, ys, marker="o", color=f"C{i}", label=r["label"])
    axes[0].set(xlabel="training step (64 verse pairs)", ylabel="validation BLEU", title="BLEU against steps")
    axes[1].set(xlabel="training minutes (one thread)", ylabel="validation BLEU", title="BLEU against wall-clock")
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(a.out.with_suffix(".png"))
    plt.close(fig)


if __name__ == "__main__":
    main()
