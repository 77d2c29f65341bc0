"""The documentation is checked like code.

- The site builds offline with warnings as errors (`mkdocs build --strict`, as `make docs`): a broken link or anchor, a
  LaTeX error, a public name without a docstring or missing from the API pages fails here, not on the site.
- Every ```python / ```bash block of the guides (docs/*.md) is executed, checked, or marked: python blocks run in
  order, one namespace per page, in a temporary directory; a block after `<!-- docs-test: slow -->` runs only in the
  slow test; a block after `<!-- docs-test: skip REASON -->` is not run and must say why. The run_scripts command
  lines of the guides and the README are parsed by each script's own argument parser (flags and head options).
- The built site (one build per test session, about 30 s, shared by the xdist workers): every signature of the API
  pages is the imported object's (a function renamed or removed in the code but still on a page fails the build, one
  whose parameters changed shows them), shapes in docstrings keep their stars, no table is rendered as code, the search
  index ranks the guides above the API reference and holds no result file; and in Debian's headless chromium
  (`make test` installs it; without it these two tests skip, unless HF_HEADS_REQUIRE_BROWSER=1, which `make test`
  sets, makes that a failure) the pages `make docs` checks render (equations as MathML, `margin_cross_entropy` with
  its signature) and the site's search lists a guide or the options page first for its queries.
- Every dotted `hf_heads.` name the guides, the API pages and the README write in backticks imports.
"""

from __future__ import annotations

import fcntl
import html
import inspect
import json
import os
import re
import runpy
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
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


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Path:
    """The site built once per test session by `mkdocs build --strict` (about 30 s), as `make docs` builds it; a
    warning (a broken link, a name a page renders that does not import, a public name without a docstring) fails
    every test using it. The xdist workers of a run share the build: the first to need it builds it under a lock
    in the run's temporary directory, the others wait for it and read it (and its failure)."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the run's directory, above each worker's
    out, record = shared / "site", shared / "site-build.json"
    with open(shared / "site-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not record.exists():
            env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
            mkdocs = Path(sys.executable).with_name("mkdocs")
            command = [str(mkdocs), "build", "--strict", "--site-dir", str(out)]
            result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
            warnings = [line for line in result.stderr.splitlines() if line.startswith(("WARNING", "ERROR"))]
            failure = ("\n".join(warnings) or result.stderr[-3000:]) if result.returncode or warnings else ""
            record.write_text(json.dumps({"failure": failure}), encoding="utf-8")
        failure = json.loads(record.read_text(encoding="utf-8"))["failure"]
    assert not failure, failure
    return out


def test_site_builds_strict(site):
    """`mkdocs build --strict` into a temporary directory: no warning at all."""
    page = (site / "api" / "losses.html").read_text(encoding="utf-8")
    assert 'id="hf_heads.losses.margin_cross_entropy"' in page and "<math" in page
    options = (site / "options.html").read_text(encoding="utf-8")
    assert "--word_norm" in options and "--num_samples" in options


def test_api_pages_show_the_signatures_of_the_code(site):
    """Every function, method and class an API page renders imports, and its rendered signature has the imported
    object's parameters, order and literal defaults (docs/screenshot.py's `signature_mismatches`)."""
    screenshot = _docs_module("screenshot")
    checked, failures = [], []
    for page in sorted((site / "api").glob("*.html")):
        page_checked, page_failures = screenshot.signature_mismatches(page.read_text(encoding="utf-8"))
        checked += page_checked
        failures += [f"{page.name}: {f}" for f in page_failures]
    assert not failures, "\n".join(failures)
    assert {"hf_heads.losses.margin_cross_entropy", "hf_heads.HeadsForCausalLM.from_base"} <= set(checked)
    assert len(checked) > 200, len(checked)


SIGNATURE_PAGE = """
<h3 id="hf_heads.losses.{name}" class="doc doc-heading">
<code class="doc-symbol doc-symbol-heading doc-symbol-function"></code> <span>{name}</span></h3>
<div class="doc-signature highlight"><pre><code><span class="nf">{name}</span>(
{parameters}
) -&gt; Tensor</code></pre></div>
"""


def test_the_signature_check_catches_a_stale_or_renamed_api():
    """What `signature_mismatches` compares: the imported `margin_cross_entropy`'s signature, written as mkdocstrings
    writes it, passes; with a parameter the function does not have, with another default, or under a name that does
    not import, it fails (built from the live signature, so a change of the function does not break this test)."""
    from hf_heads.losses import margin_cross_entropy

    screenshot = _docs_module("screenshot")
    params = screenshot.live_parameters(margin_cross_entropy, method=False)
    lines = [f"    {n}{'' if d is inspect.Parameter.empty else ' = ' + repr(d)}," for n, d in params]

    def page(lines: list[str], name: str = "margin_cross_entropy") -> str:
        return SIGNATURE_PAGE.format(name=name, parameters="\n".join(lines))

    assert screenshot.signature_mismatches(page(lines)) == (["hf_heads.losses.margin_cross_entropy"], [])
    [failure] = screenshot.signature_mismatches(page([lines[0], '    margin: str = "none",', *lines[1:]]))[1]
    assert f"rendered ({params[0][0]}, margin, {params[1][0]}," in failure, failure
    assert f"imported ({params[0][0]}, {params[1][0]}," in failure, failure
    other = {int: lambda v: v + 1, float: lambda v: v + 1.0, str: lambda v: v + "x"}
    i, (name, default) = next((i, p) for i, p in enumerate(params) if type(p[1]) in other)
    changed = other[type(default)](default)
    [failure] = screenshot.signature_mismatches(page([*lines[:i], f"    {name} = {changed!r},", *lines[i + 1 :]]))[1]
    assert failure.endswith(f"{name} = {changed!r} rendered, {default!r} imported"), failure
    [failure] = screenshot.signature_mismatches(page(lines, "margin_crossentropy"))[1]
    assert "hf_heads.losses.margin_crossentropy: rendered, but does not import" in failure, failure
    assert screenshot.signature_mismatches(page(lines), ("hf_heads.losses.margin_logits",))[1] == [
        "hf_heads.losses.margin_logits: not rendered"
    ]


# an emphasis tag right inside a shape: "(<em>, H) against labels (</em>)" is what `(*, H) ... (*)` renders to when
# Markdown takes the stars for emphasis
EMPHASISED_SHAPE = re.compile(r"\(</?em>\s*[,)]|,\s*</?em>\)")


def test_shapes_keep_their_stars_on_the_api_pages(site):
    pages = sorted((site / "api").glob("*.html"))
    found = [
        f"{page.name}: ...{m.string[max(0, m.start() - 60) : m.end() + 40]!r}..."
        for page in pages
        for m in EMPHASISED_SHAPE.finditer(page.read_text(encoding="utf-8"))
    ]
    assert not found, "shapes rendered with an emphasis:\n" + "\n".join(found)
    assert "hidden (*, H) against labels (*)" in (site / "api" / "heads.html").read_text(encoding="utf-8")


def test_the_shape_check_catches_an_emphasis():
    assert EMPHASISED_SHAPE.search("of hidden (<em>, H) against labels (</em>) (train mode)")
    assert EMPHASISED_SHAPE.search("φ(θ) (<em>,) for angles θ (</em>,)")
    assert not EMPHASISED_SHAPE.search("Kumar &amp; Tsvetkov, <em>Von Mises-Fisher Loss</em> (2019), (*, H)")


TABLE_SEPARATOR = re.compile(r"^\|(?:\s*:?-+:?\s*\|)+\s*$", re.M)


def tables_in_code(html_text: str) -> list[str]:
    """The first line of every `<pre>` block of a page that holds a Markdown table (a `|---|` separator row)."""
    found = []
    for block in re.findall(r"<pre[^>]*>(.*?)</pre>", html_text, re.S):
        text = html.unescape(re.sub(r"<[^>]+>", "", block))
        if TABLE_SEPARATOR.search(text):
            found.append(text.strip().splitlines()[0])
    return found


def test_no_measured_table_is_rendered_as_code(site):
    """Every table of the site, the results quoted in fenced blocks included (docs/hooks.py), is an HTML table."""
    found = [
        f"{page.relative_to(site)}: {first[:80]}"
        for page in sorted(site.rglob("*.html"))
        for first in tables_in_code(page.read_text(encoding="utf-8"))
    ]
    assert not found, "tables rendered as code:\n" + "\n".join(found)
    performance = (site / "performance.html").read_text(encoding="utf-8")
    assert "<td>naive logits, lsm m=2</td>" in performance


def test_the_table_check_catches_a_table_in_code():
    code = "<pre><span></span><code>| method | s |\n|---|---:|\n| naive | 1.0 |\n</code></pre>"
    assert tables_in_code(code) == ["| method | s |"]
    assert tables_in_code("<pre><code>ok   eager  |Δloss| 0.0e+00</code></pre>") == []


def _docs_module(name: str):
    sys.path.insert(0, str(DOCS))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(DOCS))


def test_search_ranks_guides_and_leaves_the_results_out(site):
    """The search index (mkdocs-material) boosts the guides and the options page above the API reference and holds no
    result file (docs/results/ but its README); docs/hooks.py sets each page's `search` front matter."""
    index = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))["docs"]
    pages = {doc["location"].split("#")[0]: doc.get("boost", 1) for doc in index}
    results = sorted(p for p in pages if p.startswith("results/") and p != "results/index.html")
    assert not results, f"result files in the search index: {results}"
    guides = _docs_module("screenshot").guide_pages()
    assert {"options.html", "command-line.html", "choosing-a-head.html"} <= guides
    api = {p: b for p, b in pages.items() if p.startswith("api/")}
    assert api and all(pages[g] > 100 * b for g in guides & set(pages) for b in api.values()), (api, guides)


def _chromium() -> str:
    """Debian's chromium; without it the browser tests skip, or fail where HF_HEADS_REQUIRE_BROWSER=1 (`make test`)."""
    binary = shutil.which("chromium")
    if binary:
        return binary
    reason = "chromium is not installed (`make test` and `make docs` install Debian's: apt-get install chromium)"
    if os.environ.get("HF_HEADS_REQUIRE_BROWSER") == "1":
        pytest.fail(reason + ", and HF_HEADS_REQUIRE_BROWSER=1 requires the browser checks")
    pytest.skip(reason)


def test_pages_render_in_a_browser(site):
    """What `make docs` checks in headless chromium, without the screenshots: the getting-started page, and the losses
    page with its equations as MathML and `margin_cross_entropy` with the signature the imported function has."""
    screenshot = _docs_module("screenshot")
    binary = _chromium()
    with screenshot.serve(site) as url:
        failures = screenshot.check_pages(binary, url, None)
    assert not failures, failures


def test_search_lists_a_guide_first_in_a_browser(site):
    """What `make docs` checks in headless chromium: "ArcFace", "label_smoothing" and "sampled translation" typed
    into the site's search list a guide or the options page first."""
    screenshot = _docs_module("screenshot")
    binary = _chromium()
    with screenshot.serve(site) as url:
        failures = screenshot.check_searches(binary, url, None, screenshot.guide_pages())
    assert not failures, failures


# a dotted name of the package in a code span: `hf_heads.losses.output_loss(rows, loss)`, `hf_heads.metrics`
DOTTED_NAME = re.compile(r"`(hf_heads(?:\.[A-Za-z_]\w*)+)")


def test_the_docs_name_only_importable_api():
    """Every `hf_heads.` dotted name the guides, the API pages and the README write in a code span imports (a module,
    or an attribute of one): a renamed or removed name fails here, not on the site."""
    screenshot = _docs_module("screenshot")
    pages = [*GUIDES, *sorted((DOCS / "api").glob("*.md")), ROOT / "README.md"]
    missing = []
    for path in pages:
        for name in sorted(set(DOTTED_NAME.findall(path.read_text(encoding="utf-8")))):
            try:
                screenshot.live_object(name)
            except (ImportError, AttributeError) as err:
                missing.append(f"{path.relative_to(ROOT)}: `{name}` ({type(err).__name__}: {err})")
    assert not missing, "\n".join(missing)


def test_a_guide_names_the_flag_of_arcface():
    assert any(re.search(r"ArcFace[^|.]{0,40}--margin arc", p.read_text(encoding="utf-8")) for p in GUIDES)


def test_the_command_line_page_shows_translation_with_each_discrete_head():
    heads = [
        words[words.index("--head") + 1]
        for words in command_lines(DOCS / "command-line.md")
        if words[0].endswith("run_translation.py") and "--head" in words
    ]
    assert {"softmax", "margin", "continuous"} <= set(heads), heads


def test_make_docs_keeps_the_committed_screenshots():
    """`make docs` writes its screenshots outside the tracked tree; `make docs-screenshots` into docs/screenshots."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    docs_recipe = re.search(r"^docs: .*?(?=^\S)", makefile, re.S | re.M).group(0)
    assert "docs/screenshots" not in docs_recipe and "SCREENSHOTS ?= build/" in makefile
    assert re.search(r"^docs-screenshots:\n\t.*SCREENSHOTS=docs/screenshots", makefile, re.M)
    parser_default = re.search(r'"--out", type=Path, default=Path\("([^"]+)"\)', (DOCS / "screenshot.py").read_text())
    assert parser_default and not parser_default.group(1).startswith("docs/"), parser_default


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


def test_the_committed_options_tables_are_the_generated_ones(tmp_path):
    """docs/options.md holds the head options tables as the options dataclasses generate them (each option's type,
    default, flag and help text): a changed option shows in the page's diff, and `python docs/hooks.py` rewrites a
    stale table, leaving the rest of the page as it was."""
    sys.path.insert(0, str(DOCS))
    try:
        import hooks
    finally:
        sys.path.remove(str(DOCS))

    page = (DOCS / "options.md").read_text(encoding="utf-8")
    assert hooks.committed_options_tables(page) == hooks.head_options_markdown().strip("\n") + "\n", (
        "docs/options.md's head options tables are stale: run python docs/hooks.py"
    )
    stale = tmp_path / "options.md"
    stale.write_text(page.replace("| `z_loss` |", "| `z_loss_old` |"), encoding="utf-8")
    assert hooks.write_options_tables(stale) and stale.read_text(encoding="utf-8") == page
    assert not hooks.write_options_tables(stale)


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
