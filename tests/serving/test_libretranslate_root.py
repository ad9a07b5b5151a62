"""``seq2seq-serve --api libretranslate``: LibreTranslate's whole surface at the server root,
the way LibreTranslate's own server answers (its routes, methods, statuses and words), its
real Python clients given just the server's URL, with and without a trailing slash, against
a real child process; CORS, merged slashes, entities, texts without words, keys, and the
parameters LibreTranslate's clients and hostile callers send."""

from __future__ import annotations

import html
from urllib.parse import urlencode

import pytest

pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[serve]'")
libretranslatepy = pytest.importorskip("libretranslatepy", reason="needs the dev extra (the tests' clients)")
deep_translator = pytest.importorskip("deep_translator", reason="needs the dev extra (the tests' clients)")
import httpx  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402
from helpers import DE_EN, EN_DE, ENGLISH, GERMAN, seq2seq_translate  # noqa: E402

from scripts.bench.load import server_process  # noqa: E402
from seq2seq.config import ServeConfig  # noqa: E402
from seq2seq.serving import create_app, load_models  # noqa: E402
from seq2seq.serving.libre import PREFIX  # noqa: E402

ORIGIN = "http://page.example"
ROUTES = {  # route -> its one method, as LibreTranslate's server has them
    "/translate": "POST", "/detect": "POST", "/languages": "GET", "/frontend/settings": "GET",
    "/suggest": "POST", "/spec": "GET", "/health": "GET",
}


@pytest.fixture(scope="module")
def root():
    with server_process([DE_EN, EN_DE], args=["--api", "libretranslate"]) as base:
        yield base


@pytest.fixture(scope="module")
def models():
    return load_models([str(DE_EN), str(EN_DE)])


def client(models, **cfg) -> TestClient:
    return TestClient(create_app(models, ServeConfig(api="libretranslate", **cfg)))


# ---------------------------------------------------------------- real clients, the URL alone
@pytest.mark.parametrize("slash", ["", "/"], ids=["no-slash", "slash"])
def test_libretranslatepy_given_the_server_url(root, slash):
    lt = libretranslatepy.LibreTranslateAPI(root + slash)
    assert [lt.translate(t, "de", "en") for t in GERMAN] == seq2seq_translate(DE_EN, GERMAN)
    assert lt.translate(ENGLISH[0], "en", "de") == seq2seq_translate(EN_DE, ENGLISH[:1])[0]
    assert lt.detect(GERMAN[0])[0]["language"] == "de"
    assert [lang["code"] for lang in lt.languages()] == ["de", "en"]


def test_deep_translator_given_the_server_url(root):
    # deep-translator appends "translate" to the URL as given: it needs the trailing slash
    # from any server (without it the port runs into the path: ":8000translate"); it always
    # sends a key, which a server without --api-keys ignores, as LibreTranslate's does
    client = deep_translator.LibreTranslator(source="de", target="en", api_key="any",
                                             custom_url=root + "/")
    assert client.translate_batch(GERMAN) == seq2seq_translate(DE_EN, GERMAN)


def test_merged_slashes_reach_every_route(root):
    """A client given ``http://host/`` builds ``http://host//languages``."""
    assert httpx.get(root + "//languages").json() == httpx.get(root + "/languages").json()
    got = httpx.post(root + "//translate", json={"q": GERMAN[0], "source": "de", "target": "en"})
    assert got.json() == {"translatedText": seq2seq_translate(DE_EN, GERMAN[:1])[0]}
    assert httpx.get(root + "/seq2seq//health").json()["models"]  # ours too


# ---------------------------------------------------------------- routes and methods
def test_each_route_answers_its_method_and_405_to_another(root):
    for route, method in ROUTES.items():
        other = "GET" if method == "POST" else "POST"
        wrong = httpx.request(other, root + route)
        assert wrong.status_code == 405 and wrong.json() == {"error": "Method Not Allowed"}, route
    assert httpx.get(root + "/health").json() == {"status": "ok"}
    refused = httpx.post(root + "/suggest", json={"q": "Hund", "s": "Dog", "source": "de",
                                                  "target": "en"})
    assert (refused.status_code, refused.json()) == (
        403, {"error": "Suggestions are disabled on this server."})
    spec = httpx.get(root + "/spec").json()
    assert set(ROUTES) <= set(spec["paths"]) and spec["servers"] == [{"url": "/"}]


def test_frontend_settings_as_libretranslate_gives_them(root):
    got = httpx.get(root + "/frontend/settings").json()
    assert got["frontendTimeout"] == 500 and got["charLimit"] == 1000
    assert got["language"]["source"] == {"code": "auto", "name": "Auto Detect"}
    assert got["language"]["target"]["code"] in {"de", "en"}
    assert (got["apiKeys"], got["keyRequired"], got["filesTranslation"]) == (False, False, True)
    assert {".txt", ".html", ".docx", ".srt"} <= set(got["supportedFilesFormat"])


def test_ours_and_the_explorer_move_under_seq2seq(root):
    ours = httpx.post(root + "/seq2seq/translate", json={"texts": GERMAN[:1]}).json()
    assert [r["hyp"] for r in ours["results"]] == seq2seq_translate(DE_EN, GERMAN[:1])
    page = httpx.get(root + "/seq2seq/")
    assert page.status_code == 200 and 'src="static/explorer.js"' in page.text
    assert httpx.get(root + "/seq2seq/static/explorer.js").status_code == 200
    assert httpx.get(root + "/").headers["location"] == "/seq2seq/"  # not followed by httpx
    assert httpx.get(root + "/nothing").json() == {"error": "Not Found"}


def test_the_default_stays_ours_at_the_root(models):
    with TestClient(create_app(models)) as c:
        assert "models" in c.get("/health").json()
        assert c.get(PREFIX + "/health").json() == {"status": "ok"}
        assert c.post(PREFIX + "/languages").status_code == 405
        assert c.get("/seq2seq/health").status_code == 404


def test_a_libretranslate_client_at_our_root_is_told_where_to_go(models):
    """The default layout: a client given the bare URL reaches our API and is told where
    LibreTranslate's is, instead of a bare 422 or 404."""
    hint = "give LibreTranslate clients http://testserver/libretranslate/"
    with TestClient(create_app(models)) as c:
        for got in (c.post("/translate", data={"q": "Hund", "source": "de", "target": "en"}),
                    c.post("/translate", json={"q": "Hund", "source": "de", "target": "en"}),
                    c.get("/languages"), c.post("/detect", data={"q": "Hund"})):
            assert got.status_code in (404, 422) and hint in got.json()["detail"], got.text
        assert "LibreTranslate" not in c.post("/translate", json={"text": ["Hund"]}).text


def test_routes_registered_later_under_the_prefix_are_at_the_root(models):
    """Routes added under the prefix after the app is made (as file translation's are) get
    the same treatment: at the root, merged slashes, CORS, 405 for another method."""
    app = create_app(models, ServeConfig(api="libretranslate"))
    app.add_api_route(PREFIX + "/later", lambda: {"later": True}, methods=["POST"])
    with TestClient(app) as c:
        got = c.post("http://testserver//later", headers={"origin": ORIGIN})
        assert got.json() == {"later": True}
        assert got.headers["access-control-allow-origin"] == "*"
        assert c.get("/later").status_code == 405
        sent = c.post("http://testserver//translate_file", headers={"origin": ORIGIN})  # real
        assert sent.status_code == 400 and "file" in sent.json()["error"]
        assert sent.headers["access-control-allow-origin"] == "*"
        assert "/translate_file" in c.get("/spec").json()["paths"]


# ---------------------------------------------------------------- CORS
def test_cors_preflight_and_answers_allow_any_origin(root):
    pre = httpx.options(root + "/translate", headers={
        "origin": ORIGIN, "access-control-request-method": "POST",
        "access-control-request-headers": "content-type"})
    assert pre.status_code == 200 and pre.headers["access-control-allow-origin"] == "*"
    assert "POST" in pre.headers["access-control-allow-methods"]
    for method, path, body in (("POST", "/translate", {"q": "Hund", "source": "de", "target": "en"}),
                               ("POST", "/translate", {"source": "de"}),  # a 400 too
                               ("GET", "/languages", None),
                               ("POST", "/seq2seq/translate", {"texts": ["Hund"]})):
        got = httpx.request(method, root + path, json=body, headers={"origin": ORIGIN})
        assert got.headers.get("access-control-allow-origin") == "*", (path, got.status_code)


@pytest.mark.parametrize("api", ["seq2seq", "libretranslate"])
def test_a_refused_preflight_answers_in_its_apis_error_shape(models, api):
    """A preflight asking for a method or header the server does not allow: still 400, in
    the JSON error shape of the API it asked (LibreTranslate's ``error``, our ``detail``)."""
    paths = {"seq2seq": ("/translate", "/libretranslate/translate"),
             "libretranslate": ("/seq2seq/translate", "/translate")}[api]
    asked = ({"access-control-request-method": "PUT"},
             {"access-control-request-method": "POST", "access-control-request-headers": "x-mine"})
    with TestClient(create_app(models, ServeConfig(api=api))) as c:
        for path, field in zip(paths, ("detail", "error")):
            for headers in asked:
                got = c.options(path, headers={"origin": ORIGIN, **headers})
                assert got.status_code == 400 and got.headers["content-type"] == "application/json"
                assert list(got.json()) == [field] and "CORS" in got.json()[field], got.text
                assert got.headers["access-control-allow-origin"] == "*"


# ---------------------------------------------------------------- what comes back
def test_entities_are_escaped_once_in_html_and_not_at_all_in_text(root):
    model = seq2seq_translate(DE_EN, ["Hund & Katze"])[0]
    assert "&amp;" in model  # the model writes "&amp;" (it is in its training text)
    text = httpx.post(root + "/translate", json={"q": "Hund & Katze", "source": "de",
                                                 "target": "en"}).json()["translatedText"]
    assert text == html.unescape(model) and "&amp;" not in text
    page = "<p>Hund &amp; Katze</p>"
    out = httpx.post(root + "/translate", json={"q": page, "source": "de", "target": "en",
                                                "format": "html"}).json()["translatedText"]
    assert "&amp;amp;" not in out and out == f"<p>{html.escape(text, quote=False)}</p>"


def test_texts_without_words_come_back_unchanged(root):
    wordless = ["😀🐶", "!!! ... ?", " ", "🇩🇪 ✨"]
    got = httpx.post(root + "/translate", json={"q": [*wordless, GERMAN[0]], "source": "de",
                                                "target": "en"}).json()
    assert got["translatedText"] == [*wordless, seq2seq_translate(DE_EN, GERMAN[:1])[0]]
    auto = httpx.post(root + "/translate", json={"q": "😀", "source": "auto", "target": "en"})
    assert auto.json()["translatedText"] == "😀"
    assert auto.json()["detectedLanguage"]["confidence"] == 0.0


def test_detect_takes_a_list_of_texts(root):
    ranked = httpx.post(root + "/detect", json={"q": GERMAN}).json()
    assert ranked[0]["language"] == "de" and sorted(r["language"] for r in ranked) == ["de", "en"]
    assert sum(r["confidence"] for r in ranked) == pytest.approx(100.0, abs=0.1)
    one = httpx.post(root + "/detect", json={"q": [GERMAN[0]]}).json()
    assert one == httpx.post(root + "/detect", json={"q": GERMAN[0]}).json()


def test_a_repeated_form_q_is_a_list(root):
    fields = [("source", "de"), ("target", "en"), *(("q", t) for t in GERMAN)]
    form = httpx.post(root + "/translate", content=urlencode(fields).encode(),
                      headers={"content-type": "application/x-www-form-urlencoded"})
    assert form.json() == {"translatedText": seq2seq_translate(DE_EN, GERMAN)}
    query = httpx.post(root + "/translate", params=[("q", GERMAN[0]), ("q", GERMAN[1]),
                                                    ("source", "de"), ("target", "en")])
    assert query.json() == {"translatedText": seq2seq_translate(DE_EN, GERMAN[:2])}
