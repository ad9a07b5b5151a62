"""The attention explorer end to end in a real headless browser: Debian's ``chromium``
driven by Playwright (its own browser download does not work here). Type a sentence, wait
for the translation, pick a kind, layer and head, click a query piece: the highlight on the
key pieces must be the row ``/attention`` returns, to display rounding.

Skips, naming what is missing, without ``/usr/bin/chromium`` (``apt-get install -y
chromium``) or the ``playwright`` package (``pip install -e '.[serve]'``); ``.ci/run``
installs both."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[serve]'")
sync_api = pytest.importorskip("playwright.sync_api",
                               reason="needs playwright: pip install -e '.[serve]'")
if not CHROMIUM.exists():
    pytest.skip(f"needs the chromium browser at {CHROMIUM}: apt-get install -y chromium",
                allow_module_level=True)

import httpx  # noqa: E402

from seq2seq.serving import create_app, load_models, running  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "data" / "models" / "multi30k_de_en_tiny.ckpt"
SENTENCE = "Eine Frau mit rotem Hut liest ein Buch im Park."
# The browser keeps a colour's alpha in 8 bits (within 0.5/255) and writes it with the fewest
# decimals that give back those 8 bits (within another 0.5/255).
ROUNDING = 1 / 255 + 1e-6
ROW = {"cross": "src", "encoder_self": "src", "decoder_self": "tgt-in"}  # pieces that light up
QUERY = {"cross": "tgt", "encoder_self": "src", "decoder_self": "tgt"}  # pieces one clicks


@pytest.fixture(scope="module")
def url():
    with running(create_app(load_models([str(SHIPPED)]))) as base:
        yield base


@pytest.fixture(scope="module")
def page(url):
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto(url + "/")
            page.fill("#text", SENTENCE)
            page.select_option("#method", "beam")
            page.fill("#beam", "5")
            page.click("#translate")
            page.wait_for_selector("#tgt .piece", timeout=60_000)
            yield page
        finally:
            browser.close()


@pytest.fixture(scope="module")
def expected(url):
    return httpx.post(url + "/attention", json={"text": SENTENCE, "beam": 5}, timeout=60).json()


def _texts(page, selector: str) -> list[str]:
    return page.eval_on_selector_all(selector, "els => els.map(e => e.textContent)")


def _alpha(css: str) -> float:
    """The alpha of a computed ``rgb(...)``/``rgba(...)`` colour."""
    parts = [float(x) for x in re.findall(r"[\d.]+", css)]
    return parts[3] if len(parts) == 4 else 1.0


def test_translation_and_pieces_are_shown(page, expected):
    assert page.text_content("#translation") == expected["hyp"]
    assert _texts(page, "#src .piece") == expected["src_pieces"]
    assert _texts(page, "#tgt .piece") == expected["tgt_pieces"]


CASES = [  # (kind, layer, head, query piece)
    ("cross", 1, "2", 2),
    ("cross", 3, "avg", 1),
    ("encoder_self", 0, "1", 3),
    ("decoder_self", 2, "0", 4),
]


@pytest.mark.parametrize(("kind", "layer", "head", "query"), CASES)
def test_highlights_equal_the_attention_row(page, expected, kind, layer, head, query):
    page.select_option("#kind", kind)
    page.select_option("#layer", str(layer))
    page.select_option("#head", head)
    page.click(f"#{QUERY[kind]} .piece >> nth={query}")
    heads = expected["attention"][kind][layer]
    matrix = heads[int(head)] if head != "avg" else [
        [sum(h[i][j] for h in heads) / len(heads) for j in range(len(heads[0][0]))]
        for i in range(len(heads[0]))]
    row = matrix[query]
    keys = f"#{ROW[kind]} .piece"
    shown = page.eval_on_selector_all(keys, "els => els.map(e => e.dataset.weight)")
    colours = page.eval_on_selector_all(keys, "els => els.map(e => getComputedStyle(e).backgroundColor)")
    assert len(shown) == len(row) > 1
    assert [float(w) for w in shown] == pytest.approx(row, abs=5e-5)  # 4 decimals shown
    assert [_alpha(c) for c in colours] == pytest.approx(row, abs=ROUNDING)  # the intensity
    assert page.is_visible("#tgt-in-row") == (kind == "decoder_self")  # its keys, only then
    if kind == "decoder_self":  # causal: nothing after the query's own input lights up
        assert all(_alpha(c) == 0.0 for c in colours[query + 1:])
    # the heat map shows the whole chosen matrix, with each number on hover
    cells = page.eval_on_selector_all("#heatmap td", "els => els.map(e => e.dataset.weight)")
    assert [float(w) for w in cells] == pytest.approx([w for r in matrix for w in r], abs=5e-5)
    page.hover(f"#heatmap tbody tr >> nth={query} >> td >> nth=0")
    assert page.text_content("#cell-info").endswith(f"{row[0]:.4f}")
