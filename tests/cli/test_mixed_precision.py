"""Mixed precision through the run scripts: `run_clm.py --bf16 --use_cpu`, the Trainer's own autocast.

The matrix of every head family × {autocast bf16, autocast fp16, a model cast to bf16} × {training step, eval loss,
generate} is item 4 of the head-family contract (tests/heads/test_contract.py)."""

import json

import pytest
from safetensors.torch import load_file
from test_run_clm import SMALL, run_clm, text_files  # noqa: F401 (fixture)


@pytest.mark.slow
def test_run_clm_bf16_on_cpu(text_files, tmp_path):  # noqa: F811 (the imported fixture)
    """`run_clm.py --bf16 --use_cpu`, the Trainer's own autocast, with a margin head (crashed before): the same run
    as in float32 to within the 2% of the contract's mixed-precision item, in training and evaluation loss, and the
    saved weights stay float32 (autocast computes in bf16, it does not cast the model)."""
    train, valid = text_files
    results = {}
    for precision in ("bf16", "fp32"):
        out = tmp_path / precision
        proc = run_clm(
            *("--train_file", str(train), "--validation_file", str(valid), "--output_dir", str(out)),
            *("--do_train", "--do_eval", "--max_steps", "2", "--max_train_samples", "16", "--max_eval_samples", "8"),
            *(["--bf16"] if precision == "bf16" else []),
            *("--use_cpu", "--head", "margin", "--margin", "arc", "--m", "0.1", "--save_strategy", "no"),
            *SMALL,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        results[precision] = json.loads((out / "all_results.json").read_text())
        weights = load_file(out / "model.safetensors")
        assert {t.dtype for t in weights.values() if t.is_floating_point()} == {weights["head.weight"].dtype}
        assert str(weights["head.weight"].dtype) == "torch.float32"
    for key in ("train_loss", "eval_loss"):
        half, full = results["bf16"][key], results["fp32"][key]
        assert abs(half - full) <= 0.02 * abs(full), (key, half, full)
