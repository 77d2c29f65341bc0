"""Check the built site in a headless browser and save screenshots (`make docs` runs it after the build).

Serves the built site (default `site/`) with `python -m http.server` on 127.0.0.1, loads pages in Debian's
headless chromium, checks the rendered DOM (`--dump-dom`) and saves screenshots (by default to build/screenshots/,
outside the tracked tree; `make docs-screenshots` writes the committed ones, `--out docs/screenshots`):

- `getting-started.html` -> getting-started.png
- `api/losses.html` -> api-losses.png; its DOM must hold `margin_cross_entropy` with the signature the function has
  (`signature_mismatches`: the parameters, their order and literal defaults read from the imported function, so an
  honest change of the signature shows on the page and passes, a renamed or removed function fails) and equations
  rendered as MathML, a fraction among them (docs/hooks.py renders `$...$` at build time: no network).
- search: each query of SEARCHES typed into the site's search (`index.html?q=...`, mkdocs-material's search running
  its lunr index in a web worker, driven over the DevTools protocol on a pipe: `--dump-dom` does not wait for the
  worker) must list a guide or the head options page first -> search-<query>.png.

The same checks run in the default test suite (tests/project/test_docs.py), on a site built once per test session,
without the screenshots; `signature_mismatches` also holds every signature of the API pages to the imported object's
there.

Usage: python docs/screenshot.py [--site site] [--out build/screenshots] [--chromium chromium]
"""

from __future__ import annotations

import argparse
import ast
import base64
import contextlib
import html
import importlib
import inspect
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

HOST = "127.0.0.1"  # loopback only
PAGES = {
    # page: (screenshot name, window size, strings its rendered DOM must contain, strings its text must contain,
    #        the API objects it must render with the signature the imported object has)
    "getting-started.html": (
        "getting-started.png",
        "1440,1100",
        (),
        ("Getting started", "HeadsForCausalLM.from_base("),
        (),
    ),
    "api/losses.html": (
        "api-losses.png",
        "1440,1100",
        ("<math", "</mfrac>"),
        (),
        ("hf_heads.losses.margin_cross_entropy",),
    ),
}


# queries whose first result must be a guide (the nav's "Guides" section) or the head options page
SEARCHES = ("ArcFace", "label_smoothing", "sampled translation")
SEARCH_FIRST_ALLOWED = ("options.md",)


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(site: Path):
    """`python -m http.server` on 127.0.0.1 serving `site`, stopped on exit."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", HOST, "--directory", str(site)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://{HOST}:{port}/"
        for _ in range(100):
            try:
                urllib.request.urlopen(url, timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise RuntimeError(f"the server on {url} did not start")
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)


def chromium(binary: str, profile: str, *args: str) -> subprocess.CompletedProcess:
    command = [
        binary,
        "--headless",
        "--no-sandbox",  # `make docs` may run as root
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=5000",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)


def guide_pages(mkdocs_yml: Path = ROOT / "mkdocs.yml") -> set[str]:
    """The site paths (`use_directory_urls: false`) of the guides (the nav's "Guides" section) and the options page."""
    from mkdocs.utils.yaml import yaml_load

    def files(nav, inside: bool) -> list[str]:
        out = []
        for item in nav or []:
            for title, value in item.items() if isinstance(item, dict) else [(None, item)]:
                if isinstance(value, str):
                    out += [value] if inside else []
                else:
                    out += files(value, inside or title == "Guides")
        return out

    with open(mkdocs_yml, encoding="utf-8") as f:
        nav = yaml_load(f)["nav"]
    return {p.removesuffix(".md") + ".html" for p in [*files(nav, False), *SEARCH_FIRST_ALLOWED]}


# ------------------------------------------------------------------------------------------------------ signatures

# a mkdocstrings heading (`<h3 id="hf_heads.losses.margin_cross_entropy" class="doc doc-heading">`), its kind, and the
# signature block that follows it
_HEADING = re.compile(
    r'<h\d id="(?P<id>[\w.]+)" class="doc doc-heading">\s*<code class="doc-symbol doc-symbol-heading '
    r'doc-symbol-(?P<kind>\w+)">.*?</h\d>\s*(?:<div class="doc-signature highlight">(?P<signature>.*?)</div>)?',
    re.S,
)
SIGNED_KINDS = ("function", "method", "class")
_LITERALS = (type(None), bool, int, float, str)


def _text(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def _top_level(text: str, separator: str) -> list[str]:
    """`text` split at each `separator` outside brackets and string literals."""
    parts, depth, quote, start = [], 0, None, 0
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            quote = None if ch == quote else quote
        elif depth == 0 and text.startswith(separator, i):
            parts.append(text[start:i])
            start = i + len(separator)
            i = start
            continue
        elif ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        i += 1
    return [*parts, text[start:]]


def rendered_parameters(signature: str, name: str) -> list[tuple[str, str | None]] | None:
    """(the name with its stars, or a bare `*` / `/`; the default as written, or None) of each parameter of a rendered
    signature (its text, `name(a: int, *, b: str = "x") -> T`); None when it does not start with `name(`."""
    if not signature.lstrip().startswith(name + "("):
        return None
    start = signature.index("(") + 1
    inside = _top_level(signature[start:], ")")[0]
    out = []
    for part in (p.strip() for p in _top_level(inside, ",")):
        if part:
            head, *default = _top_level(part, "=")
            out.append((re.match(r"/|\*{0,2}\w*", head.strip()).group(0), default[0].strip() if default else None))
    return out


def live_object(path: str):
    """The object a dotted path names (`hf_heads.losses.margin_cross_entropy`, `hf_heads.losses.Scorer.logits`): the
    longest importable module of the path, then attributes; AttributeError or ImportError when there is none."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError as err:
            prefixes = {".".join(parts[:j]) for j in range(2, i + 1)}
            if err.name not in prefixes:  # hf_heads itself, or a module of the path failing to import another
                raise
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(path)


def live_parameters(obj, method: bool) -> list[tuple[str, object]]:
    """(the name with its stars, or a bare `*` / `/`; the default, or `inspect.Parameter.empty`) of each parameter of
    `inspect.signature(obj)` as mkdocstrings writes them: a method without its `self`, a class as its `__init__`."""
    params = list(inspect.signature(obj).parameters.values())
    if method and params and params[0].name == "self":
        params = params[1:]
    out: list[tuple[str, object]] = []
    for i, p in enumerate(params):
        before = params[i - 1].kind if i else None
        if before is p.POSITIONAL_ONLY and p.kind is not p.POSITIONAL_ONLY:
            out.append(("/", p.empty))
        if p.kind is p.KEYWORD_ONLY and before not in (p.KEYWORD_ONLY, p.VAR_POSITIONAL):
            out.append(("*", p.empty))
        out.append(({p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "") + p.name, p.default))
    if params and params[-1].kind is params[-1].POSITIONAL_ONLY:
        out.append(("/", inspect.Parameter.empty))
    return out


def _outside_fields(cls: type) -> bool:
    """Whether `cls` takes arguments that code outside hf_heads defines: the `__init__` of a base outside hf_heads (a
    NamedTuple's, made by `collections`), the fields of a dataclass outside hf_heads (transformers' TrainingArguments
    and PreTrainedConfig). The rendered signature then shows only those the source of hf_heads declares, or none."""
    init_owner = next((c for c in cls.__mro__ if "__init__" in vars(c)), object)
    outside = [c for c in cls.__mro__[1:] if not c.__module__.startswith("hf_heads")]
    return not init_owner.__module__.startswith("hf_heads") or any("__dataclass_fields__" in vars(c) for c in outside)


def _in_order(names: list[str], within: list[str]) -> bool:
    rest = iter(within)
    return all(name in rest for name in names)


def signature_mismatches(page_html: str, ids: tuple[str, ...] | None = None) -> tuple[list[str], list[str]]:
    """(the objects checked, a failure for each mismatch) of the functions, methods and classes an API page renders
    (or only `ids`, each of which it must render): the rendered signature lists the parameters the imported object
    has, in its order, with its defaults where both write a literal; an object the page renders that does not import
    (renamed, removed) fails too. A class whose arguments come from code outside hf_heads (`_outside_fields`) may
    leave those out, in order."""
    found = {m.group("id"): m for m in _HEADING.finditer(page_html)}
    failures = [f"{path}: not rendered" for path in ids or () if path not in found]
    checked = []
    for path, m in found.items():
        if (ids is not None and path not in ids) or m.group("kind") not in SIGNED_KINDS:
            continue
        checked.append(path)
        rendered = rendered_parameters(_text(m.group("signature") or ""), path.rsplit(".", 1)[1])
        try:
            obj = live_object(path)
            live = live_parameters(obj, m.group("kind") == "method")
        except (ImportError, AttributeError) as err:
            failures.append(f"{path}: rendered, but does not import ({type(err).__name__}: {err})")
            continue
        partial = inspect.isclass(obj) and _outside_fields(obj)
        if rendered is None and not partial:
            failures.append(f"{path}: no signature rendered")
            continue
        names, live_names = [n for n, _ in rendered or []], [n for n, _ in live]
        if names != live_names and not (partial and _in_order(names, live_names)):
            failures.append(f"{path}: rendered ({', '.join(names)}), imported ({', '.join(live_names)})")
            continue
        defaults = dict(live)
        for name, written in rendered or []:
            value = defaults[name]
            if written is None or not isinstance(value, _LITERALS):
                continue
            try:
                shown = ast.literal_eval(written)
            except (ValueError, SyntaxError):
                continue  # a name (IGNORE_INDEX) or an expression: the source's spelling of the default
            if shown != value or type(shown) is not type(value):
                failures.append(f"{path}: {name} = {written} rendered, {value!r} imported")
    return checked, failures


class Browser:
    """Headless chromium driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`: JSON messages ended
    by a NUL byte, commands on the child's fd 3, replies and events on its fd 4); one page, `session`."""

    def __init__(self, binary: str, profile: str, size: tuple[int, int]):
        commands_read, self._commands = os.pipe()
        self._replies, replies_write = os.pipe()

        def on_fds_3_and_4():
            os.dup2(commands_read, 3)
            os.dup2(replies_write, 4)

        self.proc = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
             "--disable-extensions", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--remote-debugging-pipe", f"--user-data-dir={profile}", "about:blank"],
            preexec_fn=on_fds_3_and_4, pass_fds=(3, 4), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        os.close(commands_read)
        os.close(replies_write)
        self._buffer, self._id = b"", 0
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        width, height = size
        self.send("Emulation.setDeviceMetricsOverride", self.session, width=width, height=height,
                  deviceScaleFactor=1, mobile=False)  # fmt: skip

    def send(self, method: str, session: str | None = None, **params) -> dict:
        self._id += 1
        message = {"id": self._id, "method": method, "params": params, **({"sessionId": session} if session else {})}
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + 60
        while True:
            while b"\0" not in self._buffer:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"chromium did not answer {method}")
                chunk = os.read(self._replies, 1 << 16)
                if not chunk:
                    raise RuntimeError(f"chromium closed its DevTools pipe ({method})")
                self._buffer += chunk
            raw, self._buffer = self._buffer.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self._id:  # events and other replies are skipped
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]

    def evaluate(self, expression: str):
        result = self.send("Runtime.evaluate", self.session, expression=expression, returnByValue=True)
        return result["result"].get("value")

    def screenshot(self, path: Path) -> None:
        path.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", self.session, format="png")["data"]))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.send("Browser.close")
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        os.close(self._commands)
        os.close(self._replies)


# the result links of the search box, in their order: [path, title]
_RESULTS = """JSON.stringify([...document.querySelectorAll('.md-search-result__item > a.md-search-result__link')]
  .map(a => [new URL(a.href).pathname, (a.querySelector('h1, h2') || a).textContent.trim()]))"""


def search_results(browser: Browser, url: str, query: str, timeout: float = 30.0) -> list[list[str]]:
    """The results mkdocs-material's search lists for `query` on the site at `url`: [[path, title], ...]."""
    browser.send("Page.navigate", browser.session, url=url + "index.html?q=" + urllib.parse.quote(query))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.25)
        results = json.loads(browser.evaluate(_RESULTS) or "[]")
        if results:
            time.sleep(0.5)  # the list fills in one go; let it paint before the screenshot
            return json.loads(browser.evaluate(_RESULTS) or "[]")
    return []


def check_searches(binary: str, url: str, out: Path | None, allowed: set[str]) -> list[str]:
    """Type each query of SEARCHES into the site's search; a failure for each one whose first result is not one of
    `allowed` (site paths); screenshots of the results to `out`."""
    failures = []
    with tempfile.TemporaryDirectory() as profile:
        browser = Browser(binary, profile, (1440, 1100))
        try:
            for query in SEARCHES:
                results = search_results(browser, url, query)
                first = results[0][0].lstrip("/") if results else None
                ok = first in allowed
                shown = ", ".join(f"{path.lstrip('/')} ({title})" for path, title in results[:4]) or "no result"
                if not ok:
                    failures.append(f"search {query!r}: the first result is not a guide or the options page: {shown}")
                line = f"search {query!r}: {'ok' if ok else 'FAILED'}, first {shown}"
                if out is not None:
                    shot = out / f"search-{re.sub(r'[^a-z0-9_]+', '-', query.lower())}.png"
                    browser.screenshot(shot)
                    line += f", screenshot {shot}"
                print(line)
        finally:
            browser.close()
    return failures


def check_pages(binary: str, url: str, out: Path | None) -> list[str]:
    """Load each page of PAGES from the site at `url` and check its rendered DOM; a failure for each page that lacks
    a string or an API object's signature; screenshots to `out`."""
    failures = []
    with tempfile.TemporaryDirectory() as profile:
        for page, (name, size, in_dom, in_text, signatures) in PAGES.items():
            dom = chromium(binary, profile, "--dump-dom", url + page).stdout
            text = _text(dom)
            missing = [s for s in in_dom if s not in dom] + [s for s in in_text if s not in text]
            if missing:
                failures.append(f"{page}: the rendered page lacks {missing}")
            mismatches = signature_mismatches(dom, signatures)[1] if signatures else []
            failures += [f"{page}: {m}" for m in mismatches]
            line = f"{page}: {'ok' if not missing and not mismatches else 'FAILED'}"
            if out is not None:
                shot = out / name
                chromium(binary, profile, f"--window-size={size}", f"--screenshot={shot}", url + page)
                line += f", screenshot {shot}"
            print(line)
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", type=Path, default=Path("site"))
    parser.add_argument("--out", type=Path, default=Path("build/screenshots"), help="docs/screenshots: the committed")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with serve(args.site) as url:
        failures = check_pages(args.chromium, url, args.out)
        failures += check_searches(args.chromium, url, args.out, guide_pages())
    for failure in failures:
        print(failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
