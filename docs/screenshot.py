"""Check the built site in a headless browser and save screenshots (`make docs` runs it after the build).

Serves the built site (default `site/`) with `python -m http.server` on 127.0.0.1, loads pages in Debian's
headless chromium, checks the rendered DOM (`--dump-dom`) and saves screenshots:

- `getting-started.html` -> docs/screenshots/getting-started.png
- `api/losses.html` -> docs/screenshots/api-losses.png; its DOM must hold the `margin_cross_entropy` signature and
  equations rendered as MathML, a fraction among them (docs/hooks.py renders `$...$` at build time: no network).

Usage: python docs/screenshot.py [--site site] [--out docs/screenshots] [--chromium chromium]
"""

from __future__ import annotations

import argparse
import contextlib
import html
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", type=Path, default=Path("site"))
    parser.add_argument("--out", type=Path, default=Path("docs/screenshots"))
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
    for failure in failures:
        print(failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
