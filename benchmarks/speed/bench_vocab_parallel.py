#!/usr/bin/env python
"""Vocabulary parallelism (hf_heads.losses.vocab_parallel) against one process with the whole W: seconds per
training step of the output layer (forward + backward of the loss), on the CPU's cores or on GPUs.

    python benchmarks/speed/bench_vocab_parallel.py                       # N=2048, H=512, V=50,000, 2 processes, CPU
    python benchmarks/speed/bench_vocab_parallel.py --heads softmax margin --world 2 --repeats 5

Rows, per head (softmax; margin: ArcFace m=0.2 with log-unigram word norms and max-norm; sparse k=20):
- "one process, whole W, T threads": the head unsharded in one process with `--world` threads (all the cores);
- "one process, whole W, 1 thread": the same on one core (what each of the sharded processes has);
- "R processes, W sharded": R gloo processes of one thread each, W (and the bias) a DTensor `Shard(0)` over them
  (`shard_vocabulary`), the same hidden states and labels on each; the time is the slowest process's.

Each row runs in fresh processes; seconds are the median (min–max) of `--repeats` steps after one warm-up step; the
memory column is the peak RSS growth of the step in each process (the sharded processes' largest). On a CPU the
sharded step computes half the logits per process; the collectives (gloo, through shared memory) and the per-process
rows it repeats (h, its gradient, the checks) are what it adds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common: the shared helpers
from _timing import device_line, measure, seconds_cell  # noqa: E402

HEADS = {
    "softmax": {"family": "softmax"},
    "margin": {"family": "margin", "margin": "arc", "m": 0.2, "word_norm": "log-unigram", "context_norm": "max-norm"},
    "sparse": {"family": "sparse", "k": 20},
}


def _step_fn(head, hidden, labels):
    def step():
        head.zero_grad(set_to_none=True)
        h = hidden.clone().requires_grad_()
        loss, _ = head(h, labels, return_logits=False)
        loss.backward()

    return step


def _build(name: str, a) -> tuple:
    from hf_heads.heads import make_head

    torch.manual_seed(0)
    head = make_head(a.hidden, a.vocab, HEADS[name]).train()
    if head.needs_counts:
        head.set_word_counts(torch.arange(a.vocab, 0, -1, dtype=torch.float32))
    gen = torch.Generator().manual_seed(1)
    hidden = torch.randn(a.tokens, a.hidden, generator=gen)
    labels = torch.randint(0, a.vocab, (a.tokens,), generator=gen)
    return head, hidden, labels


def run_single(name: str, threads: int, a) -> dict:
    torch.set_num_threads(threads)
    head, hidden, labels = _build(name, a)
    return measure(_step_fn(head, hidden, labels), "cpu", a.repeats)


def run_worker(name: str, rank: int, init_file: str, a) -> dict:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from hf_heads.losses import shard_vocabulary

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=rank, world_size=a.world, timeout=timedelta(seconds=600)
    )
    mesh = init_device_mesh("cpu", (a.world,), mesh_dim_names=("tp",))
    head, hidden, labels = _build(name, a)
    shard_vocabulary(head, mesh)
    step = _step_fn(head, hidden, labels)

    def synced():
        step()
        dist.barrier()  # the step ends when the slowest process's does

    row = measure(synced, "cpu", a.repeats)
    dist.destroy_process_group()
    return row


def _child(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_sharded(name: str, a, common: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        init = str(Path(tmp) / "init")
        procs = [
            subprocess.Popen(
                [sys.executable, __file__, "--worker", name, "--rank", str(r), "--init", init, *common],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )  # fmt: skip
            for r in range(a.world)
        ]
        rows = []
        for p in procs:
            stdout, stderr = p.communicate()
            if p.returncode != 0:
                return {"error": (stderr.strip().splitlines() or ["?"])[-1]}
            rows.append(json.loads(stdout.strip().splitlines()[-1]))
    slowest = max(rows, key=lambda r: r["seconds"])
    return {**slowest, "peak_mib": max(r["peak_mib"] for r in rows)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--heads", nargs="+", default=list(HEADS), choices=list(HEADS))
    p.add_argument("--tokens", type=int, default=2048)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--vocab", type=int, default=50_000)
    p.add_argument("--world", type=int, default=2, help="processes of the sharded rows (one thread each)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--single", help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--init", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        row = run_worker(a.worker, a.rank, a.init, a)
        print(json.dumps({k: v for k, v in row.items() if k != "times"}))
        return
    if a.single:
        row = run_single(a.single, a.threads, a)
        print(json.dumps({k: v for k, v in row.items() if k != "times"}))
        return
    common = ["--tokens", str(a.tokens), "--hidden", str(a.hidden), "--vocab", str(a.vocab), "--world", str(a.world)]
    common += ["--repeats", str(a.repeats)]
    print(device_line("cpu"))
    print(f"N={a.tokens}, H={a.hidden}, V={a.vocab}, {a.world} processes; torch {torch.__version__}, "
          f"{os.cpu_count()} CPU cores\n")  # fmt: skip
    print("| head | row | seconds per step, median (min–max) | vs one process, whole W, 1 thread | peak RSS (MiB) |")
    print("|---|---|---|---:|---:|")
    for name in a.heads:
        rows = {
            f"one process, whole W, {a.world} threads": _child(["--single", name, "--threads", str(a.world), *common]),
            "one process, whole W, 1 thread": _child(["--single", name, "--threads", "1", *common]),
            f"{a.world} processes, W sharded": run_sharded(name, a, common),
        }
        ref = rows["one process, whole W, 1 thread"]
        for label, row in rows.items():
            if "error" in row:
                print(f"| {name} | {label} | failed: {row['error']} | | |")
                continue
            ratio = f"{row['seconds'] / ref['seconds']:.2f}×" if "error" not in ref else "—"
            print(f"| {name} | {label} | {seconds_cell(row)} | {ratio} | {row['peak_mib']:.0f} |")


if __name__ == "__main__":
    main()
