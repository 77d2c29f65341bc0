"""Mixed precision through the run scripts: `run_clm.py --bf16 --use_cpu`, the Trainer's own autocast.

The matrix of every head family × {autocast bf16, autocast fp16, a model cast to bf16} × {training step, eval loss,
generate} is item 4 of the head-family contract (tests/test_contract.py)."""

from test_run_clm import SMALL, run_clm, text_files  # noqa: F401 (fixture)


def test_run_clm_bf16_on_cpu(text_files, tmp_path):  # noqa: F811 (the imported fixture)
    """`run_clm.py --bf16 --use_cpu`, the Trainer's own autocast, with a margin head (crashed before)."""
    train, valid = text_files
    out = tmp_path / "bf16"
    proc = run_clm(
        "--train_file",
        str(train),
        "--validation_file",
        str(valid),
        "--output_dir",
        str(out),
        "--do_train",
        "--do_eval",
        "--max_steps",
        "2",
        "--max_train_samples",
        "16",
        "--max_eval_samples",
        "8",
        "--bf16",
        "--use_cpu",
        "--head",
        "margin",
        "--margin",
        "arc",
        "--m",
        "0.1",
        "--save_strategy",
        "no",
        *SMALL,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "model.safetensors").is_file()
