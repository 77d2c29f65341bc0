"""Runs benchmark scripts one after another in this one process, for benchmarks/gpu/gpu.sh's dry run (GPU_DRY_RUN=1),
so that torch and hf_heads are imported once instead of once per command.

Reads one command a line on stdin (`PYTHON benchmarks/GROUP/SCRIPT ARGS...`, shell-quoted), runs SCRIPT as __main__
with those arguments (each script puts benchmarks/common on sys.path itself, as when it runs alone), and after its
output prints a line `@@done STATUS` (its exit status: 0, a SystemExit's code, or 1 with the traceback on stderr when
it raised)."""

from __future__ import annotations

import runpy
import shlex
import sys
import traceback

for line in sys.stdin:
    words = shlex.split(line)
    if not words:
        continue
    script, args = words[1], words[2:]  # words[0] is the interpreter
    sys.argv = [script, *args]
    status = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as done:
        status = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    except Exception:  # noqa: BLE001 - a failing command is reported by its status, the next ones still run
        traceback.print_exc()
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    print(f"@@done {status}", flush=True)
