"""Sampled operator-based mutation testing of the whole package: `make mutate-sample` (python tests/mutate_sample.py).

Beside the hand-written plausible bugs of `make mutate` (tests/mutate.py), mechanical mutants nobody chose:

1. **Generate.** mutmut 3's mutation operators (`mutmut.mutation.mutators`: numbers +1, strings "XX..XX" / lower /
   upper, True/False, `=` to None, `+=` to `=`, `not` dropped, an argument set to None or dropped, `+`/`-`, `*`/`/`,
   `<`/`<=`, `==`/`!=`, `and`/`or`, `is`/`is not`, `in`/`not in`, a ternary forced down each branch, ...) with
   mutmut's own skip rules (docstrings, type annotations, decorators, `# pragma: no mutate`) enumerate every operator
   mutant of every file of hf_heads/. Unlike mutmut's runner, whose trampolines only hold undecorated functions,
   module- and class-level code (dataclass defaults, registries) and decorated functions are mutated too. Each mutant
   becomes a text replacement (the lines it changes, widened until they occur once in the file), the form of the
   hand-written mutants of tests/mutants/, and one that does not compile is left out.
2. **Sample.** A seed drawn at run time (`--seed` repeats a run) shuffles each package's mutants; `--per-package`
   of them are drawn from each of hf_heads' packages (cli, data, heads, losses, metrics, modeling, scoring, training,
   integrations) and from its top-level modules, so a small package is sampled as much as a large one.
3. **Select.** The default suite runs once under coverage with a context per test (pytest-cov `--cov-context=test`,
   cached in build/mutation-sample/ by the commit's tree). The Python subprocesses a test starts (the run scripts'
   end-to-end runs, `accelerate launch`, the gloo workers) are measured too, under that test's name (a
   `sitecustomize.py` in the measured copy starts coverage in a process whose ancestor a plugin of the measured run
   recorded as running a test). A mutant runs against
   the tests that execute the lines it changes; where none does (module-level code runs at import, outside any test),
   the tests that execute any line of its file, the tests parametrized by its module's dotted name (the `__all__`
   check of tests/project/test_lazy_imports.py), the tests that compare import-time definitions with committed
   records (options and defaults, flags, cards) and the hand-written mutants' selections for its file; where none of
   these exists (a module that runs as a copy, as `evaluate` runs hf_heads/metrics/modules/ from its cache), the
   tests of its package's folder, tests/<part>/. A selection
   takes the fastest tests of each test file in turn, at most `--max-tests` and about `--max-seconds` of their
   measured time.
4. **Run.** Each mutant is applied to one of `--jobs` copies of the commit (tests/mutate.py's copy, the original
   restored after it) and its selection runs (`-x`, default suite only) in a process forked from tests/mutate.py's
   fork server, with a timeout of `--timeout` seconds plus five times the selection's measured time. A test failure
   or an import / collection error kills it; a timeout counts as a kill, shown apart. Where the mutant renamed or
   removed parametrized cases the selection names (a registry the tests parametrize over), the selection's whole test
   functions run instead (an error if they outrun the timeout). The unmutated copy first runs the union of the
   selections: a test that fails there leaves every selection.
5. **Second chance.** A mutant that passes its selection runs once more against a wider one (every covering test,
   every test of its file's tier (of its package's folder where no test's coverage records the file) and the
   hand-written selections: up to 6 times the limits, on both cores) while the
   budget lasts; one that passes that is a *survivor*. Survivors are not run against the whole default suite (12
   minutes each on 2 cores does not fit the budget): each is triaged by hand instead (tests/mutants/sampled_triage.py:
   the test that kills it, or a one-line reason it is equivalent).

`--budget-minutes` bounds the whole run's wall time: no new mutant starts past it (those left count as not run).
Results go to a JSON file (every drawn mutant, its diff, its selection and its result) and a markdown report. After
triage, `--rerun` runs the survivors of a saved JSON against the test its triage names (and its selection) and
rewrites the report with the after-triage figures beside the run's own.

    python tests/mutate_sample.py                                  # draw a seed, run, write docs/results/
    python tests/mutate_sample.py --seed 1234 --per-package 10     # a smaller, repeatable run
    python tests/mutate_sample.py --list --seed 1234               # the sample, without running it
    python tests/mutate_sample.py --rerun docs/results/mutation_sample.json   # survivors against their triage tests
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import multiprocessing
import os
import queue
import random
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from importlib.metadata import version
from pathlib import Path

from mutants import MUTANTS
from mutate import PRELOAD, ROOT, TEST_ENV, TREE, _copy_tree, _pytest, outcome

CACHE = ROOT / "build" / "mutation-sample"
PACKAGES = ("cli", "data", "heads", "losses", "metrics", "modeling", "scoring", "training", "integrations")
FIRST_RERUN = "python tests/mutate_sample.py --rerun docs/results/mutation_sample.json"  # runs that did not record it
TOP_LEVEL = "(top level)"  # hf_heads/__init__.py, components.py, validation.py


@dataclass
class SampledMutant:
    """One operator mutant as a text replacement: `old` (exactly once in `path`) becomes `new`."""

    id: str  # path:line#k, k counting the mutants of that line
    key: str  # path:hash of (old, new): names the mutant in the triage file however the lines move
    path: str
    line: int
    operator: str  # the mutmut operator that made it
    old: str
    new: str
    lines: list[int]  # the lines of the original node (coverage looks them up)
    # line (tests run the changed lines) / file (its file) / hand (tests/mutants/ only) / package (tests/<part>/)
    tier: str = ""
    selection: list[str] = field(default_factory=list)
    result: dict = field(default_factory=dict)
    second: dict = field(default_factory=dict)

    @property
    def package(self) -> str:
        part = self.path.split("/")
        return part[1] if len(part) > 2 else TOP_LEVEL

    def diff(self) -> str:
        old, new = self.old.splitlines(keepends=True), self.new.splitlines(keepends=True)
        return "".join(difflib.unified_diff(old, new, f"a/{self.path}", f"b/{self.path}", n=0)).rstrip("\n")


# ---------------------------------------------------------------------------------------------------- generation


def _visitor_class():
    """mutmut's MutationVisitor, recording each mutation's operator, and entering decorated functions (mutmut leaves
    them out for its trampolines; a text replacement has no such limit: their decorators stay unmutated)."""
    import libcst as cst
    from libcst.metadata import PositionProvider
    from mutmut.mutation import file_mutation as fm

    class Visitor(fm.MutationVisitor):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.made: list[tuple[cst.CSTNode, cst.CSTNode, str, object]] = []

        def _create_mutations(self, node: cst.CSTNode) -> None:
            position = self.get_metadata(PositionProvider, node, None)
            for kind, operator in self._operators:
                if isinstance(node, kind) and position is not None:
                    for mutated in operator(node):
                        if not self._removes_ignored_code(node, mutated):
                            name = operator.__name__.removeprefix("operator_")
                            self.made.append((node, mutated, name, position))

        def _skip_node_and_children(self, node: cst.CSTNode) -> bool:
            if isinstance(node, cst.FunctionDef) and node.name.value not in fm.NEVER_MUTATE_FUNCTION_NAMES:
                return False
            return super()._skip_node_and_children(node)

    return Visitor


def _unique_span(lines: list[str], start: int, stop: int, text: str) -> tuple[int, int]:
    """Widen lines[start:stop] (0-based) by a line of context each side until it occurs exactly once in `text`."""
    while "".join(lines[start:stop]).strip() == "" or text.count("".join(lines[start:stop])) != 1:
        if start == 0 and stop == len(lines):
            break
        start, stop = max(0, start - 1), min(len(lines), stop + 1)
    return start, stop


@dataclass
class _Site:
    """One mutation as mutmut's visitor found it (turned into text only when drawn: rendering a module per mutant
    for all ~30,000 would take minutes)."""

    path: str
    code: str
    module: object  # the libcst module the nodes belong to
    node: object
    mutated: object
    operator: str
    lines: list[int]


def sites(path: Path, root: Path) -> list[_Site]:
    """Every operator mutation of one file."""
    import libcst as cst
    from libcst.metadata import MetadataWrapper
    from mutmut.mutation.mutators import mutation_operators
    from mutmut.mutation.pragma_handling import get_ignored_lines

    rel = path.relative_to(root).as_posix()
    code = path.read_text()
    wrapper = MetadataWrapper(cst.parse_module(code))
    visitor = _visitor_class()(mutation_operators, get_ignored_lines(rel, code, wrapper, None), None)
    wrapper.visit(visitor)
    return [
        _Site(rel, code, wrapper.module, node, mutated, operator, list(range(pos.start.line, pos.end.line + 1)))
        for node, mutated, operator, pos in visitor.made
    ]


def materialise(site: _Site) -> SampledMutant | None:
    """A mutation as a text replacement: the lines it changes, widened until they occur once in the file; None where
    it changes nothing or does not compile."""
    old_lines = site.code.splitlines(keepends=True)
    new_code = site.module.deep_replace(site.node, site.mutated).code
    new_lines = new_code.splitlines(keepends=True)
    head = 0  # the changed block: lines[head : len - tail] of each side
    while head < min(len(old_lines), len(new_lines)) and old_lines[head] == new_lines[head]:
        head += 1
    tail = 0
    while tail < min(len(old_lines), len(new_lines)) - head and old_lines[-1 - tail] == new_lines[-1 - tail]:
        tail += 1
    if new_code == site.code:
        return None
    try:
        compile(new_code, site.path, "exec")
    except SyntaxError:
        return None
    start, stop = _unique_span(old_lines, head, len(old_lines) - tail, site.code)
    old = "".join(old_lines[start:stop])
    new = "".join(new_lines[start : len(new_lines) - (len(old_lines) - stop)])
    digest = hashlib.sha1(f"{old}\0{new}".encode()).hexdigest()[:10]
    return SampledMutant(
        id=f"{site.path}:{site.lines[0]}",
        key=f"{site.path}:{digest}",
        path=site.path,
        line=site.lines[0],
        operator=site.operator,
        old=old,
        new=new,
        lines=site.lines,
    )


def draw(root: Path, seed: int, per_package: int, packages: tuple[str, ...] = ()) -> list[SampledMutant]:
    """`per_package` mutants of each package (of the top-level modules too; of `packages` only where given),
    shuffled by `seed`; run order alternates between packages, so a run cut short by its budget still samples every
    package."""
    by_package: dict[str, list[_Site]] = defaultdict(list)
    for path in sorted((root / "hf_heads").rglob("*.py")):
        for site in sites(path, root):
            part = site.path.split("/")
            by_package[part[1] if len(part) > 2 else TOP_LEVEL].append(site)
    rng = random.Random(seed)
    drawn: dict[str, list[SampledMutant]] = {}
    unknown = sorted(set(packages) - set(by_package))
    if unknown:
        raise SystemExit(f"--packages: {', '.join(unknown)} not among {', '.join(sorted(by_package))}")
    for package in sorted(by_package):
        if packages and package not in packages:
            continue
        pool = by_package[package]
        rng.shuffle(pool)
        drawn[package] = []
        seen: set[str] = set()
        for site in pool:  # the first that compile, once each
            m = materialise(site)
            if m is not None and m.key not in seen:
                seen.add(m.key)
                drawn[package].append(m)
                if len(drawn[package]) == per_package:
                    break
    order: list[SampledMutant] = []
    for k in range(per_package):
        order += [mutants[k] for mutants in drawn.values() if k < len(mutants)]
    print(
        f"{sum(map(len, by_package.values()))} operator mutants in hf_heads/; drew "
        + ", ".join(f"{p} {len(ms)}/{len(by_package[p])}" for p, ms in drawn.items()),
        file=sys.stderr,
    )
    return order


# ---------------------------------------------------------------------------------------------------- coverage


def _rev(rev: str) -> str:
    return subprocess.run(["git", "rev-parse", rev], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def _tree_key(rev: str) -> str:
    """The commit's blobs of what a test run reads, less the mutation tools and the results (a coverage map is
    reused while they are the same)."""
    listing = subprocess.run(
        ["git", "ls-tree", "-r", rev, "--", *TREE], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    skip = ("tests/mutate", "tests/mutants/", "docs/results/")
    kept = [line for line in listing if not line.split("\t", 1)[1].startswith(skip)]
    return hashlib.sha1("\n".join(kept).encode()).hexdigest()[:16]


def _junit_durations(junit: Path, root: Path) -> tuple[dict[str, float], set[str]]:
    """Node id -> seconds of every test that passed in the JUnit XML; the node ids that failed or were skipped."""
    passed: dict[str, float] = {}
    bad: set[str] = set()
    for case in ET.parse(junit).getroot().iter("testcase"):
        parts = case.get("classname", "").split(".")
        for k in range(len(parts), 0, -1):  # tests.<part>.test_x.TestA -> tests/<part>/test_x.py::TestA
            if (root / ("/".join(parts[:k]) + ".py")).exists():
                nodeid = "::".join(["/".join(parts[:k]) + ".py", *parts[k:], case.get("name", "")])
                break
        else:
            continue
        if any(child.tag in ("failure", "error", "skipped") for child in case):
            bad.add(nodeid)
        else:
            passed[nodeid] = float(case.get("time", 0.0))
    return passed, bad


# Written into the measured copy (on PYTHONPATH, so every Python subprocess of a test imports it at start-up): a
# subprocess started while a test runs is measured with that test's node id as its context, into
# HF_HEADS_SUBPROCESS_COVERAGE. The test is the one CURRENT_TEST_PLUGIN recorded for the nearest ancestor process
# (the xdist worker that started it, or started the launcher that started it), whatever environment it was given.
SUBPROCESS_COVERAGE = """import os


def _running_test(data):
    pid = os.getppid()
    for _ in range(8):
        try:
            with open(os.path.join(data, f"current-{pid}")) as f:
                return f.read()
        except OSError:
            pass
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return None
        if pid <= 1:
            return None
    return None


_data = os.environ.get("HF_HEADS_SUBPROCESS_COVERAGE")
_test = _running_test(_data) if _data else None
if _test:
    try:
        import coverage
    except ImportError:  # an interpreter without coverage (not the suite's): not measured
        coverage = None
    if coverage is not None:
        import atexit

        _cov = coverage.Coverage(
            data_file=os.path.join(_data, ".coverage"),
            data_suffix=True,
            context=_test,
            source_pkgs=["hf_heads"],
            config_file=False,
        )
        _cov.start()

        def _save() -> None:
            _cov.stop()
            _cov.save()

        atexit.register(_save)
"""
# A pytest plugin (-p) of the measured run: each test process records the node id of the test it runs, by its pid.
CURRENT_TEST_PLUGIN = """import os
from pathlib import Path

import pytest


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    path = Path(os.environ["HF_HEADS_SUBPROCESS_COVERAGE"]) / f"current-{os.getpid()}"
    path.write_text(item.nodeid)
    try:
        return (yield)
    finally:
        path.unlink(missing_ok=True)
"""


def coverage_map(rev: str, jobs: int) -> dict:
    """{"lines": {path: {line: [node ids]}}, "seconds": {node id: s}, "failed": [...], "minutes": m}: the default
    suite run once on a copy of `rev` under coverage with a context per test, its subprocesses' lines included;
    cached by the commit's trees."""
    cache = CACHE / f"coverage-subprocess-tree-{_tree_key(rev)}.json"
    if cache.exists():
        print(f"coverage map: {cache} (cached)", file=sys.stderr)
        return json.loads(cache.read_text())
    from coverage import CoverageData

    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hf_heads_coverage_") as tmp:
        dest = Path(tmp)
        _copy_tree(dest, rev)
        (dest / ".coveragerc").write_text("[run]\nrelative_files = True\n")
        (dest / "sitecustomize.py").write_text(SUBPROCESS_COVERAGE)
        (dest / "hf_heads_current_test.py").write_text(CURRENT_TEST_PLUGIN)
        subprocess_data = dest / "subprocess-coverage"
        subprocess_data.mkdir()
        env = {**os.environ, **TEST_ENV, "PYTHONPATH": str(dest), "HF_HEADS_SUBPROCESS_COVERAGE": str(subprocess_data)}
        cmd = [sys.executable, "-m", "pytest", "-q", "-n", str(jobs), "-m", "not slow", "-p", "no:cacheprovider"]
        cmd += ["-p", "hf_heads_current_test", "--cov=hf_heads", "--cov-context=test", "--cov-report="]
        cmd += ["--junitxml=junit.xml", "tests"]
        print("coverage map: " + " ".join(cmd[1:]), file=sys.stderr)
        subprocess.run(cmd, cwd=dest, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        data = CoverageData(basename=str(dest / ".coverage"))
        data.read()
        found: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
        for measured in data.measured_files():
            rel = measured if not Path(measured).is_absolute() else Path(measured).relative_to(dest).as_posix()
            for n, ctx in data.contexts_by_lineno(measured).items():
                found[rel][str(n)].update(c.rsplit("|", 1)[0] for c in ctx if c)
        for path in subprocess_data.glob(".coverage*"):  # absolute paths; contexts: the test's node id
            sub = CoverageData(basename=str(path))
            sub.read()
            for measured in sub.measured_files():
                if Path(measured).is_relative_to(dest):
                    rel = Path(measured).relative_to(dest).as_posix()
                    for n, ctx in sub.contexts_by_lineno(measured).items():
                        found[rel][str(n)].update(c for c in ctx if c)
        lines = {rel: {n: sorted(t) for n, t in by_line.items() if t} for rel, by_line in found.items()}
        seconds, failed = _junit_durations(dest / "junit.xml", dest)
    result = {
        "lines": lines,
        "seconds": seconds,
        "failed": sorted(failed),
        "minutes": (time.perf_counter() - start) / 60,
    }
    CACHE.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(result))
    print(f"coverage map: {len(seconds)} tests, {result['minutes']:.1f} min -> {cache}", file=sys.stderr)
    return result


# ---------------------------------------------------------------------------------------------------- selection


def _pick(tests: set[str], seconds: dict[str, float], max_tests: int, max_seconds: float) -> list[str]:
    """The fastest test of each test file in turn (then the second fastest, ...), within the limits."""
    by_file: dict[str, list[str]] = defaultdict(list)
    for t in sorted(tests, key=lambda t: (seconds[t], t)):
        by_file[t.split("::")[0]].append(t)
    files = sorted(by_file, key=lambda f: seconds[by_file[f][0]])
    picked: list[str] = []
    total = 0.0
    for k in range(max((len(v) for v in by_file.values()), default=0)):
        for f in files:
            if k < len(by_file[f]) and len(picked) < max_tests:
                t = by_file[f][k]
                if picked and total + seconds[t] > max_seconds:
                    continue
                picked.append(t)
                total += seconds[t]
    return picked


def named_after(path: str, seconds: dict[str, float]) -> list[str]:
    """The tests parametrized by the dotted name of the module at `path` (`test_...[hf_heads.metrics]`): tests about
    that module's import-time surface (its `__all__`), which run no line of it inside the test itself."""
    dotted = path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    pattern = re.compile(rf"[\[-]{re.escape(dotted)}[\]-]")
    return sorted(t for t in seconds if pattern.search(t))


def records(seconds: dict[str, float]) -> list[str]:
    """The tests that compare what the package defines at import (options and their defaults, flags, evaluate
    modules' information, the cards' text) with committed records: `..._the_committed_record` /
    `..._the_committed_one` by their names. They read what a module-level line defines, which no test's coverage
    records inside the test."""
    return sorted(t for t in seconds if re.search(r"_the_committed_(record|one)\b", t))


def select(m: SampledMutant, cov: dict, max_tests: int, max_seconds: float) -> tuple[str, list[str]]:
    """(tier, tests) of one mutant: the tests that run its lines, else those that run its file, else (or also, in
    the file tier) the tests named after its module (`named_after`), the record tests (`records`) and the
    hand-written mutants' selections for its file, else the tests of its package's folder."""
    seconds = cov["seconds"]
    by_line = cov["lines"].get(m.path, {})
    covering = {t for n in m.lines for t in by_line.get(str(n), ()) if t in seconds}
    if covering:
        return "line", _pick(covering, seconds, max_tests, max_seconds)
    in_file = {t for tests in by_line.values() for t in tests if t in seconds}
    hand = [t for h in MUTANTS if h.path == m.path for t in h.tests]
    hand = list(dict.fromkeys(named_after(m.path, seconds) + hand))[: max(1, max_tests // 2)]
    hand = list(dict.fromkeys(hand + records(seconds)))  # each a few seconds at most
    if in_file:
        picked = _pick(in_file, seconds, max_tests - len(hand), max_seconds)
        return "file", list(dict.fromkeys(hand + picked))
    if hand:
        return "hand", hand
    in_package = {t for t in seconds if t.startswith(f"tests/{m.package}/")}
    return ("package", _pick(in_package, seconds, max_tests, max_seconds)) if in_package else ("none", [])


def wider(m: SampledMutant, cov: dict, max_tests: int, max_seconds: float) -> list[str]:
    """The second chance's selection: every test that runs its lines or its file, and the hand-written ones; for a
    file no test's coverage records (a module evaluate runs from a copy), the tests of its package's folder too."""
    seconds = cov["seconds"]
    by_line = cov["lines"].get(m.path, {})
    covering = {t for n in m.lines for t in by_line.get(str(n), ()) if t in seconds}
    in_file = {t for tests in by_line.values() for t in tests if t in seconds}
    if not in_file:
        in_file = {t for t in seconds if t.startswith(f"tests/{m.package}/")}
    hand = named_after(m.path, seconds) + [t for h in MUTANTS if h.path == m.path for t in h.tests]
    hand += [] if covering else records(seconds)  # import-time code (a default, a help text, a registry entry)
    picked = _pick(covering, seconds, max_tests, max_seconds)
    rest = max_tests - len(picked)
    picked += _pick(in_file - set(picked), seconds, rest, max_seconds) if rest > 0 else []
    return list(dict.fromkeys(picked + hand))


# ---------------------------------------------------------------------------------------------------- running


class Slots:
    """`n` copies of the commit, each with its modules compiled once; a mutant borrows one, mutates one file in
    place, and gives it back with the original bytes and modification time (so the compiled original stays valid;
    the test processes write no bytecode, PYTHONDONTWRITEBYTECODE)."""

    def __init__(self, n: int, rev: str) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="hf_heads_sample_"))
        self.free: queue.Queue[Path] = queue.Queue()
        for k in range(n):
            dest = self.tmp / f"slot{k}"
            dest.mkdir()
            _copy_tree(dest, rev)
            subprocess.run([sys.executable, "-m", "compileall", "-q", "hf_heads", "run_scripts"], cwd=dest, check=True)
            self.free.put(dest)

    def run(self, m: SampledMutant | None, tests: list[str], timeout: float, extra: tuple[str, ...] = ()) -> dict:
        if not tests:
            return {"status": "survived", "detail": "no test runs it", "s": 0.0}
        dest = self.free.get()
        try:
            if m is None:
                code, output, seconds = _pytest(dest, (*extra, *tests), timeout)
                return outcome(code, output, seconds, timeout)
            path = dest / m.path
            original, stat = path.read_bytes(), path.stat()
            text = original.decode()
            if text.count(m.old) != 1:
                return {"status": "stale", "detail": f"{text.count(m.old)} matches in {m.path}", "s": 0.0}
            try:
                path.write_text(text.replace(m.old, m.new))
                os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 2_000_000_000))  # never the compiled one's
                code, output, seconds = _pytest(dest, (*extra, *tests), timeout)
                renamed = "found no collectors" in output and not re.search(COLLECTION_ERROR, output, re.M)
                if code == 4 and renamed:  # parametrized ids the mutant renamed or removed
                    whole = list(dict.fromkeys(t.split("[", 1)[0] for t in tests))  # the whole test functions
                    code, output, seconds = _pytest(dest, (*extra, *whole), timeout)
                    if code == -1:  # all their cases outran the selection's timeout: no verdict, not a kill
                        code, output = 4, f"whole test functions {whole} timed out after the ids were not found"
            finally:
                path.write_bytes(original)
                os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
            result = outcome(code, output, seconds, timeout)
            if result["status"] == "error" and re.search(COLLECTION_ERROR, output, re.M):
                line = next((x for x in output.splitlines() if x.startswith("ERROR ")), "collection error")
                result = {"status": "killed", "detail": "import / collection: " + line[:200], "s": seconds}
            return result
        finally:
            self.free.put(dest)

    def close(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


# pytest's output where a test module failed to import or collect
COLLECTION_ERROR = r"\berrors? during collection\b|\bImportError\b|^ERROR \S+\.py - "


def _timeout(tests: list[str], cov: dict, base: float) -> float:
    return base + 5 * sum(cov["seconds"].get(t, 1.0) for t in tests)


def run(args: argparse.Namespace) -> dict:
    start = time.perf_counter()
    deadline = start + 60 * args.budget_minutes
    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    print(f"seed {seed}", file=sys.stderr)
    os.environ.update({**TEST_ENV, "PYTHONDONTWRITEBYTECODE": "1"})
    with tempfile.TemporaryDirectory(prefix="hf_heads_draw_") as tmp:
        _copy_tree(Path(tmp), args.rev)
        mutants = draw(Path(tmp), seed, args.per_package, args.packages)
    generated = time.perf_counter()
    cov = coverage_map(args.rev, args.jobs)
    for m in mutants:
        m.tier, m.selection = select(m, cov, args.max_tests, args.max_seconds)
    covered = time.perf_counter()
    multiprocessing.set_forkserver_preload(PRELOAD)
    slots = Slots(args.jobs, args.rev)
    try:
        union = sorted({t for m in mutants for t in m.selection})
        baseline = slots.run(None, union, 60 * args.budget_minutes, extra=("-n", str(args.jobs), "--no-header"))
        broken: set[str] = set()
        if baseline["status"] != "survived":  # a test that fails unmutated leaves every selection
            log = next(slots.tmp.glob("slot*/pytest.log")).read_text(errors="replace")
            broken = {line.split(" ", 1)[1].split(" - ")[0] for line in log.splitlines() if line.startswith("FAILED ")}
            print(f"unmutated: {baseline['status']}; leaving out {sorted(broken)}", file=sys.stderr)
            for m in mutants:
                m.selection = [t for t in m.selection if t not in broken]
        based = time.perf_counter()

        def first(m: SampledMutant) -> None:
            if time.perf_counter() > deadline:
                m.result = {"status": "not run", "detail": "budget spent", "s": 0.0}
                return
            m.result = m.result or slots.run(m, m.selection, _timeout(m.selection, cov, args.timeout))
            print(f"{m.id:50} {m.operator:28} {m.result['status']:9} {m.result['s']:5.0f} s", file=sys.stderr)

        with ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(first, mutants))
        ran = time.perf_counter()
        for m in mutants:  # one at a time, on both cores
            if m.result["status"] != "survived" or time.perf_counter() > deadline:
                continue
            tests = [t for t in wider(m, cov, 6 * args.max_tests, 6 * args.max_seconds) if t not in broken]
            if set(tests) - set(m.selection):
                timeout = _timeout(tests, cov, args.timeout)
                m.second = slots.run(m, tests, timeout, extra=("-n", str(args.jobs)))
                m.second["tests"] = len(tests)
                print(f"{m.id:50} second chance ({len(tests)} tests): {m.second['status']}", file=sys.stderr)
    finally:
        slots.close()
    end = time.perf_counter()
    return {
        "seed": seed,
        "rev": _rev(args.rev),
        "command": "python tests/mutate_sample.py " + " ".join(sys.argv[1:]),
        "tool": f"mutmut {version('mutmut')} (operators), libcst {version('libcst')}, coverage {version('coverage')}"
        f", pytest-cov {version('pytest-cov')}",
        "settings": {k: v for k, v in vars(args).items() if k not in ("out", "json", "rerun", "list")},
        "minutes": {
            "draw": (generated - start) / 60,
            "coverage": (covered - generated) / 60,
            "coverage map run (when not cached)": cov["minutes"],
            "baseline": (based - covered) / 60,
            "first pass": (ran - based) / 60,
            "second chance": (end - ran) / 60,
            "total": (end - start) / 60,
        },
        "baseline": {"tests": len(union), "status": baseline["status"], "left out": sorted(broken)},
        "mutants": [asdict(m) for m in mutants],
    }


# ---------------------------------------------------------------------------------------------------- reporting


def final(m: dict) -> str:
    """killed / timeout / survived / not run / error / stale, after the second chance."""
    r = m["second"] or m["result"]
    if m["result"]["status"] == "survived" and m["second"]:
        return m["second"]["status"] if m["second"]["status"] != "error" else "error"
    return r["status"]


def _triage() -> dict:
    from mutants.sampled_triage import TRIAGE

    return TRIAGE


# Test files renamed when tests/ came to mirror the package (a saved run's selections name the old flat paths).
RENAMED = {"test_modeling_causal_lm.py": "test_causal_lm.py", "test_modeling_tasks.py": "test_tasks.py"}


def current_path(test: str) -> str:
    """A test path or node id of a saved run, moved to where the file is now: the runs of docs/results/ name the flat
    layout (tests/<file>), the files are now in the folder of the part they test (tests/<part>/<file>); a test whose
    file exists is returned as it is."""
    path, sep, node = test.partition("::")
    if not path.startswith("tests/") or (ROOT / path).exists():
        return test
    name = Path(path).name
    found = sorted((ROOT / "tests").rglob(RENAMED.get(name, name)))
    return found[0].relative_to(ROOT).as_posix() + sep + node if len(found) == 1 else test


def rerun(results: dict, jobs: int, timeout: float) -> None:
    """Each survivor against the test its triage names (then its own selection): results["after"][key]."""
    triage = _triage()
    survivors = [m for m in results["mutants"] if final(m) == "survived"]
    os.environ.update({**TEST_ENV, "PYTHONDONTWRITEBYTECODE": "1"})
    multiprocessing.set_forkserver_preload(PRELOAD)
    slots = Slots(jobs, "HEAD")
    after: dict[str, dict] = {}

    def one(m: dict) -> None:
        kind, what = triage.get(m["key"], ("", ""))
        if kind != "test":
            return
        mutant = SampledMutant(**{k: v for k, v in m.items()})
        tests = list(dict.fromkeys(current_path(t) for t in [*what.split(), *m["selection"]]))
        after[m["key"]] = slots.run(mutant, tests, timeout)
        print(f"{m['id']:50} {after[m['key']]['status']} {after[m['key']]['detail']}", file=sys.stderr)

    try:
        with ThreadPoolExecutor(jobs) as pool:
            list(pool.map(one, survivors))
    finally:
        slots.close()
    results["after"] = after
    results["after_rev"] = _rev("HEAD")


def _counts(mutants: list[dict], triage: dict, after: dict | None) -> dict[str, Counter]:
    counts: dict[str, Counter] = defaultdict(Counter)
    for m in mutants:
        package = m["path"].split("/")[1] if m["path"].count("/") > 1 else TOP_LEVEL
        status = final(m)
        if status == "survived":
            kind = triage.get(m["key"], ("", ""))[0]
            if kind == "equivalent":
                status = "equivalent"
            elif after is not None and after.get(m["key"], {}).get("status") in ("killed", "timeout"):
                status = "killed after triage"
            elif after is not None and after.get(m["key"], {}).get("status") == "stale":
                status = "line changed"  # its line was rewritten (a fix): the mutant no longer applies
        for group in (package, "all"):
            counts[group][status] += 1
    return counts


def _score(c: Counter) -> str:
    killed = c["killed"] + c["timeout"] + c["killed after triage"]
    counted = killed + c["survived"]
    return f"{100 * killed / counted:.0f} %" if counted else "-"


def report(results: dict) -> str:
    triage = _triage()
    after = results.get("after")
    before = _counts(results["mutants"], triage, None)
    rows = [
        "| package | drawn | killed | timeout | survived | equivalent | not run / error / stale | score |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for group, c in sorted(before.items(), key=lambda kv: (kv[0] == "all", kv[0])):
        other = c["not run"] + c["error"] + c["stale"]
        rows.append(
            f"| {group} | {sum(c.values())} | {c['killed']} | {c['timeout']} | {c['survived']} | {c['equivalent']} "
            f"| {other} | {_score(c)} |"
        )
    minutes = ", ".join(f"{k} {v:.1f}" for k, v in results["minutes"].items())
    s = results["settings"]
    text = [
        "# Sampled operator-based mutation testing (`make mutate-sample`)",
        "",
        f"`{results['command']}` on commit {results['rev'][:12]}: **seed {results['seed']}** (drawn at run time), "
        f"{s['per_package']} mutants drawn per package"
        + (f" (from {', '.join(s['packages'])} only)" if s.get("packages") else "")
        + f", {s['jobs']} jobs, budget {s['budget_minutes']} min, at most "
        f"{s['max_tests']} tests / about {s['max_seconds']:.0f} s of them per selection, timeout {s['timeout']:.0f} s "
        "plus 5 times the selection's time.",
        "",
        f"Tools: {results['tool']}. Minutes: {minutes}. Unmutated run of the selections' union: "
        f"{results['baseline']['tests']} tests, {results['baseline']['status']}"
        + (f" (left out: {', '.join(results['baseline']['left out'])})" if results["baseline"]["left out"] else "")
        + ".",
        "",
        "Score: (killed + timeout) / (killed + timeout + survived); an equivalent mutant is left out of it. A survivor"
        " passed its selection and a wider second-chance selection; it was not run against the whole default suite.",
        "",
        "## The run (before triage)",
        "",
        *rows,
    ]
    if after is not None:
        now = _counts(results["mutants"], triage, after)
        text += [
            "",
            f"## After triage (survivors re-run on commit {results['after_rev'][:12]}: "
            f"`{results.get('after_command', FIRST_RERUN)}`)",
            "",
            "| package | killed (run) | killed after triage | equivalent | line changed since | still surviving "
            "| score |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for group, c in sorted(now.items(), key=lambda kv: (kv[0] == "all", kv[0])):
            text.append(
                f"| {group} | {c['killed'] + c['timeout']} | {c['killed after triage']} | {c['equivalent']} "
                f"| {c['line changed']} | {c['survived']} | {_score(c)} |"
            )
        text += [
            "",
            "A survivor whose line was rewritten after the run (a defect it showed, fixed) no longer applies: it is"
            ' counted under "line changed since", outside the score, and its triage names the test that holds the'
            " fix.",
        ]
    survivors = [m for m in results["mutants"] if final(m) == "survived"]
    text += ["", f"## Every survivor ({len(survivors)}) and its triage", ""]
    for m in survivors:
        kind, what = triage.get(m["key"], ("", "not triaged"))
        verdict = {"test": f"killed by `{what}`", "equivalent": f"equivalent: {what}"}.get(kind, what)
        if after is not None and kind == "test":
            verdict += f" (re-run: {after.get(m['key'], {}).get('status', 'not run')})"
        sel = f"{len(m['selection'])} tests ({m['tier']})" + (
            f", second chance {m['second'].get('tests', 0)} tests" if m["second"] else ""
        )
        diff = SampledMutant(**m).diff()
        text += [f"### {m['id']} ({m['operator']}; key `{m['key']}`)", "", f"Selection: {sel}. Triage: {verdict}.", ""]
        text += ["```diff", diff, "```", ""]
    others = [m for m in results["mutants"] if final(m) in ("error", "stale", "not run")]
    if others:
        text += ["## Not counted (error / stale / not run)", ""]
        text += [f"- {m['id']} ({m['operator']}): {final(m)} {(m['second'] or m['result'])['detail']}" for m in others]
    return "\n".join(text).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, help="the sample's seed (default: drawn at run time)")
    parser.add_argument("--per-package", type=int, default=30, help="mutants drawn from each package (default 30)")
    parser.add_argument(
        "--packages",
        type=lambda text: tuple(p for p in text.split(",") if p),
        default=(),
        help="draw only from these packages, comma-separated (default: every package and the top level)",
    )
    parser.add_argument("--jobs", type=int, default=2, help="mutants run at a time (default 2)")
    parser.add_argument("--budget-minutes", type=float, default=60.0, help="no mutant starts past it (default 60)")
    parser.add_argument("--max-tests", type=int, default=8, help="tests in a selection at most (default 8)")
    parser.add_argument("--max-seconds", type=float, default=20.0, help="measured seconds of a selection (default 20)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per mutant, plus 5x its tests' time")
    parser.add_argument("--rev", default="HEAD", help="the commit to mutate (default HEAD)")
    parser.add_argument("--list", action="store_true", help="print the sample and exit")
    parser.add_argument("--json", type=Path, default=ROOT / "docs/results/mutation_sample.json")
    parser.add_argument("--out", type=Path, default=ROOT / "docs/results/mutation_sample.md")
    parser.add_argument("--rerun", type=Path, help="re-run the survivors of this JSON against their triage tests")
    parser.add_argument("--report-only", action="store_true", help="rewrite the report from --json (new triage)")
    args = parser.parse_args(argv)
    args.rev = _rev(args.rev) or args.rev  # the commit, once: the draw, the coverage map and the copies all take it

    if args.list:
        seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
        with tempfile.TemporaryDirectory(prefix="hf_heads_draw_") as tmp:
            _copy_tree(Path(tmp), args.rev)
            for m in draw(Path(tmp), seed, args.per_package, args.packages):
                print(f"{m.id:50} {m.operator:28} {m.key}")
        print(f"seed {seed}")
        return 0
    if args.rerun or args.report_only:
        results = json.loads((args.rerun or args.json).read_text())
        if args.rerun:
            rerun(results, args.jobs, args.timeout + 120)
            results["after_command"] = "python " + " ".join(sys.argv)
            args.json.write_text(json.dumps(results, indent=1) + "\n")
    else:
        results = run(args)
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    args.out.write_text(report(results))
    print(report(results).split("## Every survivor")[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
