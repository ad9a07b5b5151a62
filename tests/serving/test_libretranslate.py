"""LibreTranslate's API: its real clients (``libretranslatepy``, ``deep-translator``)
against a real ``seq2seq-serve`` child process holding the shipped De->En and En->De models
get exactly what ``seq2seq-translate`` gives for the same texts; ``auto``, ``/detect``,
``/languages``, HTML, alternatives, API keys and errors as LibreTranslate answers them."""

from __future__ import annotations

import json
import urllib.error
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[serve]'")
libretranslatepy = pytest.importorskip("libretranslatepy", reason="needs the dev extra (the tests' clients)")
deep_translator = pytest.importorskip("deep_translator", reason="needs the dev extra (the tests' clients)")
import httpx  # noqa: E402
from helpers import DE_EN, EN_DE, ENGLISH, GERMAN, run_main, seq2seq_translate  # noqa: E402

from scripts.bench.load import server_process  # noqa: E402
from seq2seq.cli.translate import main as translate_main  # noqa: E402
from seq2seq.documents.html import Page, parse  # noqa: E402
from seq2seq.documents.inline import sentence_splitter  # noqa: E402
from seq2seq.serving.keys import ApiKeys, KeyRefused  # noqa: E402

KEYS = {"good-key": 100, "slow-key": 2}


def nbest_translate(checkpoint: Path, texts: list[str], k: int, beam: int) -> list[list[str]]:
    flags = ["--beam", str(beam), "--nbest", str(k), "--output-format", "jsonl"]
    code, out, err = run_main(translate_main, ["-m", str(checkpoint), *flags],
                              "".join(t + "\n" for t in texts).encode())
    assert code in (0, None), err
    return [[n["hyp"] for n in json.loads(line)["nbest"]] for line in out.splitlines()]


@pytest.fixture(scope="module")
def url():
    with server_process([DE_EN, EN_DE]) as base:
        yield base + "/libretranslate/"


@pytest.fixture(scope="module")
def keyed_url(tmp_path_factory):
    keys = tmp_path_factory.mktemp("keys") / "keys.txt"
    keys.write_text("# key  requests per minute\n" + "".join(f"{k} {n}\n" for k, n in KEYS.items()))
    with server_process([DE_EN], args=["--api-keys", str(keys)]) as base:
        yield base + "/libretranslate/"


# ---------------------------------------------------------------- the real clients
def test_libretranslatepy_translates_as_seq2seq_translate(url):
    lt = libretranslatepy.LibreTranslateAPI(url)
    assert [lt.translate(t, "de", "en") for t in GERMAN] == seq2seq_translate(DE_EN, GERMAN)
    assert [lt.translate(t, "en", "de") for t in ENGLISH] == seq2seq_translate(EN_DE, ENGLISH)


def test_deep_translator_translates_a_string_and_a_list(url):
    # deep-translator sends its parameters in the query string of a POST, always with a key
    client = deep_translator.LibreTranslator(source="de", target="en", api_key="anything",
                                             custom_url=url)
    want = seq2seq_translate(DE_EN, GERMAN)
    assert client.translate(GERMAN[0]) == want[0]
    assert client.translate_batch(GERMAN) == want


def test_a_list_in_one_json_request_equals_seq2seq_translate(url):
    got = httpx.post(url + "translate", json={"q": GERMAN, "source": "de", "target": "en"})
    assert got.status_code == 200, got.text
    assert got.json() == {"translatedText": seq2seq_translate(DE_EN, GERMAN)}


def test_languages_are_the_served_pairs(url):
    langs = libretranslatepy.LibreTranslateAPI(url).languages()
    assert langs == [{"code": "de", "name": "German", "targets": ["en"]},
                     {"code": "en", "name": "English", "targets": ["de"]}]


def test_detect_ranks_the_served_source_languages(url):
    lt = libretranslatepy.LibreTranslateAPI(url)
    for texts, lang in ((GERMAN, "de"), (ENGLISH, "en")):
        for text in texts:
            ranked = lt.detect(text)
            assert [r["language"] for r in ranked][0] == lang
            assert sorted(r["language"] for r in ranked) == ["de", "en"]
            assert 50.0 < ranked[0]["confidence"] <= 100.0
            assert sum(r["confidence"] for r in ranked) == pytest.approx(100.0, abs=0.1)


def test_auto_routes_each_text_to_its_language_model(url):
    lt = libretranslatepy.LibreTranslateAPI(url)
    assert lt.translate(GERMAN[0], "auto", "en") == seq2seq_translate(DE_EN, GERMAN[:1])[0]
    mixed = [GERMAN[0], ENGLISH[0], GERMAN[1]]
    got = httpx.post(url + "translate", json={"q": mixed, "source": "auto", "target": "de"}).json()
    de_en = seq2seq_translate(EN_DE, [ENGLISH[0]])[0]
    # German text into German is itself; the English one goes through the En->De model
    assert got["translatedText"] == [GERMAN[0], de_en, GERMAN[1]]
    assert [d["language"] for d in got["detectedLanguage"]] == ["de", "en", "de"]


def test_alternatives_are_the_nbest_of_a_beam(url):
    got = httpx.post(url + "translate", data={"q": GERMAN[0], "source": "de", "target": "en",
                                              "alternatives": "3"}).json()
    nbest = nbest_translate(DE_EN, GERMAN[:1], k=4, beam=5)[0]
    assert got["translatedText"] == nbest[0]
    assert got["alternatives"] == [h for h in dict.fromkeys(nbest[1:]) if h != nbest[0]]


def test_html_keeps_the_markup_and_translates_the_text(url):
    page = ('<div class="post" title="Ein Hund &amp; eine Katze"><p>Ein Hund rennt durch den '
            'Schnee.</p>\n<p>Zwei <b>Männer</b> spielen <i>Fußball &amp; <u>Tennis</u></i>.</p>'
            '<!-- Kommentar --><script>var s = "<p>Hund</p>";</script></div>')
    got = httpx.post(url + "translate", json={"q": page, "source": "de", "target": "en",
                                              "format": "html"})
    assert got.status_code == 200, got.text
    out = got.json()["translatedText"]
    for raw in (it.raw for it in parse(page) if it.kind != "text"):
        assert raw in out  # markup byte for byte
    sentences = Page(page, sentence_splitter("de")).sentences
    assert "Zwei Männer spielen Fußball & Tennis." in sentences  # decoded, tags gone: one text
    whole = Page(out, lambda text: [(0, len(text))]).sentences  # the text of each block
    assert whole == seq2seq_translate(DE_EN, sentences)
    assert "&amp;amp;" not in out  # escaped once


def test_numbers_symbols_and_list_markers_pass_through_both_formats(url):
    table = "<table><tr><td>1</td><td>2024</td><td>♪</td><td>😀 👍</td><td>...</td></tr></table>"
    got = httpx.post(url + "translate", json={"q": table, "source": "de", "target": "en",
                                              "format": "html"})
    assert got.status_code == 200 and got.json()["translatedText"] == table
    texts = ["1. Eine Gruppe von Menschen wartet auf den Bus.", "♪", "2024", "😀 Ein Hund läuft. 👍"]
    out = httpx.post(url + "translate", json={"q": texts, "source": "de", "target": "en"}).json()
    assert out["translatedText"] == seq2seq_translate(DE_EN, texts)
    marked, note, year, emoji = out["translatedText"]
    assert marked.startswith("1. ") and not any(c.isdigit() for c in marked[3:])
    assert (note, year) == ("♪", "2024") and emoji.startswith("😀 ") and emoji.endswith(" 👍")


# ---------------------------------------------------------------- API keys
def test_api_keys_accepted_refused_and_rate_limited(keyed_url):
    good = libretranslatepy.LibreTranslateAPI(keyed_url, api_key="good-key")
    assert good.translate(GERMAN[0], "de", "en") == seq2seq_translate(DE_EN, GERMAN[:1])[0]
    with pytest.raises(urllib.error.HTTPError) as refused:
        libretranslatepy.LibreTranslateAPI(keyed_url, api_key="good-keyX").translate("Hund", "de", "en")
    assert refused.value.code == 403 and json.load(refused.value)["error"] == "Invalid API key"
    # no key: served under the anonymous limit, as LibreTranslate serves it
    assert libretranslatepy.LibreTranslateAPI(keyed_url).translate(GERMAN[0], "de", "en")
    with pytest.raises(deep_translator.exceptions.AuthorizationException):
        deep_translator.LibreTranslator(source="de", target="en", api_key="wrong",
                                        custom_url=keyed_url).translate(GERMAN[0])
    slow = [httpx.post(keyed_url + "detect", data={"q": "Hund", "api_key": "slow-key"})
            for _ in range(3)]
    assert [r.status_code for r in slow] == [200, 200, 429]
    assert slow[2].json() == {"error": "Slowdown: 2 per 1 minute"}
    assert httpx.get(keyed_url + "languages").status_code == 200  # no key needed to look
    native = keyed_url.removesuffix("libretranslate/") + "translate"  # our API: X-API-Key
    body = {"texts": GERMAN[:1]}
    assert httpx.post(native, json=body, headers={"X-API-Key": "good-key"}).status_code == 200
    refused = httpx.post(native, json=body)
    assert refused.status_code == 403 and "contact the server operator" in refused.json()["detail"]


def test_keys_are_counted_per_minute_and_read_with_clear_errors(tmp_path):
    now = [0.0]
    keys = ApiKeys({"a": 2, "b": 1}, clock=lambda: now[0])
    keys.check("a"), keys.check("a"), keys.check("b")
    with pytest.raises(KeyRefused, match="Slowdown: 2 per 1 minute"):
        keys.check("a")
    now[0] = 60.0  # the window has moved on
    keys.check("a")
    for bad, words in (("k 0\n", ":1: expected"), ("k x\n", ":1: expected"), ("\n# none\n", "no keys")):
        (tmp_path / "k").write_text(bad)
        with pytest.raises(ValueError, match=words):
            ApiKeys.load(tmp_path / "k", 60)


# ---------------------------------------------------------------- errors
ERRORS = [  # (parameters as JSON, status, error)
    ({"source": "de", "target": "en"}, 400, "Invalid request: missing q parameter"),
    ({"q": "Hund", "target": "en"}, 400, "Invalid request: missing source parameter"),
    ({"q": "Hund", "source": "fr", "target": "en"}, 400, "fr is not supported"),
    ({"q": "Hund", "source": "de", "target": "fr"}, 400, "fr is not supported"),
    ({"q": "Hund", "source": "de", "target": "en", "format": "pdf"}, 400, "pdf format is not supported"),
    ({"q": "Hund", "source": "de", "target": "en", "alternatives": "many"},
     400, "Invalid request: alternatives parameter is not a number"),
    ({"q": "Hund", "source": "de", "target": "en", "alternatives": 99},
     400, "Invalid request: alternatives parameter must be <= 15"),
    ({"q": {"a": 1}, "source": "de", "target": "en"}, 400, "Invalid request: q must be a string"),
    ({"q": ["x"] * 65, "source": "de", "target": "en"},
     400, "Invalid request: request (65) exceeds text limit (64)"),
    ({"q": "x" * 1001, "source": "de", "target": "en"}, 400, "exceeds text limit (1000)"),
]


@pytest.mark.parametrize(("body", "status", "words"), ERRORS, ids=[e[2] for e in ERRORS])
def test_errors_are_libretranslate_shaped(url, body, status, words):
    got = httpx.post(url + "translate", json=body)
    assert got.status_code == status and words in got.json()["error"], got.text


def test_bodies_that_are_not_parameters(url):
    for content, ctype in ((b"[1, 2]", "application/json"), (b"{", "application/json"),
                           (b"[" * 100_000 + b"]" * 100_000, "application/json"),
                           (b"q=Hund", None)):
        headers = {"content-type": ctype} if ctype else {}
        got = httpx.post(url + "translate", content=content, headers=headers)
        assert got.status_code == 400 and got.json()["error"].startswith("Invalid request"), got.text
    assert httpx.get(url.removesuffix("libretranslate/") + "health").json()["status"] == "ok"


def test_libretranslate_requests_have_the_time_limit(monkeypatch):
    """A model call slower than the time limit (a sleeping stand-in: the same on any machine)."""
    import time

    from fastapi.testclient import TestClient

    import seq2seq.serving.api as api
    from seq2seq.config import ServeConfig
    from seq2seq.serving import create_app, load_models

    def slow(served, decoding, direction, texts, need_attention=False, lone_text_threads=None):
        time.sleep(1.0)
        return served.translator.translate_full(texts)

    monkeypatch.setattr(api, "translate_texts", slow)
    app = create_app(load_models([str(DE_EN)]), ServeConfig(request_timeout_s=0.2))
    with TestClient(app) as c:
        got = c.post("/libretranslate/translate", json={"q": "Hund", "source": "de", "target": "en"})
    assert got.status_code == 503 and "limit of 0.2 s" in got.json()["error"]


