"""Shared check of the run scripts' end-to-end tests: a script reopens the model directory it wrote, to evaluate
it (no training) and to train it further, with the saved head and tokenizer."""

import json
import subprocess
from collections.abc import Callable
from pathlib import Path


def assert_reopens(
    run: Callable[..., subprocess.CompletedProcess],
    script: str,
    trained: Path,
    *data_args: str,
    eval_only: bool = False,
) -> dict:
    """Run `script --model_name_or_path trained` to continue training for one step and evaluate (or only
    evaluate); returns its run summary. The reopened run keeps the trained model's head."""
    out = trained.parent / f"{trained.name}-{'evaluated' if eval_only else 'continued'}"
    steps = [] if eval_only else ["--do_train", "--max_steps", "1"]
    proc = run(
        script,
        "--model_name_or_path",
        str(trained),
        "--output_dir",
        str(out),
        "--do_eval",
        *steps,
        *data_args,
        "--report_to",
        "none",
        "--save_strategy",
        "no",
        "--disable_tqdm",
        "true",
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["head"] == json.loads((trained / "config.json").read_text())["head"]
    assert any(k.startswith("eval_") for k in summary)
    return summary
