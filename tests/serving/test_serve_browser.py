"""The attention explorer end to end in a real headless browser: Debian's ``chromium``
driven by Playwright (its own browser download does not work here). Type a sentence, wait
for the translation, pick a kind, layer and head, click a query piece: the weights on the
key pieces must be the row ``/attention`` returns, to display rounding, and their colours
must rise in lightness with the weight (viridis, on a scale shown beside the heat map).
The words view sums pieces into words; every head of the layer is drawn; the n-best list
and confidences are ``/attention``'s; an output flagged "unsure" is marked, others are not;
an empty input says so; at a phone's width nothing is cut off. Screenshots at a phone and a desktop width go to ``build/test-artifacts/``
(``SEQ2SEQ_TEST_ARTIFACTS`` to put them elsewhere).

Skips, naming what is missing, without ``/usr/bin/chromium`` (``apt-get install -y
chromium``) or the ``playwright`` package (``pip install -e '.[dev]'``); ``.ci/run``
installs both."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[serve]'")
sync_api = pytest.importorskip("playwright.sync_api",
                               reason="needs playwright: pip install -e '.[dev]'")
if not CHROMIUM.exists():
    pytest.skip(f"needs the chromium browser at {CHROMIUM}: apt-get install -y chromium",
                allow_module_level=True)

import httpx  # noqa: E402

from seq2seq.serving import create_app, load_models, running  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "data" / "models" / "multi30k_de_en_tiny.ckpt"
SENTENCE = "Eine Frau mit rotem Hut liest ein Buch im Park."
REQUEST = {"text": SENTENCE, "beam": 5, "nbest": 5, "length_penalty": "average"}  # the page's
ARTIFACTS = Path(os.environ.get("SEQ2SEQ_TEST_ARTIFACTS", ROOT / "build" / "test-artifacts"))
ROW = {"cross": "src", "encoder_self": "src", "decoder_self": "tgt-in"}  # pieces that light up
QUERY = {"cross": "tgt", "encoder_self": "src", "decoder_self": "tgt"}  # pieces one clicks


@pytest.fixture(scope="module")
def url():
    with running(create_app(load_models([str(SHIPPED)]))) as base:
        yield base


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            yield chromium
        finally:
            chromium.close()


def translated(browser, url, width: int, height: int):
    page = browser.new_page(viewport={"width": width, "height": height})
    missing = []
    page.on("response", lambda r: missing.append(r.url) if r.status >= 400 else None)
    page.goto(url + "/")
    page.fill("#text", SENTENCE)
    page.select_option("#method", "beam")
    page.fill("#beam", "5")
    page.click("#translate")
    page.wait_for_selector("#tgt .piece", timeout=60_000)
    assert not missing  # the favicon and every asset are served
    return page


@pytest.fixture(scope="module")
def page(browser, url):
    page = translated(browser, url, 1200, 900)
    yield page
    page.close()


@pytest.fixture(scope="module")
def expected(url):
    return httpx.post(url + "/attention", json=REQUEST, timeout=60).json()


def _attr(page, selector: str, name: str) -> list[str]:
    return page.eval_on_selector_all(selector, f"els => els.map(e => e.dataset.{name})")


def _rgb(css: str) -> tuple[float, ...]:
    return tuple(float(x) for x in re.findall(r"[\d.]+", css)[:3])


def _lightness(css: str) -> float:
    """Relative luminance (WCAG) of a computed ``rgb(...)`` colour."""
    lin = [(c / 255) / 12.92 if c / 255 <= 0.04045 else ((c / 255 + 0.055) / 1.055) ** 2.4
           for c in _rgb(css)]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def _colours(page, selector: str) -> list[str]:
    return page.eval_on_selector_all(selector, "els => els.map(e => getComputedStyle(e).backgroundColor)")


def test_translation_pieces_nbest_and_confidence_are_shown(page, expected):
    assert page.text_content("#translation") == expected["hyp"]
    assert _attr(page, "#src .piece", "pieces") == expected["src_pieces"]
    assert _attr(page, "#tgt .piece", "pieces") == expected["tgt_pieces"]
    shown = [float(s) for s in _attr(page, "#nbest li", "score")]
    assert shown == pytest.approx([n["score"] for n in expected["nbest"]]) and len(shown) == 5
    items = page.eval_on_selector_all("#nbest li", "els => els.map(e => e.textContent)")
    for item, n in zip(items, expected["nbest"]):
        assert item.startswith(n["hyp"]) and f"{100 * math.exp(n['score']):.1f}%" in item
    assert f"confidence {100 * math.exp(expected['score']):.1f}%" in page.text_content("#confidence")


CASES = [  # (kind, layer, head, query piece)
    ("cross", 1, "2", 2),
    ("cross", 3, "avg", 1),
    ("encoder_self", 0, "1", 3),
    ("decoder_self", 2, "0", 4),
]


def _matrix(expected, kind, layer, head):
    heads = expected["attention"][kind][layer]
    if head != "avg":
        return heads[int(head)]
    return [[sum(h[i][j] for h in heads) / len(heads) for j in range(len(heads[0][0]))]
            for i in range(len(heads[0]))]


@pytest.mark.parametrize(("kind", "layer", "head", "query"), CASES)
def test_highlights_equal_the_attention_row(page, expected, kind, layer, head, query):
    page.select_option("#units", "pieces")
    page.select_option("#kind", kind)
    page.select_option("#layer", str(layer))
    page.select_option("#head", head)
    page.click(f"#{QUERY[kind]} .piece >> nth={query}")
    matrix = _matrix(expected, kind, layer, head)
    row = matrix[query]
    keys = f"#{ROW[kind]} .piece"
    shown = [float(w) for w in _attr(page, keys, "weight")]
    assert len(shown) == len(row) > 1
    assert shown == pytest.approx(row, abs=5e-5)  # 4 decimals shown
    # the colour: lightness rises with the weight; the matrix's largest is the scale's top
    light = [_lightness(c) for c in _colours(page, keys)]
    for (wa, la), (wb, lb) in zip(*[sorted(zip(row, light))[i:] for i in (0, 1)]):
        assert lb >= la - 0.01 or wb - wa < 1e-3
    assert page.is_visible("#tgt-in-row") == (kind == "decoder_self")  # its keys, only then
    if kind == "decoder_self":  # causal: nothing after the query's own input has weight
        assert all(w == 0.0 for w in shown[query + 1:])
    # the heat map shows the whole chosen matrix, with each number on hover
    cells = [float(w) for w in _attr(page, "#heatmap td", "weight")]
    assert cells == pytest.approx([w for r in matrix for w in r], abs=5e-5)
    top = max(range(len(cells)), key=cells.__getitem__)
    assert _rgb(_colours(page, "#heatmap td")[top]) == (253, 231, 37)  # viridis' top
    assert float(page.text_content("#legend-max")) == pytest.approx(max(cells), abs=5e-3)
    page.hover(f"#heatmap tbody tr >> nth={query} >> td >> nth=0")
    assert page.text_content("#cell-info").endswith(f"{row[0]:.4f}")


def test_words_view_sums_the_pieces_of_each_word(page, expected):
    page.select_option("#kind", "cross")
    page.select_option("#layer", "3")
    page.select_option("#head", "avg")
    page.select_option("#units", "words")
    try:
        words = [p.split(" ") for p in _attr(page, "#src .piece", "pieces")]
        assert [p for w in words for p in w] == expected["src_pieces"]  # each piece once
        assert all(w[0].startswith("\u2581") or w[0].startswith("<") for w in words[1:])
        assert all(not p.startswith("\u2581") for w in words for p in w[1:])
        matrix = _matrix(expected, "cross", 3, "avg")
        page.click("#tgt .piece >> nth=0")
        first_word = len(_attr(page, "#tgt .piece", "pieces")[0].split(" "))
        query = [sum(matrix[i][j] for i in range(first_word)) / first_word
                 for j in range(len(matrix[0]))]
        want, at = [], 0
        for w in words:
            want.append(sum(query[at:at + len(w)]))
            at += len(w)
        assert [float(x) for x in _attr(page, "#src .piece", "weight")] == pytest.approx(want, abs=2e-4)
    finally:
        page.select_option("#units", "pieces")


def test_every_head_of_the_layer_is_drawn_and_one_can_be_chosen(page, expected):
    page.select_option("#kind", "cross")
    page.select_option("#layer", "2")
    heads = expected["attention"]["cross"][2]
    assert page.eval_on_selector_all("#heads figure", "els => els.length") == len(heads)
    for h, m in enumerate(heads):
        cells = [float(w) for w in _attr(page, f"#heads figure >> nth={h} >> div.mini > div", "weight")]
        assert cells == pytest.approx([w for r in m for w in r], abs=5e-5)
    page.click("#heads figure >> nth=3")
    assert page.eval_on_selector("#head", "e => e.value") == "3"
    cells = [float(w) for w in _attr(page, "#heatmap td", "weight")]
    assert cells == pytest.approx([w for r in heads[3] for w in r], abs=5e-5)


OUTSIDE = "Die Zentralbank hat gestern überraschend die Zinsen erhöht."  # news, not a caption


def test_an_unsure_output_is_marked_and_a_sure_one_is_not(page, expected, url):
    assert "unsure" not in expected["flags"] and page.is_hidden("#unsure")  # the caption
    want = httpx.post(url + "/attention", json={**REQUEST, "text": OUTSIDE}, timeout=60).json()
    assert "unsure" in want["flags"]  # the shipped model's calibrated threshold says so
    try:
        page.fill("#text", OUTSIDE)
        page.click("#translate")
        page.wait_for_function(f"document.querySelector('#translation').textContent == {want['hyp']!r}",
                               timeout=60_000)
        assert page.is_visible("#unsure")
        note = page.text_content("#unsure")
        threshold = httpx.get(url + "/models").json()[0]["unsure_below"]
        assert note.startswith("⚠ Unsure") and f"{100 * want['confidence']:.1f}%" in note
        assert f"{100 * threshold:.1f}%" in note
        colours = page.eval_on_selector("#unsure", "e => [getComputedStyle(e).color, "
                                        "getComputedStyle(e).backgroundColor]")
        assert _lightness(colours[1]) - _lightness(colours[0]) > 0.5  # readable
    finally:  # the other tests' sentence back
        page.fill("#text", SENTENCE)
        page.click("#translate")
        page.wait_for_function(f"document.querySelector('#translation').textContent == {expected['hyp']!r}",
                               timeout=60_000)
    assert page.is_hidden("#unsure")


def test_an_empty_input_says_so(page):
    page.fill("#text", "   ")
    page.click("#translate")
    assert "Type a sentence" in page.text_content("#status")
    page.fill("#text", SENTENCE)


@pytest.mark.parametrize(("name", "width", "height"), [("phone", 420, 900), ("desktop", 1280, 900)])
def test_nothing_is_cut_off_at_phone_and_desktop_widths(browser, url, name, width, height):
    page = translated(browser, url, width, height)
    try:
        page.click("#tgt .piece >> nth=2")
        assert page.evaluate("document.documentElement.scrollWidth") <= width  # no sideways scroll
        box = page.eval_on_selector("#heatmap", "e => [e.scrollWidth, e.clientWidth]")
        assert box[0] <= box[1] + 1  # the heat map fits its box
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"explorer-{name}.png"), full_page=True)
    finally:
        page.close()


def test_direction_picker_only_for_a_multilingual_model(browser, tmp_path_factory):
    """Hidden for a single-direction model; for a multilingual one it lists its directions
    and the translation shown is that direction's ``/attention`` answer."""
    from helpers import save_multilingual_checkpoint

    multi = save_multilingual_checkpoint(tmp_path_factory.mktemp("multi") / "multi.ckpt", "en<>de,fr")
    with running(create_app(load_models([str(SHIPPED), f"multi={multi}"]))) as base:
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        try:
            page.goto(base + "/")
            page.wait_for_function("document.querySelectorAll('#model option').length == 2")
            assert page.is_hidden("#direction-box")
            page.select_option("#model", "multi")
            assert page.is_visible("#direction-box")
            listed = page.eval_on_selector_all("#direction option", "els => els.map(e => e.value)")
            assert listed == ["en-de", "de-en", "en-fr", "fr-en"]
            page.select_option("#direction", "en-fr")
            page.fill("#text", "A dog runs through the snow.")
            page.select_option("#method", "greedy")
            page.click("#translate")
            page.wait_for_selector("#tgt .piece", timeout=60_000)
            want = httpx.post(base + "/attention", timeout=60, json={
                "model": "multi", "text": "A dog runs through the snow.", "beam": 1, "nbest": 1,
                "length_penalty": "average", "source_lang": "en", "target_lang": "fr"}).json()
            assert page.text_content("#translation") == want["hyp"]
            assert _attr(page, "#src .piece", "pieces") == want["src_pieces"]
            assert want["src_pieces"][0] == "<2fr>"
            page.select_option("#model", "multi30k_de_en_tiny")
            assert page.is_hidden("#direction-box")
        finally:
            page.close()
