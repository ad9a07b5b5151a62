"""LibreTranslate's JavaScript callers against ``seq2seq-serve --api libretranslate``: the
npm ``libretranslate`` client, unchanged, run by node given just the server's URL (with and
without a trailing slash: with it, the client asks for ``//languages``), and a page served
from another origin that translates through the server in Chromium (CORS: a preflighted
JSON POST, as browser pages and extensions send it).

Skips, naming what is missing, without node and npm (the client is installed from the npm
registry into a temporary folder, from tests/fixtures/libretranslate_npm/package.json),
without ``/usr/bin/chromium`` or without the ``playwright`` package."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[serve]'")
from helpers import DE_EN, EN_DE, GERMAN, seq2seq_translate  # noqa: E402

from scripts.bench.load import server_process  # noqa: E402

NPM_CLIENT = Path(__file__).parents[1] / "fixtures" / "libretranslate_npm"
CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(scope="module")
def root():
    with server_process([DE_EN, EN_DE], args=["--api", "libretranslate"]) as base:
        yield base


@pytest.fixture(scope="module")
def npm_client(tmp_path_factory) -> Path:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("needs node and npm (apt-get install -y nodejs npm)")
    folder = tmp_path_factory.mktemp("npm") / "client"
    shutil.copytree(NPM_CLIENT, folder)
    done = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--ignore-scripts",
                           "--no-package-lock", "--prefer-offline"], cwd=folder,
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        pytest.skip(f"npm install libretranslate failed: {done.stderr.strip()[-300:]}")
    return folder


@pytest.mark.parametrize("slash", ["", "/"], ids=["no-slash", "slash"])
def test_the_npm_client_given_the_server_url(root, npm_client, slash):
    done = subprocess.run(["node", "translate.js", root + slash, "de", "en", *GERMAN],
                          cwd=npm_client, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    got = [json.loads(line) for line in done.stdout.splitlines()]
    assert got == seq2seq_translate(DE_EN, GERMAN)


PAGE = """<!doctype html><meta charset="utf-8"><title>another origin</title>
<script>
async function translate(api, q) {
  const r = await fetch(api + "/translate", {method: "POST",
    headers: {"Content-Type": "application/json"},
    body: JSON.stringify({q: q, source: "auto", target: "en"})});
  return (await r.json()).translatedText;
}
</script>"""


class _Page(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = PAGE.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def other_origin():
    """A page on another port of loopback: another origin, no private-network rules."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def test_a_page_from_another_origin_translates_in_chromium(root, other_origin):
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="needs playwright: pip install -e '.[dev]'")
    if not CHROMIUM.exists():
        pytest.skip(f"needs the chromium browser at {CHROMIUM}: apt-get install -y chromium")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto(other_origin)
            # without CORS headers on the preflight and the answer, fetch rejects here
            got = page.evaluate("([api, q]) => translate(api, q)", [root, GERMAN[0]])
        finally:
            browser.close()
    assert got == seq2seq_translate(DE_EN, GERMAN[:1])[0]
