"""Mutation testing of the whole package: `make mutate` (or `python tests/mutate.py`).

Each mutant is one small plausible bug: a text replacement in one file of `hf_heads/` that occurs there exactly once
(the lists: tests/mutants/, one module per part of the package). For every mutant the runner copies the package and
the tests to a temporary directory, applies the replacement, and runs the mutant's targeted test selection (default
suite only, `-m "not slow"`, `-x`) against the copy. A mutant is *killed* when a test fails. One that passes its
selection is run once more against the whole default suite (`--survivors-full`, on by default) before it is called a
*survivor*: only a bug the whole suite lets through counts against it. The unmutated copy first runs every test
of every selection once (on both cores), so a selection that already fails is reported as broken, not counted as a
kill. Each test process is forked from a server that has imported torch and transformers (`--no-fork`: a new
interpreter each), so a mutant costs its tests, not 5-15 s of imports.

A mutant whose text no longer occurs exactly once is reported as stale (the code moved: update the entry). The report
gives the score of every package (hf_heads/losses, hf_heads/modeling, ...) and every file.

    python tests/mutate.py               # every mutant, 2 at a time; prints the table and the scores
    python tests/mutate.py --only maxnorm-momentum-reversed --jobs 1
    python tests/mutate.py --part models # the mutants of one list of tests/mutants/
    python tests/mutate.py --list        # the mutants, without running them
    python tests/mutate.py --out docs/results/mutation.md
    python tests/mutate.py --rev HEAD    # the committed tree, whatever the working tree holds
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from mutants import MUTANTS, Mutant

ROOT = Path(__file__).resolve().parents[1]

# what a test run needs (README.md, docs/, model_cards/: the tests of the cards and docs read them)
TREE = ("hf_heads", "tests", "run_scripts", "benchmarks", "docs", "model_cards", "pyproject.toml", "README.md")
TREE += ("mkdocs.yml",)


def _copy_tree(dest: Path, rev: str | None) -> None:
    """The package, the tests, the run scripts and benchmarks they import, and pyproject.toml: from the working tree,
    or from the commit `rev` (`git archive`)."""
    if rev is not None:
        archive = subprocess.run(["git", "archive", rev, *TREE], cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
        return
    for name in TREE:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "runs"))
        else:
            shutil.copy2(ROOT / name, dest / name)


WHOLE_SUITE = ("-n", "2", "tests")  # pytest arguments of the whole default suite (a survivor's second run)
PYTEST = ("-x", "-q", "-m", "not slow", "-p", "no:cacheprovider")
# What every test process starts with (tests/conftest.py sets the same defaults): no network, one thread, Triton's
# CPU interpreter (fixed when triton is first imported, so set before the preload below).
TEST_ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_EVALUATE_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "OMP_NUM_THREADS": "1",
    "TRITON_INTERPRET": "1",
}
# Imported once by the fork server, so a test process forked from it starts without the 5-15 s of importing torch and
# transformers: every third-party module the tests import at their top, never hf_heads or the tests (mutated copies).
PRELOAD = [
    "numpy",
    "torch",
    "triton",
    "pytest",
    "xdist",
    "hypothesis",
    "datasets",
    "accelerate",
    "evaluate",
    "transformers",
    "transformers.modeling_utils",
    "transformers.trainer",
    "transformers.generation",
    "transformers.models.llama.modeling_llama",
    "transformers.models.gpt2.modeling_gpt2",
    "transformers.models.bart.modeling_bart",
    "transformers.models.bert.modeling_bert",
    "transformers.models.t5.modeling_t5",
]


def _pytest_in_child(dest: str, args: tuple[str, ...], log: str) -> None:
    """A forked test process: pytest with `args` on the copy at `dest`, its output in `log`. The copy comes first on
    sys.path (and on the PYTHONPATH of the processes it starts) and the repository is taken off it, so `hf_heads` and
    the tests are the copy's."""
    os.setsid()  # its own process group: a timeout kills it with the workers it starts
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.chdir(dest)
    ours = {str(ROOT), str(ROOT / "tests"), ""}  # the repository and this script's folder
    sys.path[:] = [dest, *(p for p in sys.path if p not in ours)]
    os.environ["PYTHONPATH"] = dest  # and the processes the tests start (the gloo workers) import the copy too
    import pytest

    code = pytest.main(list(args))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(code))


def _pytest(dest: Path, tests: tuple[str, ...], timeout: float, fork: bool = True) -> tuple[int, str, float]:
    """pytest on the copy at `dest`: (exit code, or -1 on timeout; its output; seconds). `fork`: in a process forked
    from the fork server (the modules of PRELOAD already imported), else in a new interpreter."""
    start = time.perf_counter()
    if not fork:
        env = {**os.environ, **TEST_ENV, "PYTHONPATH": str(dest)}
        cmd = [sys.executable, "-m", "pytest", *PYTEST, *tests]
        try:
            proc = subprocess.run(cmd, cwd=dest, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return -1, "timeout", time.perf_counter() - start
        return proc.returncode, proc.stdout + proc.stderr, time.perf_counter() - start
    log = dest / "pytest.log"
    child = multiprocessing.get_context("forkserver").Process(
        target=_pytest_in_child, args=(str(dest), (*PYTEST, *tests), str(log))
    )
    child.start()
    child.join(timeout)
    if child.exitcode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        child.join()
        return -1, "timeout", time.perf_counter() - start
    return child.exitcode, log.read_text(errors="replace") if log.exists() else "", time.perf_counter() - start


def _first_failure(output: str) -> str:
    for line in output.splitlines():
        if line.startswith(("FAILED ", "ERROR ")):
            return line.split(" ", 1)[1].split(" - ")[0]
    return ""


def run_mutant(
    mutant: Mutant | None, tests: tuple[str, ...], timeout: float, rev: str | None = None, fork: bool = True
) -> dict:
    """Run `tests` on a copy of the tree (of commit `rev`, default the working tree) with `mutant` applied (None:
    the unmutated tree)."""
    with tempfile.TemporaryDirectory(prefix="hf_heads_mutant_") as tmp:
        dest = Path(tmp)
        _copy_tree(dest, rev)
        if mutant is not None:
            path = dest / mutant.path
            text = path.read_text()
            if text.count(mutant.old) != 1:
                return {"status": "stale", "detail": f"{text.count(mutant.old)} matches in {mutant.path}", "s": 0.0}
            path.write_text(text.replace(mutant.old, mutant.new))
        code, output, seconds = _pytest(dest, tests, timeout, fork)
    return outcome(code, output, seconds, timeout)


def outcome(code: int, output: str, seconds: float, timeout: float) -> dict:
    """A test run's exit code and output as a mutant's result: killed (a test failed), survived, timeout or error."""
    if code == 0:
        return {"status": "survived", "detail": "", "s": seconds}
    # exit 2 where pytest-xdist stopped at the first failure (-x): killed as well (its summary counts the failure)
    stopped = code == 2 and "stopping after 1 failures" in output and re.search(r"\b\d+ failed\b", output)
    if code == 1 or stopped:
        return {"status": "killed", "detail": _first_failure(output), "s": seconds}
    if code == -1:
        return {"status": "timeout", "detail": f"over {timeout:.0f} s", "s": seconds}
    last = output.strip().splitlines()[-3:] or [""]
    return {"status": "error", "detail": f"pytest exit {code}: " + " / ".join(last)[:300], "s": seconds}


def _union(selections) -> list[str]:
    """The pytest arguments of every selection, once each: a node id whose file is selected whole is left out."""
    args = list(dict.fromkeys(arg for tests in selections for arg in tests))
    files = {arg for arg in args if "::" not in arg}
    return [arg for arg in args if arg.split("::")[0] not in files or "::" not in arg]


def _scores(mutants: list[Mutant], results: list[dict], key) -> list[str]:
    """Markdown rows `| group | killed / counted | % |` of the counted mutants (killed, survived) grouped by `key`."""
    groups: dict[str, list[str]] = defaultdict(list)
    for m, r in zip(mutants, results, strict=True):
        if r["status"] in ("killed", "survived"):
            groups[key(m)].append(r["status"])
    rows = []
    for name, statuses in sorted(groups.items()):
        killed = statuses.count("killed")
        rows.append(f"| {name} | {killed} / {len(statuses)} | {100 * killed / len(statuses):.0f} % |")
    return rows


def _package(m: Mutant) -> str:
    """hf_heads/losses/scorer.py -> hf_heads/losses"""
    return "/".join(m.path.split("/")[:2])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", help="mutant ids to run (default: all)")
    parser.add_argument("--part", nargs="*", help="the lists of tests/mutants/ to run (losses, kernels, models, ...)")
    parser.add_argument("--jobs", type=int, default=2, help="mutants run at a time (default 2)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per mutant before it counts as timeout")
    parser.add_argument(
        "--survivors-full",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run a mutant that passes its selection against the whole default suite before calling it a survivor",
    )
    parser.add_argument(
        "--fork",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="fork each test process from a server that imported torch and transformers once (--no-fork: start a "
        "new interpreter per mutant)",
    )
    parser.add_argument("--list", action="store_true", help="print the mutants and exit")
    parser.add_argument("--out", type=Path, help="also write the table (markdown) to this file")
    parser.add_argument("--rev", help="mutate this commit (git archive) instead of the working tree")
    args = parser.parse_args(argv)

    mutants = [m for m in MUTANTS if (not args.only or m.id in args.only) and (not args.part or m.part in args.part)]
    unknown = set(args.only or ()) - {m.id for m in MUTANTS}
    if unknown:
        parser.error(f"unknown mutant id(s): {', '.join(sorted(unknown))}")
    if args.list:
        for m in mutants:
            print(f"{m.id:40} {m.path:36} {m.why}")
        return 0

    start = time.perf_counter()
    os.environ.update(TEST_ENV)
    if args.fork:
        multiprocessing.set_forkserver_preload(PRELOAD)
    baseline = run_mutant(None, ("-n", "2", *_union(m.tests for m in mutants)), 4 * args.timeout, args.rev, args.fork)
    if baseline["status"] != "survived":  # the unmutated tree must pass every selection
        print(f"the unmutated tree fails: {baseline['status']} {baseline['detail']}", file=sys.stderr)
        return 2
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda m: run_mutant(m, m.tests, args.timeout, args.rev, args.fork), mutants))
    if args.survivors_full:  # one at a time: the whole default suite runs on both cores (-n 2)
        for k, (m, r) in enumerate(zip(mutants, results, strict=True)):
            if r["status"] == "survived":
                full = run_mutant(m, WHOLE_SUITE, 4 * args.timeout, args.rev, args.fork)
                full["s"] += r["s"]
                full["detail"] = ("whole suite: " + full["detail"]).strip() if full["detail"] else "whole suite passes"
                results[k] = full

    rows = [
        "| mutant | file | the bug | result | first failing test | s |",
        "|---|---|---|---|---|---:|",
    ]
    for m, r in zip(mutants, results, strict=True):
        rows.append(f"| {m.id} | {m.path} | {m.why} | {r['status']} | {r['detail']} | {r['s']:.0f} |")
    counted = [r for r in results if r["status"] in ("killed", "survived")]
    killed = sum(r["status"] == "killed" for r in counted)
    minutes = (time.perf_counter() - start) / 60
    summary = (
        f"mutation score: {killed} / {len(counted)} killed"
        + (f" ({100 * killed / len(counted):.0f} %)" if counted else "")
        + f"; {sum(r['status'] in ('stale', 'error', 'timeout') for r in results)} stale / error / timeout;"
        + f" {minutes:.1f} min with {args.jobs} jobs"
    )
    head = ["| {} | killed | score |", "|---|---:|---:|"]
    by_package = [head[0].format("package"), head[1], *_scores(mutants, results, _package)]
    by_file = [head[0].format("file"), head[1], *_scores(mutants, results, lambda m: m.path)]
    table = "\n".join(rows)
    scores = "\n".join(by_package) + "\n\n" + "\n".join(by_file)
    print(table)
    print()
    print(scores)
    print(summary)
    if args.out:
        args.out.write_text(
            f"# Mutation testing (`python tests/mutate.py`)\n\n{summary}\n\n## Scores\n\n{scores}\n\n"
            f"## Every mutant\n\n{table}\n"
        )
    survivors = [m.id for m, r in zip(mutants, results, strict=True) if r["status"] != "killed"]
    if survivors:
        print("not killed: " + ", ".join(survivors))
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
