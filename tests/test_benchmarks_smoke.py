"""The benchmark scripts run end to end at toy sizes (their timings are only meaningful at full size)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HEADS_BENCH_IN_PROCESS": "1"}  # no fresh process per method


@pytest.mark.parametrize(
    "script, args, expect",
    [
        (
            "bench_sparse.py",
            ["--tokens", "64", "--hidden", "16", "--vocab", "300", "--k", "5", "--repeats", "1"],
            "| hf_heads chunked, sparse k=5 |",
        ),
        (
            "bench_margin.py",
            ["--tokens", "64", "--hidden", "16", "--vocab", "300", "--repeats", "1"],
            "| hf_heads context_norm max-norm |",
        ),
        (
            "bench_sampled.py",
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
        ),
        (
            "bench_eval.py",
            ["--tokens", "64", "--hidden", "16", "--vocab", "300", "--repeats", "1"],
            "| hf_heads HeadsTrainer.evaluate |",
        ),
        (
            "bench_continuous.py",
            ["--tokens", "64", "--hidden", "16", "--vocab", "300", "--repeats", "1", "--plot", "{tmp}/ips.png"],
            "| continuous d=300, syn-margin-projection |",
        ),
    ],
)
def test_benchmark_runs_at_toy_size(script, args, expect, tmp_path):
    args = [a.format(tmp=tmp_path) for a in args]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=ROOT / "benchmarks",
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert expect in proc.stdout
    if script == "bench_continuous.py":
        assert "| continuous d=50, beam 5 |" in proc.stdout and (tmp_path / "ips.png").read_bytes()[:4] == b"\x89PNG"
