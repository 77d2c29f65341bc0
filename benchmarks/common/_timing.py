"""Timing and peak-memory measurement shared by the benchmark scripts."""

from __future__ import annotations

import resource
import statistics
import time
from collections.abc import Callable

import torch


def rss_mib() -> float:
    """Peak resident set of this process so far (MiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def measure(step: Callable[[], object], device: str, repeats: int) -> dict:
    """One warm-up call of `step`, then the median (and min, max) seconds of `repeats` calls, and the peak memory
    the calls added: `torch.cuda.max_memory_allocated` growth on CUDA, peak-RSS growth on the CPU."""
    cuda = device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = rss_mib()
    step()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - start)
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20 if cuda else rss_mib() - base
    return {
        "seconds": statistics.median(times),
        "min_s": min(times),
        "max_s": max(times),
        "peak_mib": peak,
        "times": times,
    }


def seconds_cell(row: dict) -> str:
    """'median (min–max)' of a `measure` row: the spread of the repeats next to the median."""
    return f"{row['seconds']:.3f} ({row['min_s']:.3f}–{row['max_s']:.3f})"


def ratio_cells(row: dict, ref: dict | None) -> list[str]:
    """The time and the peak memory of `row` as multiples of `ref`'s ("—" without a reference row)."""
    if ref is None:
        return ["—", "—"]
    return [f"{row['seconds'] / ref['seconds']:.2f}×", f"{row['peak_mib'] / max(ref['peak_mib'], 1e-9):.2f}×"]


def without_failures(rows: dict[str, dict]) -> dict[str, dict]:
    """The rows that were measured, by name; the failed ones (their "error") are removed from `rows` and printed
    after the table by `print_failures`."""
    return {name: row for name, row in rows.items() if "error" not in row}


def print_failures(rows: dict[str, dict]) -> None:
    """One line per failed row of `rows` (name: error), under the table."""
    for name, row in rows.items():
        if "error" in row:
            print(f"\nfailed: {name}: {row['error']}")


def run_isolated(script: str, method: str, options: dict) -> dict:
    """Run `script --one METHOD --opt value ...` in a fresh process (so peak memory is that method's alone)
    and return the JSON dict it prints last; a method that fails gives {"method": ..., "error": its last line}
    instead, so that one failing row does not cost the table.

    With HF_HEADS_BENCH_IN_PROCESS=1 the script runs in this process instead, which saves a Python start per
    method: the smoke tests use it (on a CPU the peak RSS is then not the method's own and means nothing), and
    `benchmarks/gpu/gpu.sh` on CUDA, where the allocator's peak is reset per method and the timings synchronise."""
    import contextlib
    import io
    import json
    import os
    import runpy
    import subprocess
    import sys

    cmd = [sys.executable, script, "--one", method]
    for key, value in options.items():
        if value is not None:
            cmd += [f"--{key}", *(str(v) for v in (value if isinstance(value, list | tuple) else [value]))]
    if os.environ.get("HF_HEADS_BENCH_IN_PROCESS") == "1":
        import gc

        gc.collect()  # the previous method's tensors are gone before this one's peak is read
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        argv, buffer = sys.argv, io.StringIO()
        sys.argv = cmd[1:]
        try:
            with contextlib.redirect_stdout(buffer):
                runpy.run_path(script, run_name="__main__")
            row = json.loads(buffer.getvalue().strip().splitlines()[-1])
        except Exception as error:  # noqa: BLE001 - one failing row is reported, the table goes on
            row = {"method": method, "error": f"{type(error).__name__}: {error}".splitlines()[0][:200]}
        finally:
            sys.argv = argv
    else:
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode == 0:
            row = json.loads(out.stdout.strip().splitlines()[-1])
        else:
            last = (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]
            row = {"method": method, "error": last[:200]}
    done = row.get("error") or ", ".join(f"{key} {row[key]:.4g}" for key in ("seconds", "peak_mib") if key in row)
    print(f"# {method}: {done}", file=sys.stderr, flush=True)  # progress that survives a run cut short
    return row


def interleaved(script: str, methods: list[str], options: dict, rounds: int) -> list[dict]:
    """`run_isolated` for every method, in turn, `rounds` times; per method the median, min and max over all its
    timed calls and the largest peak memory (or the row of its first failure, with its "error")."""
    runs: dict[str, list[dict]] = {m: [] for m in methods}
    for _ in range(rounds):
        for method in methods:
            runs[method].append(run_isolated(script, method, options))
    out = []
    for method, rows in runs.items():
        failed = [r for r in rows if "error" in r]
        if failed:
            out.append(failed[0])
            continue
        times = [t for r in rows for t in r["times"]]
        peak = max(r["peak_mib"] for r in rows)
        out.append(
            {
                "method": method,
                "seconds": statistics.median(times),
                "min_s": min(times),
                "max_s": max(times),
                "peak_mib": peak,
                "times": times,
            }
        )
    return out


def bench_parser(doc: str, *, tokens: int = 4096, vocab: int | list[int] = 50_000):
    """The arguments every output-layer benchmark takes (sizes, device, repeats, threads, the hidden --one)."""
    import argparse

    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=tokens)
    parser.add_argument("--hidden", type=int, default=512)
    if isinstance(vocab, list):
        parser.add_argument("--vocab", type=int, nargs="+", default=vocab)
    else:
        parser.add_argument("--vocab", type=int, default=vocab)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=1, help="run every method in turn this many times")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument(
        "--autocast", choices=["bf16", "fp16"], default=None, help="run every method under torch.autocast (--bf16)"
    )
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)
    return parser


def autocast(device: str, name: str | None):
    """The `torch.autocast` context of `--autocast` (a null context without it)."""
    import contextlib

    if name is None:
        return contextlib.nullcontext()
    return torch.autocast(device.split(":")[0], dtype={"bf16": torch.bfloat16, "fp16": torch.float16}[name])


def device_line(device: str) -> str:
    import platform

    where = torch.cuda.get_device_name() if device.startswith("cuda") else platform.processor() or "CPU"
    return f"# device: {device} ({where}), torch {torch.__version__}, {torch.get_num_threads()} threads"
