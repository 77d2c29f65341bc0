"""The benchmark scripts run end to end at toy sizes (their timings are only meaningful at full size)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HEADS_BENCH_IN_PROCESS": "1"}  # no fresh process per method


def run_script(script: str, *args: str) -> subprocess.CompletedProcess:
    """benchmarks/<group>/<script> with `args`, run from the repository root (as its docstring shows), output
    captured."""
    command = [sys.executable, str(ROOT / "benchmarks" / script), *args]
    return subprocess.run(command, capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=600)


# slow (make test-all): bench_sparse, bench_sampled (the GPU script's dry run, tests/project/test_gpu_script.py, runs
# both at toy sizes), every margin option of bench_margin, bench_loss_options, bench_trl_statistics, bench_eval,
# bench_continuous, bench_chunk_rows, bench_demo_step, bench_sparse_script, bench_vocab_parallel, bench_revisions,
# probe_continuous_copy
@pytest.mark.parametrize(
    "script, args, expect",
    [
        pytest.param(  # two trees: this one against itself
            "speed/bench_revisions.py",
            [
                "--old",
                ".",
                "--new",
                ".",
                "--rounds",
                "1",
                "--calls",
                "1",
                "--rows",
                "32",
                "--hidden",
                "8",
                "--vocab",
                "64",
            ],
            "| sparse k=20 |",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            "speed/bench_sparse.py",
            ["--tokens", "64", "--hidden", "16", "--vocab", "300", "--k", "5", "--repeats", "1"],
            "| hf_heads chunked, sparse k=5 |",
            marks=pytest.mark.slow,
        ),
        pytest.param(  # every margin option (~50 s): make test-all; the paired run below covers the script
            "speed/bench_margin.py",
            ["--tokens", "64", "--hidden", "16", "--vocab", "300", "--repeats", "1"],
            "| hf_heads context_norm max-norm |",
            marks=pytest.mark.slow,
        ),
        (
            "speed/bench_margin.py",
            ["--tokens", "64", "--hidden", "16", "--vocab", "300", "--repeats", "2", "--paired", "1"],
            "time vs hf_heads softmax, median (min–max) of 2 pairs |",
        ),
        pytest.param(
            "speed/bench_sampled.py",
            [
                "--tokens",
                "64",
                "--hidden",
                "16",
                "--vocab",
                "300",
                "--num_samples",
                "8",
                "--repeats",
                "1",
                "--modes",
                "output layer",
            ],
            "| bce-nce |",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            "speed/bench_eval.py",
            ["--tokens", "64", "--hidden", "16", "--vocab", "300", "--repeats", "1"],
            "| hf_heads HeadsTrainer.evaluate |",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            "speed/bench_continuous.py",
            ["--tokens", "64", "--hidden", "16", "--vocab", "300", "--repeats", "1", "--plot", "{tmp}/ips.png"],
            "| continuous d=300, syn-margin-projection |",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            "speed/bench_loss_options.py",
            ["--tokens", "64", "--hidden", "16", "--vocab", "300", "--rounds", "1"],
            "| z-loss + class weights |",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            "speed/bench_loss_options.py",
            ["--tokens", "64", "--hidden", "16", "--vocab", "300", "--rounds", "1", "--only", "predictions"],
            "| same-pass accuracy (returns predictions) |",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            "speed/bench_trl_statistics.py",
            ["--tokens", "64", "--hidden", "16", "--vocab", "300", "--rounds", "1"],
            "| loss and statistics in one pass (token_statistics) |",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            "speed/bench_chunk_rows.py",
            ["--tokens", "64", "--hidden", "16", "--vocab", "300", "--rows", "5", "64", "--repeats", "1"],
            "| fused softmax, 5 rows per chunk |",
            marks=pytest.mark.slow,
        ),
        pytest.param(  # V = 300: a 1 MiB budget holds 873 float32 rows, so 64 rows run as one chunk
            "speed/bench_memory_budget.py",
            ["--tokens", "64", "--hidden", "16", "--vocab", "300", "--budgets", "1", "--rounds", "1", "--repeats"]
            + ["1"],
            "| memory_budget=1 | 64 | 1 |",
        ),
        pytest.param(
            "speed/bench_softmax_pass.py",
            ["--rows", "32", "--hidden", "8", "--vocab", "64", "--rounds", "2", "--threads", "1"],
            "| hf_heads softmax, log-softmax then exp |",
        ),
        pytest.param(
            "speed/bench_softmax_pass.py",
            ["--rows", "32", "--hidden", "8", "--vocab", "64", "--threads", "1", "--profile"],
            "aten::mm",
        ),
        pytest.param(
            "speed/bench_demo_step.py",
            ["--vocab", "300", "--batch", "2", "--block", "8", "--repeats", "1", "--threads", "1"],
            "| margin arc m=0.001 f=log-unigram g=max-norm |",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            "speed/bench_sparse_script.py",
            ["--vocab", "300", "--hidden", "16", "--block", "16", "--steps", "2", "--eval_blocks", "2"]
            + ["--repeats", "1"],
            "| sparse k=20 |",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            "speed/bench_vocab_parallel.py",
            ["--tokens", "64", "--hidden", "16", "--vocab", "300", "--repeats", "1", "--heads", "margin"],
            "| margin | 2 processes, W sharded |",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            "reproduce/probe_continuous_copy.py",
            ["--loss", "cosine", "--table", "mean-centred", "--freeze_bias", "--steps", "2"],
            "loss=cosine table=mean-centred freeze_bias=True steps=2: greedy copy accuracy",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_benchmark_runs_at_toy_size(script, args, expect, tmp_path):
    proc = run_script(script, *[a.format(tmp=tmp_path) for a in args])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert expect in proc.stdout
    if script == "speed/bench_continuous.py":
        assert "| continuous d=50, beam 5 |" in proc.stdout and (tmp_path / "ips.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_lm_grid_seeds_and_curves(tmp_path):
    """The reproduction driver with two seeds and an evaluation every 2 steps: mean ± std per setting, the
    per-seed values, curves.csv / curves.png; the first seed's models saved and plotted as the margin paper's
    figure 1 (plot_margin_word_vectors.py); a resumed run keeps the finished settings."""
    cos = {"family": "margin", "margin": "cos", "m": 0.01, "scale": 64.0}
    code = (
        "from _lm_grid import run_grid\n"
        f"run_grid([('base', 'baseline', {{'family': 'softmax'}}), ('t1', 'cos s=64 m=0.01', {cos!r})],"
        f" corpus='bible-web', out=r'{tmp_path}', steps=4, batch=2, block=16, lr=1e-3, max_eval_blocks=4,"
        f" seeds=(0, 1), eval_steps=2, save_models=r'{tmp_path / 'models'}')\n"
        f"run_grid([('base', 'baseline', {{'family': 'softmax'}})], corpus='bible-web', out=r'{tmp_path}', steps=4,"
        " batch=2, block=16, lr=1e-3, max_eval_blocks=4, seeds=(0, 1), eval_steps=2, resume=True)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=ROOT / "benchmarks" / "common",
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "baseline                                   kept from" in proc.stdout  # resume=True ran nothing
    table = (tmp_path / "results.md").read_text()
    assert "seeds [0, 1]" in table and "| per seed |" in table
    curves = (tmp_path / "curves.csv").read_text().splitlines()
    assert curves[0] == "setting,seed,step,perplexity" and len(curves) == 1 + 2 * 2 * 2  # 2 rows x 2 seeds x 2 evals
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["baseline", "cos_s-64_m-0.01"]
    args = ["--models", str(tmp_path / "models"), "--out", str(tmp_path)]
    proc = run_script("figures/plot_margin_word_vectors.py", *args, "--settings", "baseline", "cos s=64 m=0.01")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = (tmp_path / "word_vectors.md").read_text().splitlines()
    assert rows[4].startswith("| baseline | ") and rows[5].startswith("| cos s=64 m=0.01 | ") and len(rows) == 6
    assert (tmp_path / "word_vectors.png").read_bytes()[:4] == b"\x89PNG"
