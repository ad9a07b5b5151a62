"""An exception no handler expects, raised inside a route of either API on a real server, is
a one-line JSON 500 in that API's shape (``Cannot translate text: TYPE``, its message never
sent), with CORS headers, logged with its traceback; and the server keeps serving."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[serve]'")
import httpx  # noqa: E402
from helpers import DE_EN  # noqa: E402

import seq2seq.serving.api as api  # noqa: E402
from seq2seq.serving import Server, create_app, load_models, running  # noqa: E402
from seq2seq.serving.libre.routes import LibreTranslate  # noqa: E402

SECRET = "/home/operator/secret.ckpt"  # what an exception's message may hold: never sent
ORIGIN = {"origin": "http://page.example"}


def broken(*_args, **_kwargs):
    raise ZeroDivisionError(SECRET)


def broken_method(self):  # a route's endpoint: no parameters for FastAPI to read
    raise ZeroDivisionError(SECRET)


@pytest.fixture(scope="module")
def models():
    return load_models([str(DE_EN)])


class Kept(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


# (where the exception is raised, the request, the API's error field)
FAILURES = {
    "libretranslate route": (LibreTranslate, "languages", "GET", "/libretranslate/languages", "error"),
    "our route": (Server, "models_json", "GET", "/models", "detail"),
    "libretranslate model call": (api, "translate_texts", "POST", "/libretranslate/translate",
                                  "error"),
    "our model call": (api, "translate_texts", "POST", "/translate", "detail"),
}
BODIES = {"/libretranslate/translate": {"q": "Hund", "source": "de", "target": "en"},
          "/translate": {"texts": ["Hund"]}}


@pytest.mark.parametrize("where", FAILURES)
def test_an_unexpected_exception_is_a_json_500_and_the_server_keeps_serving(models, where,
                                                                            monkeypatch):
    owner, name, method, path, field = FAILURES[where]
    monkeypatch.setattr(owner, name, broken_method if isinstance(owner, type) else broken)
    log, kept = logging.getLogger("uvicorn.error"), Kept()
    with running(create_app(models)) as url:
        log.addHandler(kept)  # once started: uvicorn sets its loggers' handlers as it starts
        try:
            failed = [httpx.request(method, url + path, json=BODIES.get(path), headers=ORIGIN,
                                    timeout=60) for _ in range(2)]
        finally:
            log.removeHandler(kept)
        health = httpx.get(url + "/health", timeout=60)
        monkeypatch.undo()  # the model mended: the same server, its worker thread included
        translated = [httpx.post(url + p, json=body, timeout=60) for p, body in BODIES.items()]
    for got in failed:  # the second as the first: nothing left broken by the first
        assert got.status_code == 500 and got.headers["content-type"] == "application/json"
        assert got.json() == {field: "Cannot translate text: ZeroDivisionError"}
        assert SECRET not in got.text
        assert got.headers["access-control-allow-origin"] == "*"  # a page may read it
    assert health.json()["status"] == "ok"
    assert [got.status_code for got in translated] == [200, 200], [got.text for got in translated]
    logged = [r for r in kept.records if r.exc_info and r.exc_info[0] is ZeroDivisionError]
    assert len(logged) == 2 and path in logged[0].getMessage()
