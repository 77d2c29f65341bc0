"""Published figures match their sources: every `<!-- source: PATH -->` marker in README.md and docs/ names the
committed file (a table or log written by a named command) that the block right after it quotes.

- a fenced block or a table: each of its lines is a line of PATH (whitespace at the ends aside);
- a paragraph: each decimal number in it (12.3, 0.85, 9,299.5) occurs in PATH (thousands separators ignored).

A figure typed by hand, or a table re-measured without updating the text that quotes it, fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"<!--\s*source:\s*(\S+)\s*-->")
DECIMAL = re.compile(r"(?<![\w.])\d{1,3}(?:,\d{3})*\.\d+|(?<![\w.,])\d+\.\d+")


def _documents() -> list[Path]:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [path for path in docs if path.is_file()]


def _block_after(lines: list[str], start: int) -> tuple[str, list[str]]:
    """('fenced' | 'table' | 'paragraph', its lines) of the first block after line `start`."""
    i = start + 1
    while i < len(lines) and not lines[i].strip():
        i += 1
    if i < len(lines) and lines[i].lstrip().startswith("```"):
        end = i + 1
        while end < len(lines) and not lines[end].lstrip().startswith("```"):
            end += 1
        return "fenced", lines[i + 1 : end]
    block = []
    while i < len(lines) and lines[i].strip() and not lines[i].lstrip().startswith("<!--"):  # a comment ends it
        block.append(lines[i])
        i += 1
    return ("table" if block and block[0].lstrip().startswith("|") else "paragraph"), block


def _claims() -> list[tuple[str, str, str, list[str]]]:
    """(document, source path, kind, block lines) for every marker."""
    found = []
    for doc in _documents():
        lines = doc.read_text().splitlines()
        for number, line in enumerate(lines):
            match = MARKER.search(line)
            if match:
                kind, block = _block_after(lines, number)
                found.append((f"{doc.relative_to(ROOT)}:{number + 1}", match.group(1), kind, block))
    return found


CLAIMS = _claims()


def _plain(number: str) -> str:
    return number.replace(",", "")


@pytest.mark.parametrize("where, source, kind, block", CLAIMS, ids=[claim[0] for claim in CLAIMS])
def test_quoted_figures_are_in_their_source(where, source, kind, block):
    path = ROOT / source
    assert path.is_file(), f"{where}: source {source} does not exist"
    assert block, f"{where}: nothing follows the marker"
    text = path.read_text()
    if kind in ("fenced", "table"):
        source_lines = {line.strip() for line in text.splitlines()}
        missing = [line for line in block if line.strip() and line.strip() not in source_lines]
        assert not missing, f"{where}: lines not in {source}:\n" + "\n".join(missing)
    else:
        numbers = {_plain(n) for n in DECIMAL.findall(_plain_separators(text))}
        quoted = [n for n in DECIMAL.findall(" ".join(block))]
        assert quoted, f"{where}: the paragraph after the marker quotes no decimal figure"
        missing = [n for n in quoted if _plain(n) not in numbers]
        assert not missing, f"{where}: figures not in {source}: {', '.join(missing)}"


def _plain_separators(text: str) -> str:
    return re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)


def test_readme_quotes_its_measured_tables_with_sources():
    """README's measured tables (the demo and the performance table) carry a source marker."""
    readme = [claim for claim in CLAIMS if claim[0].startswith("README.md")]
    assert len(readme) >= 2, readme


def test_the_checker_catches_a_figure_typed_by_hand(tmp_path):
    lines = ["<!-- source: x -->", "", "Perplexity 122.9 against 123.4."]
    kind, block = _block_after(lines, 0)
    assert kind == "paragraph" and DECIMAL.findall(" ".join(block)) == ["122.9", "123.4"]
    lines = ["<!-- source: x -->", "```", "| a | 1.0 |", "```", "after"]
    assert _block_after(lines, 0) == ("fenced", ["| a | 1.0 |"])


def _softmax_row(text: str, vocab: str) -> list[str]:
    """The cells of the first `hf_heads softmax` row after the line `V=<vocab>` of a measured table."""
    after = text[text.index(f"\nV={vocab}\n") :]
    row = re.search(r"^\| hf_heads softmax \|(.*)\|$", after, re.M).group(1)
    return [cell.strip() for cell in row.split("|")]


def test_choosing_a_head_quotes_the_measured_softmax_ratios():
    """The softmax row of docs/choosing-a-head.md quotes performance.md's tables (time and memory vs naive, at
    V=50,000 and V=200,000): its claim is a sentence, not a quoted table, so the marker check does not see it."""
    text = (ROOT / "docs" / "choosing-a-head.md").read_text()
    claim = re.search(
        r"([\d.]+)× the naive peak memory at ([\d.]+)× its time \(V=50,000; ([\d.]+)× at ([\d.]+)×", text
    )
    assert claim, "choosing-a-head.md: the softmax row's figures moved; update this test"
    performance = (ROOT / "docs" / "performance.md").read_text()
    section = performance[performance.index("## Output layer with margins") :]
    for memory, time, vocab in ((claim[1], claim[2], "50,000"), (claim[3], claim[4], "200,000")):
        cells = _softmax_row(section, vocab)  # s / step, peak MiB, time vs naive, memory vs naive, vs softmax
        assert (f"{time}×", f"{memory}×") == (cells[2], cells[3]), f"V={vocab}: {cells}"
