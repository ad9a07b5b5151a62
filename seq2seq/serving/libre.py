"""LibreTranslate's HTTP API, so that its clients (``libretranslatepy``, ``deep-translator``,
the npm ``libretranslate`` package, browser extensions, bots, CMS plug-ins) work with
``seq2seq-serve`` unchanged.

Served under ``/libretranslate/`` (a client is given ``http://HOST:PORT/libretranslate/``),
or at the server root with ``--api libretranslate`` (the app's path middleware maps the root
onto ``PREFIX``: every route registered under ``PREFIX`` is at the root then, the file
routes too). Routes, methods, statuses and error texts are LibreTranslate's own:
``POST /translate``, ``POST /detect``, ``GET /languages``, ``GET /frontend/settings``,
``POST /suggest`` (403: suggestions are off), ``GET /spec``, ``GET /health``; a wrong method
gets 405. Parameters are read as LibreTranslate reads them: a JSON object body, or else form
fields (url-encoded or multipart) and query-string parameters (on a POST too). Models are
chosen by language pair (a multilingual model serves each of its directions); ``source:
"auto"`` detects among the served source languages (:mod:`langid`). Translation is
``seq2seq-translate``'s default decoding (``alternatives: N`` asks a beam of
``max(5, N + 1)`` for its N + 1 best). Errors are ``{"error": "..."}``: 400 bad request,
403 API key, 429 rate limit, 500 translation failure.
"""

from __future__ import annotations

import html
import json
import re
import unicodedata

from fastapi import APIRouter, FastAPI, HTTPException, Request
from fastapi.responses import RedirectResponse

from seq2seq.config import DecodingConfig
from seq2seq.directions import LANGUAGE_NAMES
from seq2seq.serving.api import DecodingOptions, Server
from seq2seq.serving.files import SUPPORTED, add_file_routes
from seq2seq.serving.keys import MISSING, KeyRefused
from seq2seq.serving.langid import LanguageDetector
from seq2seq.serving.limits import bounded
from seq2seq.serving.markup import libre_html
from seq2seq.serving.models import ServedModel

PREFIX = "/libretranslate"  # LibreTranslate's API, unless --api libretranslate puts it at /
OURS = "/seq2seq"  # our API and the explorer, with --api libretranslate
FRONTEND_TIMEOUT_MS = 500  # LibreTranslate's default: how long its page waits before translating
NAMES = LANGUAGE_NAMES  # for /languages (other codes are listed by code)


def bad(message: str) -> HTTPException:
    return HTTPException(400, f"Invalid request: {message}")


async def params(request: Request) -> dict:
    """The request's parameters, as LibreTranslate reads them: a JSON object body, or else
    form fields over query-string parameters (a form value wins). A form's ``q`` given more
    than once is a list of texts, as a JSON ``q`` list is; its line endings become ``\\n``
    (so that the character limit counts what the model gets)."""
    values: dict = dict(request.query_params)
    mime = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if mime == "application/json" or mime.endswith("+json"):
        try:
            body = json.loads(await request.body())
        except (ValueError, RecursionError):  # RecursionError: nested past Python's limit
            raise bad("the body is not valid JSON") from None
        if not isinstance(body, dict):
            raise bad("the JSON body must be an object of parameters")
        return {**values, **body}
    qs = request.query_params.getlist("q")
    if mime in ("application/x-www-form-urlencoded", "multipart/form-data"):
        form = await request.form()
        values.update({k: v for k, v in form.items() if isinstance(v, str)})
        qs = [q for q in form.getlist("q") if isinstance(q, str)] or qs
    qs = [q.replace("\r\n", "\n").replace("\r", "\n") for q in qs]
    if qs:
        values["q"] = qs if len(qs) > 1 else qs[0]
    return values


def _text(value, name: str) -> str:
    if not isinstance(value, str):
        raise bad(f"{name} must be a string")
    if any("\ud800" <= c <= "\udfff" for c in value):
        raise bad(f"{name} contains a lone UTF-16 surrogate (not valid Unicode)")
    return value


def _count(value, name: str, limit: int) -> int:
    """A whole number in [0, limit] (LibreTranslate: a negative one counts as 0)."""
    try:
        n = max(0, int(value))
    except (TypeError, ValueError, OverflowError):  # OverflowError: Infinity, 1e999999
        raise bad(f"{name} parameter is not a number") from None
    if n > limit:
        raise bad(f"{name} parameter must be <= {limit}")
    return n


def has_words(text: str) -> bool:
    """Whether ``text`` has a letter or a digit: emoji, punctuation and spaces alone are
    returned as they are, never given to the model (which would make words up)."""
    return any(unicodedata.category(c)[0] in "LN" for c in text)


class LibreTranslate:
    """The LibreTranslate endpoints over a :class:`Server`'s models."""

    def __init__(self, server: Server):
        self.server = server
        self.pairs: dict[tuple[str, str], ServedModel] = {}
        self.asked: dict[tuple[str, str], tuple[str, str]] = {}  # lowercased -> as the model spells it
        for served in server.models.values():  # the first model of a pair serves it
            for src, tgt in served.pairs:  # a multilingual model: each of its directions
                self.pairs.setdefault((src.lower(), tgt.lower()), served)
                self.asked.setdefault((src.lower(), tgt.lower()), (src, tgt))
        self.codes = list(dict.fromkeys(c for pair in self.pairs for c in pair))
        self.detector = LanguageDetector([src for src, _ in self.pairs])
        self.max_alternatives = min(server.cfg.max_beam, server.cfg.max_nbest) - 1
        self.at_root = server.cfg.api == "libretranslate"
        self.file_formats: list[str] = list(SUPPORTED)  # the extensions /translate_file takes
        origin = server.cfg.require_api_key_origin
        self.key_origin = re.compile(origin) if origin is not None else None

    # ------------------------------------------------------------ keys and languages
    def admit(self, request: Request, key) -> None:
        """LibreTranslate's key rule: a key given must be valid (403) and within its limit
        (429); without one, a request is served under the default limit per client address,
        unless ``--require-api-key-origin`` is set and its Origin does not match (400)."""
        keys = self.server.keys
        if keys is None:
            return
        try:
            if key:  # LibreTranslate: an empty or false key is no key
                keys.check(key)
            elif self.key_origin and not self.key_origin.match(request.headers.get("origin", "")):
                raise KeyRefused(400, MISSING)
            else:
                keys.check_anonymous(request.client.host if request.client else "")
        except KeyRefused as e:
            raise HTTPException(e.status, e.message) from None

    def languages(self) -> list[dict]:
        return [{"code": c, "name": NAMES.get(c, c),
                 "targets": sorted({t for s, t in self.pairs if s == c})} for c in self.codes]

    def _supported(self, *langs: str) -> None:
        for lang in langs:
            if lang not in self.codes:
                raise HTTPException(400, f"{lang} is not supported")

    def _check_pair(self, source: str, target: str) -> None:
        self._supported(source, target)
        if source != target and (source, target) not in self.pairs:  # same: the text itself
            raise HTTPException(400, f"{NAMES.get(target, target)} ({target}) is not available "
                                     f"as a target language from {NAMES.get(source, source)} ({source})")

    def _decoding(self, alternatives: int) -> DecodingConfig:
        if not alternatives:
            return self.server.decoding(DecodingOptions())
        k = alternatives + 1
        return self.server.decoding(DecodingOptions(beam=max(DecodingConfig().beam_size, k), nbest=k))

    # ------------------------------------------------------------ translation
    async def _translate(self, texts: list[str], source: str, target: str,
                         alternatives: int) -> list[tuple[str, list[str]]]:
        """(translation, alternatives) per text, for one language pair; plain text out, as
        LibreTranslate gives it (the model's ``&amp;`` is ``&``)."""
        out: list[tuple[str, list[str]]] = [(t, []) for t in texts]
        todo = [i for i, t in enumerate(texts) if has_words(t)] if source != target else []
        if not todo:
            return out
        try:
            served = self.pairs[(source, target)]
            src, tgt = self.asked[(source, target)]
            direction = {"source_lang": src, "target_lang": tgt} if served.multilingual else {}
            results = await self.server.run(served, self._decoding(alternatives),
                                            [texts[i] for i in todo], direction)
        except HTTPException as e:
            raise HTTPException(400 if e.status_code in (413, 422) else e.status_code,
                                e.detail, e.headers) from None
        for i, r in zip(todo, results):
            hyp = html.unescape(r.hyp)
            others = (html.unescape(h) for h, _ in r.nbest[1:])
            out[i] = (hyp, list(dict.fromkeys(h for h in others if h != hyp)))
        return out

    async def _translate_format(self, texts: list[str], source: str, target: str, fmt: str,
                                alternatives: int) -> list[tuple[str, list[str]]]:
        if fmt == "text":
            return await self._translate(texts, source, target, alternatives)
        return await libre_html(self, texts, source, target)

    async def translate(self, request: Request) -> dict:
        p = await params(request)
        self.admit(request, p.get("api_key"))
        q, source, target = p.get("q"), p.get("source"), p.get("target")
        for name, value in (("q", q), ("source", source), ("target", target)):
            if not value:
                raise bad(f"missing {name} parameter")
        alternatives = _count(p.get("alternatives", 0), "alternatives", self.max_alternatives)
        batch = isinstance(q, list)
        texts = [_text(t, "q") for t in q] if batch else [_text(q, "q")]
        self._check_texts(texts)
        source, target = _text(source, "source").lower(), _text(target, "target").lower()
        fmt = p.get("format") or "text"
        self._supported(*([target] if source == "auto" else [source, target]))
        if fmt not in ("text", "html"):
            raise HTTPException(400, f"{fmt} format is not supported")
        if source == "auto":
            detected = [self.detector.detect(t) if has_words(t) else (self.codes[0], 0.0)
                        for t in texts]
            work = self._translate_detected(texts, detected, target, fmt, alternatives)
        else:
            self._check_pair(source, target)
            work = self._translate_format(texts, source, target, fmt, alternatives)
        out = await bounded(request, work, self.server.cfg.request_timeout_s)
        answer: dict = {"translatedText": [o[0] for o in out] if batch else out[0][0]}
        if alternatives:
            answer["alternatives"] = [o[1] for o in out] if batch else out[0][1]
        if source == "auto":
            found = [{"confidence": c, "language": lang} for lang, c in detected]
            answer["detectedLanguage"] = found if batch else found[0]
        return answer

    async def _translate_detected(self, texts, detected, target, fmt, alternatives):
        """Texts grouped by detected language, each group with its own model."""
        out: list = [None] * len(texts)
        for lang in dict.fromkeys(lang for lang, _ in detected):
            self._check_pair(lang, target)
            where = [i for i, (d, _) in enumerate(detected) if d == lang]
            done = await self._translate_format([texts[i] for i in where], lang, target, fmt,
                                                alternatives)
            for i, o in zip(where, done):
                out[i] = o
        return out

    def _check_texts(self, texts: list[str]) -> None:
        """LibreTranslate's two limits, in its words: texts in a request, characters in one."""
        cfg = self.server.cfg
        if len(texts) > cfg.max_texts:
            raise bad(f"request ({len(texts)}) exceeds text limit ({cfg.max_texts})")
        for text in texts:
            if len(text) > cfg.max_text_chars:
                raise bad(f"request ({len(text)}) exceeds text limit ({cfg.max_text_chars})")

    async def detect(self, request: Request) -> list[dict]:
        """The served source languages, most likely first; for a list of texts, each
        language's confidence averaged over them (as LibreTranslate ranks a batch)."""
        p = await params(request)
        self.admit(request, p.get("api_key"))
        q = p.get("q")
        if not q:
            raise bad("missing q parameter")
        texts = [_text(t, "q") for t in q] if isinstance(q, list) else [_text(q, "q")]
        self._check_texts(texts)
        total: dict[str, float] = {}
        for text in texts:
            for lang, c in self.detector.rank(text):
                total[lang] = total.get(lang, 0.0) + c / len(texts)
        ranked = sorted(total.items(), key=lambda lc: -lc[1])
        return [{"confidence": round(c, 2), "language": lang} for lang, c in ranked]

    def settings(self) -> dict:
        """What LibreTranslate's own web page and some extensions ask first."""
        source = next(lang for lang in self.languages() if lang["targets"])
        target = source["targets"][0]
        keys = self.server.keys is not None
        return {"charLimit": self.server.cfg.max_text_chars,
                "frontendTimeout": FRONTEND_TIMEOUT_MS, "apiKeys": keys,
                "keyRequired": keys and self.key_origin is not None, "suggestions": False,
                "filesTranslation": bool(self.file_formats),
                "supportedFilesFormat": list(self.file_formats),
                "language": {"source": {"code": "auto", "name": "Auto Detect"},
                             "target": {"code": target, "name": NAMES.get(target, target)}}}

    def spec(self, request: Request) -> dict:
        """The OpenAPI schema of the LibreTranslate routes, with their paths as clients
        call them (relative to ``servers``: the API's base URL)."""
        full = request.app.openapi()  # every route, however it was included
        schema = {**full, "info": {"title": "LibreTranslate", "version": full["info"]["version"],
                                   "summary": "LibreTranslate's API, served by seq2seq-serve"}}
        schema["paths"] = {k.removeprefix(PREFIX): v for k, v in full.get("paths", {}).items()
                           if k.startswith(PREFIX + "/")}
        schema["servers"] = [{"url": "/" if self.at_root else PREFIX + "/"}]
        return schema


async def suggest() -> None:
    raise HTTPException(403, "Suggestions are disabled on this server.")


def add_routes(app: FastAPI, server: Server) -> LibreTranslate:
    """LibreTranslate's routes under ``PREFIX`` (routes added later under ``PREFIX``, such
    as file translation's, are served the same way: at the root with ``--api libretranslate``,
    with CORS and merged slashes)."""
    libre = LibreTranslate(server)
    app.state.libre = libre
    router = APIRouter(prefix=PREFIX, tags=["LibreTranslate"])
    add = router.add_api_route
    add("/translate", libre.translate, methods=["POST"],
        summary="Translate q (a string or a list) from source to target")
    add("/detect", libre.detect, methods=["POST"],
        summary="The served source languages, most likely first (q: a string or a list)")
    add("/languages", libre.languages, methods=["GET"],
        summary="Languages, each with the targets it translates into")
    add("/frontend/settings", libre.settings, methods=["GET"],
        summary="Limits and default languages, for LibreTranslate front-ends")
    add("/suggest", suggest, methods=["POST"], summary="Suggestions are off: 403")
    add("/spec", libre.spec, methods=["GET"], summary="This API's OpenAPI schema")
    add("/health", lambda: {"status": "ok"}, methods=["GET"], summary="Liveness")
    explorer = OURS + "/" if libre.at_root else "/"
    add("/", lambda: RedirectResponse(explorer), methods=["GET"], include_in_schema=False)
    app.state.on_shutdown.append(add_file_routes(router, libre).store.close)
    app.include_router(router)
    return libre
