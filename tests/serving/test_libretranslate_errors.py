"""LibreTranslate's API refuses as LibreTranslate does, never with a 500: its error words and
statuses for limits, languages and keys; ``alternatives`` that is not a bounded whole number
and ``api_key`` of any JSON type; its key rule (no key: the anonymous limit, unless keys are
required by origin); and ``seq2seq-serve``'s new options refused in one line."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[serve]'")
from fastapi.testclient import TestClient  # noqa: E402
from helpers import DE_EN, EN_DE, run_main, save_multilingual_checkpoint  # noqa: E402

from seq2seq.cli.serve import main as serve_main  # noqa: E402
from seq2seq.config import ConfigError, ServeConfig  # noqa: E402
from seq2seq.serving import create_app, load_models  # noqa: E402
from seq2seq.serving.keys import ApiKeys, KeyRefused  # noqa: E402

HUND = {"q": "Hund", "source": "de", "target": "en"}


@pytest.fixture(scope="module")
def both():
    return load_models([str(DE_EN), str(EN_DE)])


@pytest.fixture(scope="module")
def de_en():
    return load_models([str(DE_EN)])


def app(models, **cfg):
    return TestClient(create_app(models, ServeConfig(api="libretranslate", **cfg)))


def post_json(c: TestClient, text: str, path: str = "/translate", **headers):
    """A JSON body as written (``Infinity`` and ``1e999999`` are what JavaScript sends)."""
    return c.post(path, content=text.encode(), headers={"content-type": "application/json",
                                                        **headers})


WORDS = [  # (body, status, error): LibreTranslate's words
    ({**HUND, "target": "xx"}, 400, "xx is not supported"),
    ({**HUND, "source": "xx"}, 400, "xx is not supported"),
    ({**HUND, "source": "auto", "target": "xx"}, 400, "xx is not supported"),
    ({**HUND, "q": ["x"] * 65}, 400, "Invalid request: request (65) exceeds text limit (64)"),
    ({**HUND, "q": "x" * 1001}, 400, "Invalid request: request (1001) exceeds text limit (1000)"),
    ({**HUND, "q": ["x", "y" * 1001]}, 400,
     "Invalid request: request (1001) exceeds text limit (1000)"),
    ({**HUND, "format": "pdf"}, 400, "pdf format is not supported"),
    ({**HUND, "alternatives": 99}, 400, "Invalid request: alternatives parameter must be <= 15"),
]


@pytest.mark.parametrize(("body", "status", "error"), WORDS, ids=[w[2] for w in WORDS])
def test_refusals_in_libretranslates_words(both, body, status, error):
    with app(both) as c:
        got = c.post("/translate", json=body)
    assert (got.status_code, got.json()) == (status, {"error": error})


def test_a_pair_no_model_serves(de_en):
    with app(de_en) as c:
        got = c.post("/translate", json={"q": "A dog.", "source": "en", "target": "de"})
    assert got.json() == {"error": "German (de) is not available as a target language "
                                   "from English (en)"}


@pytest.mark.parametrize("value", ["Infinity", "-Infinity", "NaN", "1e999999", '"1e999999"',
                                   "1" + "0" * 400, '"' + "9" * 5000 + '"', "[1]", "{}"])
def test_alternatives_must_be_a_bounded_whole_number(de_en, value):
    with app(de_en) as c:
        got = post_json(c, '{"q": "Hund", "source": "de", "target": "en", "alternatives": '
                        + value + "}")
    assert got.status_code == 400, got.text
    assert got.json()["error"].startswith("Invalid request: alternatives parameter ")


@pytest.fixture
def keys(tmp_path):
    path = tmp_path / "keys.txt"
    path.write_text("good-key 100\n")
    return str(path)


@pytest.mark.parametrize("key", ['["good-key"]', "123", '{"k": "good-key"}', "true", '"bad"'])
def test_an_api_key_of_any_wrong_type_is_refused_not_a_crash(de_en, keys, key):
    with app(de_en, api_keys=keys) as c:
        got = post_json(c, '{"q": "Hund", "source": "de", "target": "en", "api_key": ' + key + "}")
        detect = post_json(c, '{"q": "Hund", "api_key": ' + key + "}", path="/detect")
    for answer in (got, detect):
        assert (answer.status_code, answer.json()) == (403, {"error": "Invalid API key"})


def test_an_api_key_of_any_type_is_ignored_without_keys(de_en):
    with app(de_en) as c:
        got = post_json(c, '{"q": "Hund", "source": "de", "target": "en", "api_key": [1, {}]}')
    assert got.status_code == 200 and got.json()["translatedText"]


def test_no_key_is_served_under_the_anonymous_limit(de_en, keys):
    with app(de_en, api_keys=keys, req_limit=3) as c:
        anonymous = [c.post("/translate", json=HUND).status_code for _ in range(4)]
        keyed = c.post("/translate", json={**HUND, "api_key": "good-key"})
        falsy = c.post("/translate", json={**HUND, "api_key": ""})  # LibreTranslate: no key
        settings = c.get("/frontend/settings").json()
        ours = c.post("/seq2seq/translate", json={"texts": ["Hund"]})
    assert anonymous == [200, 200, 200, 429] and falsy.status_code == 429
    assert keyed.status_code == 200
    assert (settings["apiKeys"], settings["keyRequired"]) == (True, False)
    assert ours.status_code == 403  # our own API still wants its key


def test_the_anonymous_limit_is_per_address_and_forgets_idle_ones():
    now = [0.0]
    keys = ApiKeys({"k": 5}, clock=lambda: now[0], default_limit=2)
    keys.check_anonymous("a"), keys.check_anonymous("a"), keys.check_anonymous("b")
    with pytest.raises(KeyRefused, match="Slowdown: 2 per 1 minute"):
        keys.check_anonymous("a")
    now[0] = 61.0
    keys.check_anonymous("c")  # a and b were idle for a whole window: no longer held
    assert list(keys._anonymous) == ["c"]


def test_keys_required_unless_the_origin_matches(de_en, keys):
    cfg = {"api_keys": keys, "require_api_key_origin": r"https://ours\.example"}
    with app(de_en, **cfg) as c:
        refused = c.post("/translate", json=HUND, headers={"origin": "https://other.example"})
        no_origin = c.post("/detect", json={"q": "Hund"})
        ours = c.post("/translate", json=HUND, headers={"origin": "https://ours.example"})
        keyed = c.post("/translate", json={**HUND, "api_key": "good-key"})
        settings = c.get("/frontend/settings").json()
    for answer in (refused, no_origin):
        assert (answer.status_code, answer.json()) == (
            400, {"error": "Please contact the server operator to get an API key"})
    assert ours.status_code == keyed.status_code == 200 and settings["keyRequired"] is True


KEYED = {  # every LibreTranslate route that takes api_key, with a request it serves
    "/translate": {"json": HUND},
    "/detect": {"json": {"q": "Hund"}},
    "/translate_file": {"data": {"source": "de", "target": "en"},
                        "files": {"file": ("a.txt", b"Ein Hund.\n")}},
}


def with_key(request: dict, key: str) -> dict:
    part = "json" if "json" in request else "data"
    return {**request, part: {**request[part], "api_key": key}}


@pytest.mark.parametrize("route", KEYED)
def test_every_route_has_libretranslates_key_rule(de_en, keys, route):
    with app(de_en, api_keys=keys, req_limit=2) as c:
        anonymous = [c.post(route, **KEYED[route]).status_code for _ in range(3)]
        keyed = c.post(route, **with_key(KEYED[route], "good-key"))
        wrong = c.post(route, **with_key(KEYED[route], "bad"))
    with app(de_en, api_keys=keys, require_api_key_origin="(?!)") as c:  # keys for every origin
        required = c.post(route, **KEYED[route])
    assert anonymous == [200, 200, 429] and keyed.status_code == 200, keyed.text
    assert (wrong.status_code, wrong.json()) == (403, {"error": "Invalid API key"})
    assert (required.status_code, required.json()) == (
        400, {"error": "Please contact the server operator to get an API key"})


def test_work_over_the_limit_is_a_400_whatever_the_format(de_en):
    """LibreTranslate's clients know no 413: work over the server's limit is its 400, for
    plain texts, HTML pages and documents alike (our API says 413)."""
    sentences = "Ein Hund läuft durch den Schnee. " * 3
    with app(de_en, max_work=1_000) as c:
        plain = c.post("/translate", json={**HUND, "q": sentences})
        page = c.post("/translate", json={**HUND, "q": f"<p>{sentences}</p>", "format": "html"})
        document = c.post("/translate_file", data={"source": "de", "target": "en"},
                          files={"file": ("a.txt", sentences.encode())})
        ours = c.post("/seq2seq/translate", json={"texts": [sentences]})
    for got in (plain, page, document):
        assert got.status_code == 400 and "units of work" in got.json()["error"], got.text
    assert ours.status_code == 413 and "units of work" in ours.json()["detail"]


def test_a_multilingual_model_asks_for_the_request_field(tmp_path):
    ckpt = save_multilingual_checkpoint(tmp_path / "multi.ckpt")
    with TestClient(create_app(load_models([str(ckpt)]))) as c:
        got = c.post("/translate", json={"texts": ["a"]})
    assert got.status_code == 422
    assert "(target_lang)" in got.json()["detail"] and "--target-lang" not in got.json()["detail"]


def test_the_new_options_are_checked_in_one_line(tmp_path):
    for bad, words in (({"api": "both"}, "ServeConfig.api: 'both' is not one of"),
                       ({"require_api_key_origin": "("}, "is not a regular expression")):
        with pytest.raises(ConfigError, match=words):
            ServeConfig(**bad)
    for argv, words in ((["--api", "both"], "invalid choice: 'both'"),
                        (["--require-api-key-origin", "("], "is not a regular expression")):
        code, _, err = run_main(serve_main, ["-m", str(DE_EN), *argv])
        assert code == 2 and words in err and "Traceback" not in err, err


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_any_serve_config_value_is_accepted_valid_or_refused_by_name(data):
    """``ServeConfig`` (the new ``api`` and ``require_api_key_origin`` among its fields) is
    valid or refused with a ``ConfigError`` naming the field, never another exception."""
    field = data.draw(st.sampled_from([f.name for f in dataclasses.fields(ServeConfig)]))
    value = data.draw(st.one_of(
        st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.text(max_size=12),
        st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(["libretranslate", "(", "[a-"])))
    try:
        ServeConfig(**{field: value})
    except ConfigError as e:
        assert field in str(e), e
