"""LibreTranslate's HTTP API, so that its clients (``libretranslatepy``, ``deep-translator``,
browser extensions, bots, CMS plug-ins) work with ``seq2seq-serve`` unchanged.

Served under ``/libretranslate/`` (our own ``POST /translate`` keeps its path): a client is
given ``http://HOST:PORT/libretranslate/`` as its URL. Endpoints: ``POST /translate``,
``POST /detect``, ``GET /languages``, ``GET /frontend/settings``. Parameters are read as
LibreTranslate reads them: a JSON object body, or else form fields (url-encoded or
multipart) and query-string parameters (on a POST too). Models are chosen by language
pair (a multilingual model serves each of its directions); ``source: "auto"`` detects among
the served source languages (:mod:`langid`).
Translation is ``seq2seq-translate``'s default decoding (``alternatives: N`` asks a beam of
``max(5, N + 1)`` for its N + 1 best). Errors are ``{"error": "..."}`` with LibreTranslate's
statuses: 400 bad request, 403 API key, 429 rate limit, 500 translation failure.
"""

from __future__ import annotations

import json

from fastapi import APIRouter, FastAPI, HTTPException, Request

from seq2seq.config import DecodingConfig
from seq2seq.serving.api import DecodingOptions, Server
from seq2seq.serving.files import SUPPORTED, add_file_routes
from seq2seq.serving.langid import LanguageDetector
from seq2seq.serving.limits import bounded
from seq2seq.serving.markup import libre_html
from seq2seq.serving.models import ServedModel

PREFIX = "/libretranslate"
NAMES = {  # ISO 639-1 -> English name, for /languages (other codes are listed by code)
    "ar": "Arabic", "cs": "Czech", "da": "Danish", "de": "German", "el": "Greek",
    "en": "English", "es": "Spanish", "fi": "Finnish", "fr": "French", "hi": "Hindi",
    "hu": "Hungarian", "it": "Italian", "ja": "Japanese", "ko": "Korean", "nl": "Dutch",
    "pl": "Polish", "pt": "Portuguese", "ro": "Romanian", "ru": "Russian", "sv": "Swedish",
    "tr": "Turkish", "uk": "Ukrainian", "zh": "Chinese",
}


def bad(message: str) -> HTTPException:
    return HTTPException(400, f"Invalid request: {message}")


async def params(request: Request) -> dict:
    """The request's parameters, as LibreTranslate reads them: a JSON object body, or else
    form fields over query-string parameters (a form value wins)."""
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
    if mime in ("application/x-www-form-urlencoded", "multipart/form-data"):
        form = await request.form()
        values.update({k: v for k, v in form.items() if isinstance(v, str)})
    return values


def _text(value, name: str) -> str:
    if not isinstance(value, str):
        raise bad(f"{name} must be a string")
    if any("\ud800" <= c <= "\udfff" for c in value):
        raise bad(f"{name} contains a lone UTF-16 surrogate (not valid Unicode)")
    return value


def _count(value, name: str, limit: int) -> int:
    try:
        n = max(0, int(value))
    except (TypeError, ValueError):
        raise bad(f"{name} parameter is not a number") from None
    if n > limit:
        raise bad(f"{name} parameter must be <= {limit}")
    return n


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
        self.detector = LanguageDetector([src for src, _ in self.pairs])
        self.max_alternatives = min(server.cfg.max_beam, server.cfg.max_nbest) - 1

    # ------------------------------------------------------------ language checks
    def languages(self) -> list[dict]:
        codes = list(dict.fromkeys(c for pair in self.pairs for c in pair))
        return [{"code": c, "name": NAMES.get(c, c),
                 "targets": sorted({t for s, t in self.pairs if s == c})} for c in codes]

    def _check_pair(self, source: str, target: str) -> None:
        if source not in {c for pair in self.pairs for c in pair}:
            raise HTTPException(400, f"{source} is not supported")
        if source == target:
            return  # nothing to do: the text is its own translation
        if (source, target) not in self.pairs:
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
        """(translation, alternatives) per text, for one language pair."""
        if source == target or not texts:
            return [(t, []) for t in texts]
        try:
            served = self.pairs[(source, target)]
            src, tgt = self.asked[(source, target)]
            direction = {"source_lang": src, "target_lang": tgt} if served.multilingual else {}
            results = await self.server.run(served, self._decoding(alternatives), texts, direction)
        except HTTPException as e:
            raise HTTPException(400 if e.status_code in (413, 422) else e.status_code,
                                e.detail) from None
        return [(r.hyp, list(dict.fromkeys(h for h, _ in r.nbest[1:] if h != r.hyp)))
                for r in results]

    async def _translate_format(self, texts: list[str], source: str, target: str, fmt: str,
                                alternatives: int) -> list[tuple[str, list[str]]]:
        if fmt == "text":
            return await self._translate(texts, source, target, alternatives)
        return await libre_html(self, texts, source, target)

    async def translate(self, request: Request) -> dict:
        p = await params(request)
        self.server.authorize(p.get("api_key"))
        q, source, target = p.get("q"), p.get("source"), p.get("target")
        for name, value in (("q", q), ("source", source), ("target", target)):
            if not value:
                raise bad(f"missing {name} parameter")
        batch = isinstance(q, list)
        texts = [_text(t, "q") for t in q] if batch else [_text(q, "q")]
        source, target = _text(source, "source").lower(), _text(target, "target").lower()
        fmt = p.get("format") or "text"
        if fmt not in ("text", "html"):
            raise HTTPException(400, f"{fmt} format is not supported")
        alternatives = _count(p.get("alternatives", 0), "alternatives", self.max_alternatives)
        self._check_texts(texts)
        if source == "auto":
            detected = [self.detector.detect(t) for t in texts]
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
        cfg = self.server.cfg
        if len(texts) > cfg.max_texts:
            raise bad(f"request ({len(texts)} texts) exceeds text limit ({cfg.max_texts})")
        for i, text in enumerate(texts):
            if len(text) > cfg.max_text_chars:
                raise bad(f"request (text {i}: {len(text)} characters) exceeds text limit "
                          f"({cfg.max_text_chars})")

    async def detect(self, request: Request) -> list[dict]:
        p = await params(request)
        self.server.authorize(p.get("api_key"))
        q = p.get("q")
        if not q:
            raise bad("missing q parameter")
        self._check_texts([_text(q, "q")])
        return [{"confidence": c, "language": lang} for lang, c in self.detector.rank(q)]

    def settings(self) -> dict:
        """What LibreTranslate's own web page and some extensions ask first."""
        langs = self.languages()
        source = next(lang for lang in langs if lang["targets"])
        target = next(c for c in [*source["targets"], source["code"]])
        keys = self.server.keys is not None
        return {"charLimit": self.server.cfg.max_text_chars, "apiKeys": keys, "keyRequired": keys,
                "suggestions": False, "filesTranslation": True, "supportedFilesFormat": SUPPORTED,
                "language": {"source": {"code": source["code"], "name": source["name"]},
                             "target": {"code": target, "name": NAMES.get(target, target)}}}


def add_routes(app: FastAPI, server: Server) -> LibreTranslate:
    libre = LibreTranslate(server)
    router = APIRouter(prefix=PREFIX, tags=["LibreTranslate"])
    router.add_api_route("/translate", libre.translate, methods=["POST"],
                         summary="Translate q (a string or a list) from source to target")
    router.add_api_route("/detect", libre.detect, methods=["POST"],
                         summary="The served source languages, most likely first")
    router.add_api_route("/languages", libre.languages, methods=["GET", "POST"],
                         summary="Languages, each with the targets it translates into")
    router.add_api_route("/frontend/settings", libre.settings, methods=["GET"],
                         summary="Limits and default languages, for LibreTranslate front-ends")
    add_file_routes(router, libre)
    app.include_router(router)
    return libre
