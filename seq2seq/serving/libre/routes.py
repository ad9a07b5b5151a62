"""LibreTranslate's routes over a :class:`Server`'s models. Models are chosen by language
pair (a multilingual model serves each of its directions: :meth:`LibreTranslate.route`);
``source: "auto"`` detects among the served source languages (:mod:`langid`). Translation is
``seq2seq-translate``'s default decoding (``alternatives: N`` asks a beam of
``max(5, N + 1)`` for its N + 1 best); ``format: "html"`` translates pages through
:mod:`seq2seq.serving.markup`."""

from __future__ import annotations

import html
import re
import unicodedata

from fastapi import APIRouter, FastAPI, HTTPException, Request
from fastapi.responses import RedirectResponse

from seq2seq.config import DecodingConfig
from seq2seq.directions import LANGUAGE_NAMES
from seq2seq.serving.api import DecodingOptions, Server
from seq2seq.serving.keys import KeyRefused
from seq2seq.serving.langid import LanguageDetector
from seq2seq.serving.libre import (
    MISSING,
    OURS,
    PREFIX,
    SUGGESTIONS_OFF,
    bad,
    limits_as_400,
    unsupported,
)
from seq2seq.serving.libre.fields import count, params, required, text, texts
from seq2seq.serving.libre.files import SUPPORTED, add_file_routes
from seq2seq.serving.limits import bounded
from seq2seq.serving.markup import translate_pages
from seq2seq.serving.models import ServedModel

FRONTEND_TIMEOUT_MS = 500  # LibreTranslate's default: how long its page waits before translating
NAMES = LANGUAGE_NAMES  # for /languages (other codes are listed by code)


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
                raise unsupported(lang)

    def check_pair(self, source: str, target: str) -> None:
        """A 400 unless some model translates ``source`` (lowercased) into ``target``, or
        they are the same language (the text itself is its translation)."""
        self._supported(source, target)
        if source != target and (source, target) not in self.pairs:
            raise HTTPException(400, f"{NAMES.get(target, target)} ({target}) is not available "
                                     f"as a target language from {NAMES.get(source, source)} ({source})")

    def route(self, source: str, target: str) -> tuple[ServedModel, dict]:
        """The model serving a checked pair, and the direction to ask of it (``{}`` for a
        model of one direction)."""
        served = self.pairs[(source, target)]
        src, tgt = self.asked[(source, target)]
        return served, {"source_lang": src, "target_lang": tgt} if served.multilingual else {}

    def decoding(self, alternatives: int = 0) -> DecodingConfig:
        """The default decoding; with alternatives, a beam wide enough for them."""
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
        served, direction = self.route(source, target)
        with limits_as_400():
            results = await self.server.run(served, self.decoding(alternatives),
                                            [texts[i] for i in todo], direction)
        for i, r in zip(todo, results):
            hyp = html.unescape(r.hyp)
            others = (html.unescape(h) for h, _ in r.nbest[1:])
            out[i] = (hyp, list(dict.fromkeys(h for h in others if h != hyp)))
        return out

    async def _translate_html(self, pages: list[str], source: str,
                              target: str) -> list[tuple[str, list]]:
        """``format: "html"``: ``(page, [])`` per page (no alternatives)."""
        if source == target or not pages:
            return [(p, []) for p in pages]
        served, direction = self.route(source, target)
        with limits_as_400():
            done = await translate_pages(self.server, served, self.decoding(), pages,
                                         direction, source)
        return [(p, []) for p in done]

    async def _translate_format(self, texts: list[str], source: str, target: str, fmt: str,
                                alternatives: int) -> list[tuple[str, list[str]]]:
        if fmt == "text":
            return await self._translate(texts, source, target, alternatives)
        return await self._translate_html(texts, source, target)

    async def translate(self, request: Request) -> dict:
        p = await params(request)
        self.admit(request, p.get("api_key"))
        required(p, "q", "source", "target")
        alternatives = count(p.get("alternatives", 0), "alternatives", self.max_alternatives)
        batch = isinstance(p["q"], list)
        q = texts(p["q"])
        self._check_texts(q)
        source, target = text(p["source"], "source").lower(), text(p["target"], "target").lower()
        fmt = p.get("format") or "text"
        self._supported(*([target] if source == "auto" else [source, target]))
        if fmt not in ("text", "html"):
            raise unsupported(f"{fmt} format")
        if source == "auto":
            detected = [self.detector.detect(t) if has_words(t) else (self.codes[0], 0.0)
                        for t in q]
            work = self._translate_detected(q, detected, target, fmt, alternatives)
        else:
            self.check_pair(source, target)
            work = self._translate_format(q, source, target, fmt, alternatives)
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
            self.check_pair(lang, target)
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
        for t in texts:
            if len(t) > cfg.max_text_chars:
                raise bad(f"request ({len(t)}) exceeds text limit ({cfg.max_text_chars})")

    async def detect(self, request: Request) -> list[dict]:
        """The served source languages, most likely first; for a list of texts, each
        language's confidence averaged over them (as LibreTranslate ranks a batch)."""
        p = await params(request)
        self.admit(request, p.get("api_key"))
        required(p, "q")
        q = texts(p["q"])
        self._check_texts(q)
        total: dict[str, float] = {}
        for t in q:
            for lang, c in self.detector.rank(t):
                total[lang] = total.get(lang, 0.0) + c / len(q)
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
    raise HTTPException(403, SUGGESTIONS_OFF)


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
