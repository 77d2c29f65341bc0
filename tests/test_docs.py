"""The documentation is checked like code.

- The site builds offline with warnings as errors (`mkdocs build --strict`, as `make docs`): a broken link or anchor, a
  LaTeX error, a public name without a docstring or missing from the API pages fails here, not on the site.
- Every ```python / ```bash block of the guides (docs/*.md) is executed, checked, or marked: python blocks run in
  order, one namespace per page, in a temporary directory; a block after `<!-- docs-test: slow -->` runs only in the
  slow test; a block after `<!-- docs-test: skip REASON -->` is not run and must say why. The run_scripts command
  lines of the guides and the README are parsed by each script's own argument parser (flags and head options).
"""

from __future__ import annotations

import os
import re
import runpy
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
GUIDES = sorted(p for p in DOCS.glob("*.md"))
BLOCK = re.compile(r"(?:<!-- docs-test: (\w+)(.*?) -->\n)?```(\w*)\n(.*?)```", re.S)


def code_blocks(path: Path) -> list[tuple[str, str, str, str]]:
    """(language, marker, marker text, code) of every fenced block of a page, in order."""
    text = path.read_text(encoding="utf-8")
    return [(m.group(3), m.group(1) or "", (m.group(2) or "").strip(), m.group(4)) for m in BLOCK.finditer(text)]


def pages_with(marker: str) -> list[str]:
    """The guides with a python block carrying `marker` ("" for the blocks that run in the default suite)."""
    return [p.name for p in GUIDES if any(b[0] == "python" and b[1] == marker for b in code_blocks(p))]


def run_page(name: str, tmp_path: Path, include_slow: bool) -> dict:
    """Execute a page's python blocks in order in one namespace, inside `tmp_path`; returns the namespace."""
    namespace: dict = {"__name__": "__docs__"}
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        for i, (lang, marker, _, code) in enumerate(code_blocks(DOCS / name)):
            if lang != "python" or marker == "skip" or (marker == "slow" and not include_slow):
                continue
            exec(compile(code, f"{DOCS / name} (python block {i})", "exec"), namespace)  # noqa: S102
    finally:
        os.chdir(cwd)
    return namespace


def test_site_builds_strict(tmp_path):
    """`mkdocs build --strict` into a temporary directory: no warning at all."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    mkdocs = Path(sys.executable).with_name("mkdocs")
    command = [str(mkdocs), "build", "--strict", "--site-dir", str(tmp_path / "site")]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    warnings = [line for line in result.stderr.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert result.returncode == 0 and not warnings, "\n".join(warnings) or result.stderr[-3000:]
    page = (tmp_path / "site" / "api" / "losses.html").read_text(encoding="utf-8")
    assert 'id="hf_heads.losses.margin_cross_entropy"' in page and "<math" in page
    options = (tmp_path / "site" / "options.html").read_text(encoding="utf-8")
    assert "--word_norm" in options and "--num_samples" in options


def test_every_code_block_is_run_checked_or_marked():
    unmarked = []
    for path in GUIDES:
        for lang, marker, reason, code in code_blocks(path):
            if marker == "skip" and not reason:
                unmarked.append(f"{path.name}: a skipped block without a reason")
            if lang == "bash" and marker != "skip" and "run_scripts/" not in code:
                unmarked.append(f"{path.name}: a bash block that is neither a run_scripts command nor marked skip")
            if marker not in ("", "skip", "slow"):
                unmarked.append(f"{path.name}: unknown marker {marker!r}")
    assert not unmarked, unmarked


def test_options_table_has_every_option_and_flag():
    sys.path.insert(0, str(DOCS))
    try:
        import hooks
    finally:
        sys.path.remove(str(DOCS))
    import dataclasses

    from hf_heads.heads import FAMILIES
    from hf_heads.training.arguments import FLAG_TO_OPTION

    table = hooks.head_options_markdown()
    for name, entry in FAMILIES.items():
        assert f"### `{name}`" in table
        for f in dataclasses.fields(entry.options):
            assert f"| `{f.name}` |" in table, f"{name}.{f.name}"
    for flag in FLAG_TO_OPTION:
        assert f"`--{flag}`" in table, flag
    assert hooks.missing_docstrings() == []


@pytest.mark.parametrize("page", pages_with(""))
def test_guide_examples_run(page, tmp_path):
    namespace = run_page(page, tmp_path, include_slow=False)
    if page == "seq2seq.md":  # the example that README.md held before the guides
        assert namespace["clf"].config.id2label == {0: "noun.animal", 1: "verb.motion"}
        assert namespace["out"].shape[0] == 1


@pytest.mark.slow
@pytest.mark.parametrize("page", pages_with("slow"))
def test_guide_examples_run_with_the_slow_blocks(page, tmp_path):
    run_page(page, tmp_path, include_slow=True)


# ------------------------------------------------------------------------------------------------- command lines


class _Parsed(BaseException):
    """Raised by the patched `parse_args` once the arguments are parsed: nothing after that runs."""


def command_lines(path: Path) -> list[list[str]]:
    """The argument lists of the run_scripts commands in the bash blocks of a page (`$VAR`s of the block expanded)."""
    out = []
    for lang, marker, _, code in code_blocks(path):
        if lang != "bash" or marker == "skip":
            continue
        code = code.replace("\\\n", " ")
        variables = dict(re.findall(r'^(\w+)="([^"]*)"', code, re.M))
        for line in code.splitlines():
            if "run_scripts/" not in line or line.lstrip().startswith("#"):
                continue
            for name, value in variables.items():
                line = line.replace(f"${name}", value)
            words = shlex.split(line, comments=True)
            script = next(i for i, w in enumerate(words) if w.startswith("run_scripts/"))
            out.append(words[script:])
    return out


COMMANDS = [
    pytest.param(words, id=f"{path.name}:{i}")
    for path in [ROOT / "README.md", *GUIDES]
    for i, words in enumerate(command_lines(path))
]


@pytest.mark.parametrize("words", COMMANDS)
def test_command_lines_parse(words, monkeypatch):
    """The script's own parser accepts every flag, and the head flags make a valid head section."""
    import hf_heads.cli.runs as runs

    parse = runs.parse_args

    def parse_then_stop(dataclass_types, argv=None):
        outs = parse(dataclass_types, argv)
        outs[-1].head_config()  # HeadsTrainingArguments: the head flags as a validated head section
        raise _Parsed(outs)

    monkeypatch.setattr(runs, "parse_args", parse_then_stop)
    monkeypatch.setattr(sys, "argv", words)
    monkeypatch.syspath_prepend(str(ROOT / "run_scripts"))
    sys.modules.pop("hf_heads.cli.seq2seq", None)  # re-imported with the patched parse_args
    monkeypatch.chdir(ROOT)
    with pytest.raises(_Parsed):
        runpy.run_path(str(ROOT / words[0]), run_name="__main__")
    sys.modules.pop("hf_heads.cli.seq2seq", None)
