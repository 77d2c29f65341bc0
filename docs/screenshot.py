"""Check the built site in a headless browser and save screenshots (`make docs` runs it after the build).

Serves the built site (default `site/`) with `python -m http.server` on 127.0.0.1, loads pages in Debian's
headless chromium, checks the rendered DOM (`--dump-dom`) and saves screenshots (by default to build/screenshots/,
outside the tracked tree; `make docs-screenshots` writes the committed ones, `--out docs/screenshots`):

- `getting-started.html` -> getting-started.png
- `api/losses.html` -> api-losses.png; its DOM must hold the `margin_cross_entropy` signature and
  equations rendered as MathML, a fraction among them (docs/hooks.py renders `$...$` at build time: no network).
- search: each query of SEARCHES typed into the site's search (`index.html?q=...`, mkdocs-material's search running
  its lunr index in a web worker, driven over the DevTools protocol on a pipe: `--dump-dom` does not wait for the
  worker) must list a guide or the head options page first -> search-<query>.png.

Usage: python docs/screenshot.py [--site site] [--out build/screenshots] [--chromium chromium]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import html
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
    # page: (screenshot name, window size, strings its rendered DOM must contain, strings its text must contain)
    "getting-started.html": (
        "getting-started.png",
        "1440,1100",
        (),
        ("Getting started", "HeadsForCausalLM.from_base("),
    ),
    "api/losses.html": (
        "api-losses.png",
        "1440,1100",
        ('id="hf_heads.losses.margin_cross_entropy"', "<math", "</mfrac>"),
        ("margin_cross_entropy(\n    hidden: Tensor,", 'margin: str = "none"', "ignore_index: int = -100"),
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", type=Path, default=Path("site"))
    parser.add_argument("--out", type=Path, default=Path("build/screenshots"), help="docs/screenshots: the committed")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    failures = []
    with serve(args.site) as url, tempfile.TemporaryDirectory() as profile:
        for page, (name, size, in_dom, in_text) in PAGES.items():
            dom = chromium(args.chromium, profile, "--dump-dom", url + page).stdout
            text = html.unescape(re.sub(r"<[^>]+>", "", dom))
            missing = [s for s in in_dom if s not in dom] + [s for s in in_text if s not in text]
            if missing:
                failures.append(f"{page}: the rendered page lacks {missing}")
            shot = args.out / name
            chromium(args.chromium, profile, f"--window-size={size}", f"--screenshot={shot}", url + page)
            print(f"{page}: {'ok' if not missing else 'FAILED'}, screenshot {shot}")
        failures += check_searches(args.chromium, url, args.out, guide_pages())
    for failure in failures:
        print(failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
