"""``seq2seq-serve`` with a multilingual model: ``/models`` lists its directions,
``/translate`` and ``/attention`` take ``target_lang`` (and ``source_lang``) and answer as
``Translator(target_lang=...)`` does, an unknown direction is a 422 in our API's shape
naming the model's directions; LibreTranslate's API routes each (source, target) pair to
the model's direction and lists them in ``/languages``. A single-direction model served
beside it answers as before."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[serve]'")
from fastapi.testclient import TestClient  # noqa: E402
from helpers import save_multilingual_checkpoint, save_tiny_checkpoint, tiny_tokenizers  # noqa: E402

from seq2seq.config import DecodingConfig  # noqa: E402
from seq2seq.serving import create_app, load_models  # noqa: E402
from seq2seq.translation.translator import Translator  # noqa: E402

TEXTS = ["A dog runs through the snow.", "Ein Mann fährt Fahrrad."]
SHORT = {"max_len_b": 6}
LIBRE = "/libretranslate"


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve-multi")
    return {"multi": save_multilingual_checkpoint(root / "multi.ckpt", "en<>de,fr", "source", seed=1),
            "dec": save_multilingual_checkpoint(root / "dec.ckpt", "en<>de", "decoder", seed=2),
            "single": save_tiny_checkpoint(root / "single.ckpt", tiny_tokenizers(100), seed=1,
                                           pair=("de", "en"))}


@pytest.fixture(scope="module")
def client(ckpts):
    models = load_models([f"multi={ckpts['multi']}", f"dec={ckpts['dec']}", f"single={ckpts['single']}"])
    with TestClient(create_app(models)) as c:
        yield c


def ours(ckpt, texts, **direction):
    return Translator.from_checkpoint(ckpt, DecodingConfig(**SHORT)).translate_full(texts, **direction)


def test_models_lists_each_models_directions(client):
    listed = {m["name"]: m for m in client.get("/models").json()}
    assert listed["multi"]["directions"] == ["en-de", "de-en", "en-fr", "fr-en"]
    assert listed["multi"]["multilingual"] and listed["multi"]["src_lang"] is None
    assert listed["dec"]["directions"] == ["en-de", "de-en"]
    assert listed["single"]["directions"] == ["de-en"] and not listed["single"]["multilingual"]
    assert listed["single"]["src_lang"] == "de" and listed["single"]["tgt_lang"] == "en"
    # the source tag takes one of the model's positions
    assert listed["multi"]["max_source_tokens"] == listed["dec"]["max_source_tokens"] - 1


@pytest.mark.parametrize("model, direction", [("multi", {"target_lang": "fr"}),
                                              ("multi", {"target_lang": "en", "source_lang": "de"}),
                                              ("dec", {"target_lang": "de"}),
                                              ("single", {}), ("single", {"target_lang": "en"})])
def test_translate_answers_as_the_translator(client, ckpts, model, direction):
    r = client.post("/translate", json={"model": model, "texts": TEXTS, **SHORT, **direction})
    assert r.status_code == 200, r.text
    want = ours(ckpts[model], TEXTS, **direction)
    assert [x["hyp"] for x in r.json()["results"]] == [w.hyp for w in want]
    assert [x["score"] for x in r.json()["results"]] == pytest.approx([w.score for w in want])


def test_concurrent_directions_are_not_mixed(client, ckpts):
    """Requests for different directions never share a model call's tag."""
    import concurrent.futures as cf

    asks = [{"target_lang": t} for t in ("de", "fr", "de", "fr")]
    with cf.ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda d: client.post("/translate", json={
            "model": "multi", "texts": TEXTS, **SHORT, **d}).json(), asks))
    for ask, answer in zip(asks, answers):
        assert [x["hyp"] for x in answer["results"]] == [w.hyp for w in ours(ckpts["multi"], TEXTS, **ask)]


@pytest.mark.parametrize("model, direction, words", [
    ("multi", {}, ["several", "en-de, de-en, en-fr, fr-en"]),
    ("multi", {"target_lang": "cs"}, ["'cs'", "en-de, de-en, en-fr, fr-en"]),
    ("multi", {"target_lang": "fr", "source_lang": "de"}, ["de-fr", "en-fr"]),
    ("single", {"target_lang": "fr"}, ["de-en", "'fr'"]),
])
def test_unknown_direction_is_a_422_naming_the_directions(client, model, direction, words):
    for path, body in (("/translate", {"texts": TEXTS}), ("/attention", {"text": TEXTS[0]})):
        r = client.post(path, json={"model": model, **body, **direction})
        assert r.status_code == 422
        detail = r.json()["detail"]
        assert isinstance(detail, str) and f"model {model!r}" in detail
        assert all(w in detail for w in words), detail
    assert client.get("/health").json()["status"] == "ok"


@pytest.mark.parametrize("model, tag_first", [("multi", "src"), ("dec", "tgt_in")])
def test_attention_shows_the_tag_where_the_model_reads_it(client, ckpts, model, tag_first):
    r = client.post("/attention", json={"model": model, "text": TEXTS[0], "target_lang": "de", **SHORT})
    assert r.status_code == 200, r.text
    body = r.json()
    want = ours(ckpts[model], TEXTS[:1], target_lang="de")[0]
    assert body["hyp"] == want.hyp
    assert body[f"{tag_first}_pieces"][0] == "<2de>"
    other = "tgt_in" if tag_first == "src" else "src"
    assert "<2de>" not in body[f"{other}_pieces"]
    if tag_first == "src":
        assert body["tgt_in_pieces"][0] == "<s>"


# ---------------------------------------------------------------- LibreTranslate
def test_libretranslate_lists_the_directions(client):
    langs = {x["code"]: x["targets"] for x in client.get(f"{LIBRE}/languages").json()}
    assert langs == {"en": ["de", "fr"], "de": ["en"], "fr": ["en"]}  # the first model of a pair


@pytest.mark.parametrize("source, target", [("en", "fr"), ("fr", "en"), ("en", "de")])
def test_libretranslate_routes_a_pair_to_the_direction(client, ckpts, source, target):
    r = client.post(f"{LIBRE}/translate", json={"q": TEXTS[:1], "source": source, "target": target})
    assert r.status_code == 200, r.text
    want = Translator.from_checkpoint(ckpts["multi"]).translate(TEXTS[:1], target_lang=target,
                                                                source_lang=source)
    assert r.json()["translatedText"] == want


def test_libretranslate_refuses_a_pair_no_model_has(client):
    r = client.post(f"{LIBRE}/translate", json={"q": "Bonjour", "source": "fr", "target": "de"})
    assert r.status_code == 400 and "fr" in r.json()["error"] and "de" in r.json()["error"]


def test_libretranslate_auto_detects_among_the_source_languages(client, ckpts):
    texts = ["Un homme fait du vélo dans la rue.", "Ein Mann fährt mit dem Fahrrad die Straße entlang."]
    r = client.post(f"{LIBRE}/translate", json={"q": texts, "source": "auto", "target": "en"})
    assert r.status_code == 200, r.text
    detected = [d["language"] for d in r.json()["detectedLanguage"]]
    assert detected == ["fr", "de"]
    want = [Translator.from_checkpoint(ckpts["multi"]).translate([t], target_lang="en", source_lang=s)[0]
            for t, s in zip(texts, detected)]
    assert r.json()["translatedText"] == want
