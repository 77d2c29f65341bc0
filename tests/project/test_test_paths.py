"""Every path that names a test exists: tests/ mirrors the package (the tests of hf_heads/<part>/ in tests/<part>/,
those of the project as a whole in tests/project/), and what names a test file follows it when one moves.

- the selection of every hand-written mutant of `make mutate` (tests/mutants/) and every test the sampled run's
  triage names (tests/mutants/sampled_triage.py): the file exists and the test function (or class and method) a node
  id names is defined in it, so a mutant never runs a selection pytest cannot find;
- every `tests/....py` path in README.md, docs/ (less the mutation runs' own records in docs/results/, which name the
  tests as the recorded run did), the Makefile, benchmarks/, hf_heads/ and tests/ names a file that exists;
- every test module sits in the folder of a part of the package (or tests/project/), never flat in tests/, under a
  name no other folder has, in a folder on pytest's `pythonpath` (pyproject.toml): the test modules import each
  other by their names (tests/training/test_two_ways.py imports test_option_flips of tests/heads/), so a file run
  alone finds what it imports.
"""

from __future__ import annotations

import ast
import re
import tomllib
from functools import cache
from pathlib import Path

import pytest
from mutants import MUTANTS
from mutants.sampled_triage import TRIAGE

ROOT = Path(__file__).resolve().parents[2]
PATH = re.compile(r"(?<![\w/.-])tests/[\w/]+\.py\b")
# The records of past runs (their selections and commands as they ran): not rewritten when a test file moves.
RECORDS = ("docs/results/mutation.md", "docs/results/mutation_sample.md", "docs/results/mutation_sample_2.md")


@cache
def _defined(path: Path) -> dict[str, set[str]]:
    """{top-level function or class name: names of the class's methods} of a test file."""
    tree = ast.parse(path.read_text())
    return {
        node.name: {n.name for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }


def missing(test: str) -> str | None:
    """Why the pytest argument `test` (a file or a node id under tests/) names nothing, or None where it does."""
    path, _, node = test.partition("::")
    if not (ROOT / path).is_file():
        return f"{test}: no file {path}"
    names = [name.split("[", 1)[0] for name in node.split("::")] if node else []
    defined = _defined(ROOT / path)
    if names and names[0] not in defined:
        return f"{test}: {path} defines no {names[0]}"
    if len(names) > 1 and names[1] not in defined[names[0]]:
        return f"{test}: {names[0]} of {path} has no method {names[1]}"
    return None


def _mutant_tests() -> list[tuple[str, str]]:
    """(who names it, pytest argument) of every mutant's selection and every triage's tests."""
    named = [(m.id, t) for m in MUTANTS for t in m.tests if not t.startswith("-")]
    named += [(key, t) for key, (kind, what) in TRIAGE.items() if kind == "test" for t in what.split()]
    return named


def test_every_mutant_selection_and_triage_test_names_a_test_that_exists():
    named = _mutant_tests()
    assert len(named) > 300  # every mutant's selection was read
    stale = [f"{who}: {why}" for who, test in named if (why := missing(test))]
    assert not stale, "\n".join(stale)


def _named_in_the_tree() -> list[tuple[str, str]]:
    files = [ROOT / "README.md", ROOT / "Makefile", *(ROOT / "docs").rglob("*.md")]
    for folder in ("benchmarks", "hf_heads", "tests", "docs"):
        files += [p for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".sh")]
    found = []
    for file in sorted(set(files)):
        where = file.relative_to(ROOT).as_posix()
        if where in RECORDS or "__pycache__" in file.parts:
            continue
        for number, line in enumerate(file.read_text(errors="replace").splitlines(), 1):
            found += [(f"{where}:{number}", match.group(0)) for match in PATH.finditer(line)]
    return found


def test_every_test_path_named_in_readme_docs_and_code_exists():
    named = _named_in_the_tree()
    assert any(path.startswith("tests/losses/") for _, path in named)  # README's table and docs/ were read
    stale = [f"{where}: {path}" for where, path in named if not (ROOT / path).is_file()]
    assert not stale, "\n".join(stale)


def test_every_test_module_is_in_the_folder_of_a_part_of_the_package_under_a_name_of_its_own():
    parts = {p.name for p in (ROOT / "hf_heads").iterdir() if (p / "__init__.py").is_file()} | {"project"}
    modules = sorted((ROOT / "tests").rglob("test_*.py"))
    assert len(modules) > 60
    misplaced = [p.relative_to(ROOT).as_posix() for p in modules if p.parent.parent != ROOT / "tests"]
    misplaced += [p.relative_to(ROOT).as_posix() for p in modules if p.parent.name not in parts]
    assert not misplaced, misplaced
    names = [p.name for p in modules]
    assert len(set(names)) == len(names), sorted({n for n in names if names.count(n) > 1})
    pythonpath = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["pythonpath"]
    folders = {p.parent.relative_to(ROOT).as_posix() for p in modules}
    assert folders | {"tests"} == set(pythonpath), sorted(folders ^ set(pythonpath))


@pytest.mark.parametrize(
    "test",
    [
        "tests/" + "test_entry.py",  # the flat layout's path of a moved file
        "tests/losses/test_entry.py::test_no_such_test",
        "tests/losses/test_entry.py::test_no_such_test[param]",
    ],
)
def test_the_check_names_a_stale_path_or_node(test):
    assert missing(test)
    assert missing("tests/losses/test_entry.py") is None
