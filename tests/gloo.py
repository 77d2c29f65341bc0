"""Running a test's worker processes over gloo on the CPU (tests/integrations/test_fsdp.py, test_deepspeed.py,
tests/losses/test_vocab_parallel.py): each worker is the test file run as a script, `python FILE RANK WORLD INIT_FILE
OUT_JSON`, meeting at a file:// store (no port to pick); rank 0 writes the JSON result."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import torch


def run_workers(script: str, world: int, tmp_path: Path, timeout: float, extra: list[str] = ()) -> dict:
    """Start `world` workers of `script`, wait for them (killed past `timeout` s) and return rank 0's JSON; a worker
    that fails or runs too long fails the test with the end of every worker's log. `extra`: more arguments to each
    worker; a worker that sets up its own process group (env://) finds MASTER_ADDR / MASTER_PORT set."""
    out = tmp_path / "result.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    # the worker runs from its test's folder (tests/losses, tests/integrations): tests/ on its path too, for the
    # helpers the test file imports at its top (conftest, gloo), as pytest's `pythonpath` (pyproject.toml) gives
    # the tests
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(__file__).resolve().parent), env.get("PYTHONPATH")) if p)
    with socket.socket() as s:  # a free port for env:// rendezvous
        s.bind(("127.0.0.1", 0))
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(s.getsockname()[1]))
    init = tmp_path / "store"
    start = time.perf_counter()
    logs = [tmp_path / f"rank{rank}.log" for rank in range(world)]  # files, not pipes: a full pipe would block
    procs = []
    try:
        for rank, log in enumerate(logs):
            with log.open("w") as f:
                cmd = [sys.executable, script, str(rank), str(world), str(init), str(out), *extra]
                procs.append(subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT))
        for proc in procs:
            proc.wait(timeout=max(1.0, timeout - (time.perf_counter() - start)))
    except subprocess.TimeoutExpired:
        pass
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    if any(proc.returncode for proc in procs):
        tails = "\n".join(
            f"--- rank {rank} (exit {proc.returncode}):\n{log.read_text()[-4000:]}"
            for rank, (proc, log) in enumerate(zip(procs, logs, strict=True))
        )
        raise AssertionError(f"a worker failed or ran past {timeout} s:\n{tails}")
    print(f"{world}-process run of {Path(script).name}: {time.perf_counter() - start:.1f} s")
    return json.loads(out.read_text())


def diff(got: torch.Tensor, want: torch.Tensor) -> list[float]:
    """[max |got - want|, that / max |want|] (infinite entries must match exactly; NaN counts as a difference)."""
    got, want = got.detach().double(), want.detach().double()
    assert got.shape == want.shape, (got.shape, want.shape)
    delta = torch.where(got == want, 0.0, (got - want).abs())  # the sparse head's -inf logits match as equal
    abs_diff = float(delta.max()) if got.numel() else 0.0
    want = want[want.isfinite()]
    scale = float(want.abs().max()) if want.numel() else 0.0  # an all-infinite want (a sparse eval loss): no scale
    return [abs_diff, abs_diff / max(scale, 1e-30)]


def worst_over_ranks(checks: dict[str, list[float]]) -> dict[str, list[float]]:
    """A worker's checks ([abs, rel] differences by name), each the largest over the ranks (an all-reduce)."""
    import torch.distributed as dist

    values = torch.tensor(list(checks.values()), dtype=torch.float64)
    dist.all_reduce(values, op=dist.ReduceOp.MAX)
    return dict(zip(checks, values.tolist(), strict=True))


def finish(results: dict, rank: int, out_file: str) -> None:
    """Rank 0 writes the JSON result; every worker then leaves the process group."""
    import torch.distributed as dist

    if rank == 0:
        Path(out_file).write_text(json.dumps(results, indent=1))
    dist.barrier()
    dist.destroy_process_group()
