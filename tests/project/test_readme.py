"""README's examples run as written: the ```python block of "Use it from Python" (in a fresh namespace, inside a
temporary directory so the files it saves stay there) and the command of "Train from the command line" (with fewer
steps). The seq2seq / classification example moved to docs/seq2seq.md, where tests/project/test_docs.py executes it
with the other guide examples; tests/project/test_docs.py also parses every README command with its script's
parser."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def _section(start: str, end: str) -> str:
    text = README.read_text(encoding="utf-8")
    return text[text.index(start) : text.index(end)]


def _blocks() -> list[str]:
    return re.findall(
        r"```python\n(.*?)```", _section("## Use it from Python", "## Train from the command line"), re.S
    )


def _command() -> list[str]:
    """The README's run_clm command, its `$COMMON` expanded."""
    (code,) = re.findall(r"```bash\n(.*?)```", _section("## Train from the command line", "## Works with"), re.S)
    code = code.replace("\\\n", " ")
    variables = dict(re.findall(r'^(\w+)="([^"]*)"', code, re.M))
    (line,) = [line for line in code.splitlines() if "run_scripts/run_clm.py" in line]
    for name, value in variables.items():
        line = line.replace(f"${name}", value)
    return shlex.split(line)


def test_readme_has_the_examples():
    blocks = _blocks()
    assert len(blocks) == 1 and "smollm2_path()" in blocks[0]
    words = _command()
    assert words[:3] == ["accelerate", "launch", "run_scripts/run_clm.py"]
    assert " ".join(words).endswith(
        "--head margin --margin arc --m 0.001 --word_norm log-unigram --context_norm max-norm"
    )


def _run(code: str, tmp_path) -> dict:
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        namespace: dict = {}
        exec(compile(code, str(README), "exec"), namespace)  # noqa: S102 (the README's own example)
        return namespace
    finally:
        os.chdir(cwd)


@pytest.mark.slow
def test_causal_lm_example_runs_with_smollm2(tmp_path):
    """Loads the packaged SmolLM2-135M twice (about a minute on 2 cores)."""
    ns = _run(_blocks()[0], tmp_path)
    assert ns["model"].config.head["warm_start_gain"] > 0 and (tmp_path / "export" / "config.json").is_file()


@pytest.mark.slow
def test_command_line_example_runs(tmp_path):
    """The README command with 4 steps instead of 200 (evaluation and logging every 2), into a temporary directory."""
    words = _command()
    shorter = {"--max_steps": "4", "--eval_steps": "2", "--logging_steps": "2", "--warmup_steps": "1"}
    for i, word in enumerate(words[:-1]):
        if word in shorter:
            words[i + 1] = shorter[word]
        if word == "--output_dir":
            words[i + 1] = str(tmp_path / "margin")
    accelerate = Path(sys.executable).with_name("accelerate")
    command = [str(accelerate), "launch", "--cpu", "--num_processes", "1", "--num_machines", "1"]
    command += ["--mixed_precision", "no", "--dynamo_backend", "no", *words[2:]]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "margin" / "config.json").is_file() and (tmp_path / "margin" / "eval_results.json").is_file()
