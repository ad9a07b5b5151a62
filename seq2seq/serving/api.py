"""The HTTP API (FastAPI): ``/translate``, ``/attention``, ``/health``, ``/models``, and the
attention explorer at ``/`` (static files, no build step, no CDN).

Requests name a model (a name given at start-up, never a path) and decoding options with the
names and meaning of ``seq2seq-translate``'s flags (``beam``, ``nbest``, ``lenpen``, ...).
Bad requests get a 4xx with a one-line ``detail``: 404 unknown model, 413 too much text,
422 bad option values (including ``ServeConfig``'s limits). The model runs on the
``MicroBatcher``'s worker thread, never on the event loop.
"""

from __future__ import annotations

import argparse
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    FiniteFloat,
    StrictBool,
    StrictInt,
    field_validator,
)

from seq2seq.cli.translate import decoding_from_args
from seq2seq.config import DecodingConfig, ServeConfig
from seq2seq.decoding.translator import TranslationResult, Translator
from seq2seq.serving.batcher import MicroBatcher
from seq2seq.serving.models import ServedModel

STATIC = Path(__file__).with_name("static")


class DecodingOptions(BaseModel):
    """Decoding options as ``seq2seq-translate``'s flags; unset = ``DecodingConfig`` default."""

    model_config = ConfigDict(extra="forbid")

    # Strict: JSON true is not beam 1, nor "5" a beam of 5 (lax pydantic would take both).
    model: str | None = Field(None, description="a name from /models (default: the first)")
    beam: StrictInt | None = Field(None, description="beam size; 1 = greedy")
    nbest: StrictInt | None = None
    lenpen: FiniteFloat | None = None
    length_penalty: str | None = None
    max_len_a: FiniteFloat | None = Field(None, le=1000)
    max_len_b: StrictInt | None = Field(None, le=1_000_000)
    min_len: StrictInt | None = Field(None, le=1_000_000)
    no_repeat_ngram_size: StrictInt | None = Field(None, le=1_000_000)
    stopping: str | None = None
    patience: FiniteFloat | None = None
    sample: StrictBool = False
    temperature: FiniteFloat | None = None
    topk: StrictInt | None = Field(None, le=1_000_000)
    topp: FiniteFloat | None = None
    seed: StrictInt | None = Field(None, ge=0, le=2**63 - 1)

    @field_validator("lenpen", "max_len_a", "patience", "temperature", "topp", mode="before")
    @classmethod
    def _number_not_bool(cls, value):
        if isinstance(value, bool):  # JSON true/false would pass as 1.0/0.0
            raise ValueError("expected a number, got a boolean")
        return value


def _unicode(text: str) -> str:
    """JSON may carry lone UTF-16 surrogates ("\\ud800"), which are no text: refused, not
    passed on to the tokenizer (which raised a TypeError: a 500)."""
    if any("\ud800" <= c <= "\udfff" for c in text):
        raise ValueError("contains a lone UTF-16 surrogate (not valid Unicode)")
    return text


class TranslateRequest(DecodingOptions):
    texts: list[str]

    @field_validator("texts")
    @classmethod
    def _texts_are_unicode(cls, texts: list[str]) -> list[str]:
        for i, text in enumerate(texts):
            try:
                _unicode(text)
            except ValueError as e:
                raise ValueError(f"text {i} {e}") from None
        return texts


class AttentionRequest(DecodingOptions):
    text: str

    @field_validator("text")
    @classmethod
    def _text_is_unicode(cls, text: str) -> str:
        return _unicode(text)


# ---------------------------------------------------------------- request checks
def decoding_for(options: DecodingOptions, cfg: ServeConfig) -> DecodingConfig:
    """The request's ``DecodingConfig``, built exactly as ``seq2seq-translate`` builds it from
    flags, within the server's limits (``ValueError`` naming the option otherwise)."""
    fields = options.model_dump(exclude={"model", "beam", "texts", "text"})
    args = argparse.Namespace(beam_size=options.beam, max_tokens=cfg.max_batch_tokens, **fields)
    decoding = decoding_from_args(args)
    if decoding.method == "beam" and decoding.beam_size > cfg.max_beam:
        raise ValueError(f"beam {decoding.beam_size}: this server allows at most {cfg.max_beam}")
    if decoding.nbest > cfg.max_nbest:
        raise ValueError(f"nbest {decoding.nbest}: this server allows at most {cfg.max_nbest}")
    return decoding


def source_tokens(served: ServedModel, texts: list[str], cfg: ServeConfig) -> int:
    """Source tokens of ``texts`` (+ EOS each); 413 for a text over the limits."""
    limit = served.translator.model.arch.max_positions - 1
    for i, text in enumerate(texts):
        if len(text) > cfg.max_text_chars:
            raise HTTPException(413, f"text {i} has {len(text)} characters; this server takes at "
                                     f"most {cfg.max_text_chars}: split it into sentences")
    ids = served.translator.tokenizers.src.encode(texts) if texts else []
    for i, toks in enumerate(ids):
        if len(toks) > limit:
            raise HTTPException(413, f"text {i} has {len(toks)} subword tokens; model "
                                     f"{served.name!r} takes at most {limit}: split it into sentences")
    return sum(len(t) + 1 for t in ids)


# ---------------------------------------------------------------- the work (worker thread)
def translate_texts(served: ServedModel, decoding: DecodingConfig, texts: list[str],
                    need_attention: bool = False) -> list[TranslationResult]:
    base = served.translator
    return Translator(base.model, base.tokenizers, decoding).translate_full(texts, need_attention)


def result_json(r: TranslationResult) -> dict:
    """The fields of ``seq2seq-translate --output-format jsonl``, plus the total log-prob."""
    return {"src": r.src, "hyp": r.hyp, "score": r.score, "log_prob": r.log_prob,
            "confidence": r.confidence, "nbest": [{"hyp": h, "score": s} for h, s in r.nbest]}


def attention_json(r: TranslationResult) -> dict:
    """Pieces and every attention weight of the 1-best, per kind, layer and head: lists
    ``[layer][head][query][key]``, exactly the weights ``--plot-attention`` draws.
    Encoder self: source x source; decoder self: target x decoder input (``<s>`` + target
    minus its last piece; causal); cross: target x source."""
    a = r.attention
    assert a is not None

    def heads(layers):  # each (1, H, L, S) -> [H][L][S]
        return [w[0].float().cpu().tolist() for w in layers]

    return {**result_json(r), "src_pieces": r.src_pieces, "tgt_pieces": r.tgt_pieces,
            "tgt_in_pieces": ["<s>", *r.tgt_pieces[:-1]],
            "attention": {"encoder_self": heads(a.encoder_self),
                          "decoder_self": heads(a.decoder_self),
                          "cross": heads(a.decoder_cross)}}


# ---------------------------------------------------------------- the app
class Server:
    """The models, limits and batcher behind one app (``app.state.server``)."""

    def __init__(self, models: dict[str, ServedModel], cfg: ServeConfig):
        if not models:
            raise ValueError("seq2seq-serve needs at least one model (-c CHECKPOINT)")
        self.models, self.cfg = models, cfg
        self.batcher = MicroBatcher(cfg.window_ms / 1000.0, cfg.max_batch_tokens)
        self.default = next(iter(models))

    def model(self, name: str | None) -> ServedModel:
        served = self.models.get(self.default if name is None else name)
        if served is None:
            raise HTTPException(404, f"unknown model {name!r}; available: {sorted(self.models)}")
        return served

    def decoding(self, options: DecodingOptions) -> DecodingConfig:
        try:
            return decoding_for(options, self.cfg)
        except ValueError as e:
            raise HTTPException(422, " ".join(str(e).split())) from None

    async def translate(self, req: TranslateRequest) -> dict:
        served, decoding = self.model(req.model), self.decoding(req)
        if len(req.texts) > self.cfg.max_texts:
            raise HTTPException(413, f"{len(req.texts)} texts; this server takes at most "
                                     f"{self.cfg.max_texts} per request")
        tokens = source_tokens(served, req.texts, self.cfg)
        if not req.texts:
            return {"model": served.name, "results": []}
        # Sampling draws depend on the batch: a sampled request never shares a call.
        key = object() if decoding.method == "sample" else (served.name, repr(decoding))
        work = partial(translate_texts, served, decoding)
        results = await self.batcher.submit(key, req.texts, tokens, work)
        return {"model": served.name, "results": [result_json(r) for r in results]}

    async def attention(self, req: AttentionRequest) -> dict:
        served, decoding = self.model(req.model), self.decoding(req)
        source_tokens(served, [req.text], self.cfg)
        work = partial(translate_texts, served, decoding, need_attention=True)
        result = (await self.batcher.call(work, [req.text]))[0]
        if result.attention is None:
            raise HTTPException(422, "nothing to translate: the text is blank (or has no pieces)")
        return {"model": served.name, **attention_json(result)}

    def models_json(self) -> list[dict]:
        return [m.describe() for m in self.models.values()]

    def health(self) -> dict:
        b = self.batcher
        return {"status": "ok", "models": list(self.models), "requests": b.requests,
                "model_calls": b.model_calls}


def create_app(models: dict[str, ServedModel], cfg: ServeConfig | None = None) -> FastAPI:
    """The FastAPI app serving ``models`` (the first is the default)."""
    server = Server(models, cfg or ServeConfig())

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        await server.batcher.start()
        try:
            yield
        finally:
            await server.batcher.stop()

    app = FastAPI(title="seq2seq", summary="Translation and attention weights of seq2seq models",
                  lifespan=lifespan)
    app.state.server = server
    _routes(app, server)
    return app


def _routes(app: FastAPI, server: Server) -> None:
    max_body = server.cfg.max_texts * server.cfg.max_text_chars * 8 + 65536  # \uXXXX escapes

    @app.middleware("http")
    async def refuse_huge_bodies(request: Request, call_next):
        size = request.headers.get("content-length", "0")
        if not size.isdigit() or int(size) > max_body:
            return JSONResponse({"detail": f"request body over {max_body} bytes"}, status_code=413)
        return await call_next(request)

    @app.exception_handler(RequestValidationError)
    async def one_line(_request: Request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI's default echoes the input, which may not even be JSON (NaN): name the field
        problems = ["/".join(str(p) for p in e["loc"][1:]) + ": " + e["msg"] for e in exc.errors()]
        return JSONResponse({"detail": "; ".join(problems)}, status_code=422)

    app.post("/translate", summary="Translate texts (one result per text)")(server.translate)
    app.post("/attention", summary="Pieces and attention weights of one translation")(server.attention)
    app.get("/health", summary="Liveness, models, request and model-call counters")(server.health)
    app.get("/models", summary="The models this server holds (the first is the default)")(
        server.models_json)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/", include_in_schema=False)
    def explorer() -> FileResponse:
        return FileResponse(STATIC / "index.html")
