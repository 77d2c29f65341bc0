"""README's Python examples run as written (each ```python block of "Use it from Python", in a fresh namespace,
inside a temporary directory so the files they save stay there)."""

import os
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks() -> list[str]:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Use it from Python") : text.index("## Train from the command line")]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_readme_has_the_examples():
    blocks = _blocks()
    assert len(blocks) == 2 and "smollm2_path()" in blocks[0] and "minilm_path()" in blocks[1]


def _run(code: str, tmp_path) -> dict:
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        namespace: dict = {}
        exec(compile(code, str(README), "exec"), namespace)  # noqa: S102 (the README's own example)
        return namespace
    finally:
        os.chdir(cwd)


def test_seq2seq_and_classification_example_runs(tmp_path):
    ns = _run(_blocks()[1], tmp_path)
    assert ns["clf"].config.id2label == {0: "noun.animal", 1: "verb.motion"}
    assert ns["out"].shape[0] == 1


@pytest.mark.slow
def test_causal_lm_example_runs_with_smollm2(tmp_path):
    """Loads the packaged SmolLM2-135M twice (about a minute on 2 cores)."""
    ns = _run(_blocks()[0], tmp_path)
    assert ns["model"].config.head["warm_start_gain"] > 0 and (tmp_path / "export" / "config.json").is_file()
