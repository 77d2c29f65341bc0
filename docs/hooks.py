"""MkDocs hooks of the documentation site (mkdocs.yml: `hooks: [docs/hooks.py]`).

- The head options tables are generated from the options dataclasses of the family registry (one source of truth,
  as the run scripts' flags are) and committed in docs/options.md between `<!-- hf_heads:head-options -->` and
  `<!-- /hf_heads:head-options -->`, so that they read on GitHub too and a changed option, default, flag or help text
  shows in the diff: `python docs/hooks.py` rewrites them; a build whose committed tables differ from the generated
  ones warns (an error under `mkdocs build --strict`), as does tests/project/test_docs.py.
- Equations written as `$...$` / `$$...$$` (pymdownx.arithmatex, generic mode) are rendered to MathML at build
  time (math-core), so the site needs no JavaScript and no network to show them, and a LaTeX error is a build
  warning (an error under `mkdocs build --strict`).
- Every public name (`__all__`) of the documented modules that is a class or a function must have a docstring of
  its own, and so must the public methods those classes define: a missing one is a build warning.
- The shapes the docstrings write in prose, `(*, H)`, `(*)`, `(N, *)`, keep their stars: `EscapeShapeStars` (a Griffe
  extension, mkdocs.yml) escapes them before mkdocstrings renders the docstring as Markdown, where two of them on one
  line would otherwise open and close an emphasis ("hidden (, H) against labels ()" in italics).
- Search ranks the guides and the head options page above the API reference, and leaves the result files out:
  `search_meta` gives each page the `search` front matter of mkdocs-material's search (`boost`, `exclude`) unless
  the page sets its own.
- A measured table that a result file quotes inside a fenced block (the benchmarks write their output so) is rendered
  as a table: `tables_out_of_code` splits such a block into its tables and the rest.
"""

from __future__ import annotations

import dataclasses
import html
import importlib
import inspect
import logging
import re
import typing
from pathlib import Path

import griffe

log = logging.getLogger("mkdocs.plugins.hf_heads_docs")

DOCUMENTED_MODULES = ("hf_heads", "hf_heads.losses", "hf_heads.heads", "hf_heads.scoring", "hf_heads.metrics")
OPTIONS_MARKER = "<!-- hf_heads:head-options -->"
OPTIONS_END = "<!-- /hf_heads:head-options -->"
OPTIONS_PAGE = Path(__file__).resolve().parent / "options.md"
README = Path(__file__).resolve().parents[1] / "README.md"
README_MARKER = re.compile(r"<!-- hf_heads:readme ([\w-]+) -->")
REST_MARKER = re.compile(r"<!-- hf_heads:api-rest ([\w.]+) -->")
_BLOCK_ID = re.compile(r"^::: ([\w.]+)$", re.M)
_rendered: dict[str, set[str]] = {}  # page -> the ids of the objects mkdocstrings rendered on it


# ---------------------------------------------------------------------------------------------- head options table


def _type_name(hint) -> str:
    args = typing.get_args(hint) or (hint,)
    return " | ".join(getattr(a, "__name__", str(a)).replace("NoneType", "None") for a in args)


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def head_options_markdown() -> str:
    """One table per registered family: each option the family adds to the family it extends, with its type,
    default, command-line flag and help text, read from the options dataclasses and the flag generator."""
    from hf_heads.heads import CHECKPOINT_OPTIONS, FAMILIES
    from hf_heads.training.arguments import NOT_FLAGS, option_flag

    options_to_family = {entry.options: name for name, entry in FAMILIES.items()}
    out = []
    for name, entry in FAMILIES.items():
        cls = entry.options
        parent = next((options_to_family[b] for b in cls.__mro__[1:] if b in options_to_family), None)
        inherited = {f.name for b in cls.__mro__[1:] if dataclasses.is_dataclass(b) for f in dataclasses.fields(b)}
        hints = typing.get_type_hints(cls)
        summary = (inspect.getdoc(cls) or "").split("\n\n")[0].replace("\n", " ")
        out.append(f"### `{name}`\n")
        out.append(f"`{cls.__module__}.{cls.__name__}`: {summary}")
        if parent:
            out.append(f" Every option of [`{parent}`](#{parent}), plus:")
        out.append("\n\n| option | type | default | flag | what it does |\n|---|---|---|---|---|\n")
        for f in dataclasses.fields(cls):
            if f.name in inherited:
                continue
            default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
            if f.name in CHECKPOINT_OPTIONS:
                flag = "none: set by `from_base`"
            elif f.name in NOT_FLAGS:
                flag = "none"
            else:
                flag = f"`--{option_flag(f.name)}`"
            out.append(
                f"| `{f.name}` | `{_type_name(hints[f.name])}` | `{default!r}` | {flag} | "
                f"{_cell(f.metadata.get('help', ''))} |\n"
            )
        inherited_flat = {k for b in cls.__mro__[1:] for k in getattr(b, "flat_options", {})}
        for option, (kind, help_text) in cls.flat_options.items():
            if option not in inherited_flat:  # the older flat form, still read (and written in the nested one)
                out.append(f"| `{option}` (older form) | `{kind.__name__}` | | `--{option_flag(option)}` | "
                           f"{_cell(help_text)} |\n")  # fmt: skip
        out.append("\n")
    return "".join(out)


def committed_options_tables(markdown: str) -> str:
    """The head options tables a page holds between the two markers (an error naming the markers if either is
    missing)."""
    start, end = markdown.find(OPTIONS_MARKER), markdown.find(OPTIONS_END)
    if start < 0 or end < start:
        raise ValueError(f"the page has no {OPTIONS_MARKER} ... {OPTIONS_END} section")
    return markdown[start + len(OPTIONS_MARKER) : end].strip("\n") + "\n"


def write_options_tables(page: Path = OPTIONS_PAGE) -> bool:
    """Rewrite the head options tables committed in `page` from the options dataclasses; whether they changed."""
    markdown = page.read_text(encoding="utf-8")
    old = committed_options_tables(markdown)
    new = head_options_markdown().strip("\n") + "\n"
    if old != new:
        start = markdown.index(OPTIONS_MARKER) + len(OPTIONS_MARKER)
        page.write_text(f"{markdown[:start]}\n\n{new}\n{markdown[markdown.index(OPTIONS_END) :]}", encoding="utf-8")
    return old != new


# ------------------------------------------------------------------------------------------------- README sections


def readme_section(name: str, where: str) -> str:
    """The README text between `<!-- section:NAME -->` and `<!-- /section:NAME -->`, its links into docs/ made
    relative to the site (so README and site share one copy of the tables they both show)."""
    text = README.read_text(encoding="utf-8")
    found = re.search(rf"<!-- section:{re.escape(name)} -->\n(.*?)\n<!-- /section:{re.escape(name)} -->", text, re.S)
    if not found:
        log.warning("%s: README.md has no section %r", where, name)
        return ""
    return found.group(1).replace("](docs/", "](")


# ------------------------------------------------------------------------------------------------------------- API


def api_rest(module_name: str, markdown: str) -> str:
    """One `::: module.name` block for each public name of `module_name` that the page does not render by itself, so a
    page that groups a module's names by hand never drops a new one silently."""
    listed = set(_BLOCK_ID.findall(markdown))
    rest = [n for n in importlib.import_module(module_name).__all__ if f"{module_name}.{n}" not in listed]
    blocks = [
        f"::: {module_name}.{n}\n    options:\n      heading_level: 3\n      show_root_full_path: false\n"
        for n in rest
    ]
    return "\n".join(blocks) or "None."


def unrendered_public_names(rendered: dict[str, set[str]]) -> list[str]:
    """`module.name` of every public name of the documented modules that no page rendered."""
    ids = set().union(*rendered.values()) if rendered else set()
    missing = []
    for module_name in DOCUMENTED_MODULES:
        for name in importlib.import_module(module_name).__all__:
            if f"{module_name}.{name}" not in ids and name != "__version__":
                missing.append(f"{module_name}.{name}")
    return missing


# ------------------------------------------------------------------------------------------------ shapes in prose

# a star that is a shape's dimension: after "(" or ", " and before "," or ")"
_SHAPE_STAR = re.compile(r"(?:(?<=\()|(?<=, ))\*(?=\s*[,)])")
# what Markdown does not emphasise: fenced blocks, code spans, math, doctest lines
_VERBATIM = re.compile(r"```.*?```|`[^`\n]*`|\$\$.*?\$\$|\$[^$\n]*\$|^\s*>>>.*$|^\s*\.\.\..*$", re.S | re.M)


def escape_shape_stars(text: str) -> str:
    """`text` with the stars of the shapes it writes in prose escaped for Markdown (`(*, H)` -> `(\\*, H)`); code
    spans, fenced blocks, math and doctest lines are left as they are."""
    out, last = [], 0
    for verbatim in _VERBATIM.finditer(text):
        out.append(_SHAPE_STAR.sub(r"\\*", text[last : verbatim.start()]))
        out.append(verbatim.group(0))
        last = verbatim.end()
    out.append(_SHAPE_STAR.sub(r"\\*", text[last:]))
    return "".join(out)


class EscapeShapeStars(griffe.Extension):
    """Griffe extension (mkdocs.yml, mkdocstrings' `extensions`): escapes the shape stars of every docstring."""

    def on_instance(self, *, obj, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = escape_shape_stars(obj.docstring.value)


# ---------------------------------------------------------------------------------------------------------- search

SEARCH_BOOST_GUIDES = 4.0  # the pages of the nav's "Guides" section and the head options page
SEARCH_BOOST_API = 0.001  # api/: listed below the guides that explain a name (its title matches count 1000x)
SEARCH_BOOSTED = ("options.md",)
SEARCH_KEPT_RESULTS = ("results/README.md",)  # the notes that lead to the result files; those files are not indexed


def _nav_files(nav, section: str | None = None) -> list[str]:
    """The files of the nav (mkdocs.yml), or of its section titled `section`, at any depth."""
    out: list[str] = []
    for item in nav or []:
        if isinstance(item, str):
            out += [item] if section is None else []
        elif isinstance(item, dict):
            for title, value in item.items():
                if isinstance(value, str):
                    out += [value] if section is None else []
                else:
                    out += _nav_files(value, None if title == section else section)
    return out


def search_meta(src_uri: str, nav) -> dict:
    """The `search` front matter a page gets when it sets none: excluded (result files under results/), boosted
    (guides, head options) or lowered (API reference)."""
    if src_uri.startswith("results/") and src_uri not in SEARCH_KEPT_RESULTS:
        return {"exclude": True}
    if src_uri in SEARCH_BOOSTED or src_uri in _nav_files(nav, "Guides"):
        return {"boost": SEARCH_BOOST_GUIDES}
    if src_uri.startswith("api/"):
        return {"boost": SEARCH_BOOST_API}
    return {}


# ---------------------------------------------------------------------------------------------- tables out of code

_SEPARATOR = re.compile(r"^\|(?:\s*:?-+:?\s*\|)+\s*$")


def _is_table(lines: list[str]) -> bool:
    return len(lines) >= 2 and lines[0].lstrip().startswith("|") and bool(_SEPARATOR.match(lines[1].strip()))


def _split_block(body: list[str]) -> list[str]:
    """A fenced block's lines as Markdown: each run of table lines a table, each run of other lines a fenced block."""
    runs: list[tuple[bool, list[str]]] = []
    for line in body:
        is_row = line.lstrip().startswith("|")
        if runs and runs[-1][0] == is_row:
            runs[-1][1].append(line)
        else:
            runs.append((is_row, [line]))
    out: list[str] = []
    for is_row, lines in runs:
        while lines and not lines[0].strip():
            lines = lines[1:]
        while lines and not lines[-1].strip():
            lines = lines[:-1]
        if not lines:
            continue
        if is_row and _is_table(lines):
            out += ["", *(line.strip() for line in lines), ""]
        else:
            out += ["```", *lines, "```"]
    return out


def tables_out_of_code(markdown: str) -> str:
    """The Markdown with every top-level fenced block without a language that holds a table (a row, then a `|---|`
    separator) split into its tables, rendered as tables, and the lines around them, kept as fenced blocks."""
    lines = markdown.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        fence = re.match(r"(`{3,}|~{3,})(.*)$", lines[i])
        if not fence:
            out.append(lines[i])
            i += 1
            continue
        closing = re.compile(re.escape(fence.group(1)) + re.escape(fence.group(1)[0]) + r"*\s*")
        end = i + 1
        while end < len(lines) and not closing.fullmatch(lines[end]):
            end += 1
        body = lines[i + 1 : end]
        if not fence.group(2).strip() and any(_is_table(body[j : j + 2]) for j in range(len(body))):
            out += _split_block(body)
        else:
            out += lines[i : end + 1]
        i = end + 1
    return "\n".join(out)


# ------------------------------------------------------------------------------------------------------- equations

_INLINE = re.compile(r'<span class="arithmatex">\\\((.+?)\\\)</span>', re.S)
_BLOCK = re.compile(r'<div class="arithmatex">\\\[(.+?)\\\]</div>', re.S)
_converter = None


def _mathml(latex: str, display: bool, where: str) -> str:
    global _converter
    import math_core

    if _converter is None:
        _converter = math_core.LatexToMathML(fancy_error=False)
    try:
        return _converter.convert_with_local_state(html.unescape(latex).strip(), displaystyle=display)
    except math_core.LatexError as err:
        log.warning("%s: LaTeX error in %r: %s", where, latex, err)
        return html.escape(latex)


def render_math(text: str, where: str) -> str:
    """Replace arithmatex's generic `\\(...\\)` / `\\[...\\]` output by MathML."""
    text = _BLOCK.sub(lambda m: f'<div class="arithmatex">{_mathml(m.group(1), True, where)}</div>', text)
    return _INLINE.sub(lambda m: f'<span class="arithmatex">{_mathml(m.group(1), False, where)}</span>', text)


# ------------------------------------------------------------------------------------------------------ docstrings


def _own_doc(obj) -> str | None:
    doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else getattr(obj, "__doc__", None)
    if inspect.isclass(obj) and dataclasses.is_dataclass(obj) and doc and doc.startswith(obj.__name__ + "("):
        return None  # the signature that @dataclass writes when the class has no docstring
    return doc.strip() if isinstance(doc, str) and doc.strip() else None


def _inherited_doc(cls: type, attr: str) -> bool:
    """Whether a base class documents `attr` (an override then shows the base's docstring)."""
    for base in cls.__mro__[1:]:
        member = base.__dict__.get(attr)
        member = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
        if member is not None and _own_doc(member):
            return True
    return False


def missing_docstrings() -> list[str]:
    """Public classes and functions of the documented modules (and the public methods their classes define)
    that have no docstring of their own."""
    missing = []
    for module_name in DOCUMENTED_MODULES:
        module = importlib.import_module(module_name)
        if not _own_doc(module):
            missing.append(module_name)
        for name in module.__all__:
            obj = getattr(module, name)
            if not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue  # constants are shown with their value
            if not _own_doc(obj):
                missing.append(f"{module_name}.{name}")
            if not inspect.isclass(obj) or not obj.__module__.startswith("hf_heads"):
                continue
            for attr, member in vars(obj).items():
                if attr.startswith("_"):
                    continue
                func = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
                if inspect.isfunction(func) and not _own_doc(func) and not _inherited_doc(obj, attr):
                    missing.append(f"{module_name}.{name}.{attr}")
    return sorted(set(missing))


# ----------------------------------------------------------------------------------------------------------- hooks


def on_pre_build(config) -> None:
    _rendered.clear()
    for name in missing_docstrings():
        log.warning("public name without a docstring: %s", name)


def on_page_markdown(markdown: str, page, config, files) -> str:
    if "search" not in page.meta:
        page.meta["search"] = search_meta(page.file.src_uri, config["nav"])
    if OPTIONS_MARKER in markdown and committed_options_tables(markdown) != head_options_markdown().strip("\n") + "\n":
        log.warning(
            "%s: the head options tables differ from the options dataclasses: python docs/hooks.py", page.file.src_uri
        )
    markdown = REST_MARKER.sub(lambda m: api_rest(m.group(1), markdown), markdown)
    markdown = README_MARKER.sub(lambda m: readme_section(m.group(1), page.file.src_uri), markdown)
    return tables_out_of_code(markdown)


def on_page_content(html_text: str, page, config, files) -> str:
    if page.file.src_uri.startswith("api/"):
        _rendered[page.file.src_uri] = set(re.findall(r'<h\d id="([\w.]+)" class="doc doc-heading"', html_text))
    return render_math(html_text, page.file.src_uri)


def on_post_build(config) -> None:
    for name in unrendered_public_names(_rendered):
        log.warning("public name not rendered on any API page: %s", name)


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    print("docs/options.md: head options tables", "rewritten" if write_options_tables() else "already current")
