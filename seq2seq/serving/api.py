"""Our own HTTP API's requests and their work: ``/translate``, ``/attention``, ``/health``,
``/models`` (the app itself is put together in :mod:`seq2seq.serving.app`).

Requests name a model (a name given at start-up, never a path) and decoding options with the
names and meaning of ``seq2seq-translate``'s flags (``beam``, ``nbest``, ``lenpen``, ...).
A multilingual model is told the direction by ``target_lang`` (and ``source_lang``, checked
when given); ``/models`` lists each model's directions.
Bad requests get a 4xx with a one-line ``detail``: 404 unknown model, 413 too much text,
422 bad option values (including ``ServeConfig``'s limits) and directions the model lacks.
The model runs on the ``MicroBatcher``'s worker thread, never on the event loop.
"""

from __future__ import annotations

import os
from functools import partial

import torch
from fastapi import HTTPException, Request
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    FiniteFloat,
    StrictBool,
    StrictInt,
    field_validator,
)

from seq2seq.config import DecodingConfig, ServeConfig
from seq2seq.config.decoding import decoding_from_options, options_of
from seq2seq.directions import DirectionError, tag_piece
from seq2seq.fields import render
from seq2seq.serving.batcher import MicroBatcher
from seq2seq.serving.keys import ApiKeys, KeyRefused
from seq2seq.serving.limits import bounded, check_cost
from seq2seq.serving.models import ServedModel
from seq2seq.serving.offload import DocumentWork
from seq2seq.translation.result import TranslationResult
from seq2seq.translation.translator import Translator


class DecodingOptions(BaseModel):
    """Decoding options as ``seq2seq-translate``'s flags; unset = ``DecodingConfig`` default."""

    model_config = ConfigDict(extra="forbid")

    # Strict: JSON true is not beam 1, nor "5" a beam of 5 (lax pydantic would take both).
    model: str | None = Field(None, description="a name from /models (default: the first)")
    target_lang: str | None = Field(None, description="the language to translate into: a "
                                    "multilingual model's direction (one of its /models directions)")
    source_lang: str | None = Field(None, description="the input's language, checked against "
                                    "the model's directions")
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
    no_split: StrictBool = Field(False, description="translate each text as one sentence "
                                 "(default: cut into sentences, translated, put back together)")
    no_restore_numbers: StrictBool = Field(False, description="the model's own numbers (default: "
                                           "numbers it changed in a sentence put back as the "
                                           "source wrote them)")

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
# The request field of each option (a DecodingConfig field, or another name a message
# gives), where it is not the field's own name: seq2seq-translate's flags, with underscores.
JSON_NAMES = {"method": "sample", "beam_size": "beam", "alpha": "lenpen", "top_k": "topk",
              "top_p": "topp", "split_sentences": "no_split",
              "restore_numbers": "no_restore_numbers"}
SERVER_OPTIONS = ("max_tokens",)  # the server's (ServeConfig.max_batch_tokens), not a request's


def json_name(field: str) -> str:
    """The request field that sets ``field``: how the API says what the library calls it."""
    return JSON_NAMES.get(field, field)


def api_message(e: BaseException) -> str:
    """An error in the request's own words: options named by their request fields."""
    return " ".join(render(e, json_name).split())


def decoding_for(options: DecodingOptions, cfg: ServeConfig) -> DecodingConfig:
    """The request's ``DecodingConfig``, built exactly as ``seq2seq-translate`` builds it from
    flags, within the server's limits (``ValueError`` naming the option otherwise)."""
    given = {f.name: getattr(options, json_name(f.name), None) for f in options_of(DecodingConfig)
             if f.name not in SERVER_OPTIONS}
    given["method"] = "sample" if options.sample else None  # flags alone: true or not given
    given["split_sentences"] = False if options.no_split else None
    given["restore_numbers"] = False if options.no_restore_numbers else None
    decoding = decoding_from_options({**given, "max_tokens": cfg.max_batch_tokens})
    if decoding.method == "beam" and decoding.beam_size > cfg.max_beam:
        raise ValueError(f"beam {decoding.beam_size}: this server allows at most {cfg.max_beam}")
    if decoding.nbest > cfg.max_nbest:
        raise ValueError(f"nbest {decoding.nbest}: this server allows at most {cfg.max_nbest}")
    return decoding


def source_tokens(served: ServedModel, texts: list[str], cfg: ServeConfig) -> list[int]:
    """Source tokens of each text (+ EOS); 413 for a text over the limits."""
    limit = served.translator.model.arch.max_positions - 1 - served.source_tag_tokens
    for i, text in enumerate(texts):
        if len(text) > cfg.max_text_chars:
            raise HTTPException(413, f"text {i} has {len(text)} characters; this server takes at "
                                     f"most {cfg.max_text_chars}: split it into sentences")
    ids = served.translator.tokenizers.src.encode(texts) if texts else []
    for i, toks in enumerate(ids):
        if len(toks) > limit:
            raise HTTPException(413, f"text {i} has {len(toks)} subword tokens; model "
                                     f"{served.name!r} takes at most {limit}: split it into sentences")
    return [len(t) + 1 for t in ids]


# ---------------------------------------------------------------- the work (worker thread)
# A model call of one text on the worker thread runs torch on one thread: two were 2.5x slower
# there (one test sentence, p50 50 vs 19 ms on a 2-core AMD EPYC; on the main thread two are
# not slower), and one text leaves little to share out. Merged calls keep torch's count.
LONE_TEXT_THREADS = 1


def translate_texts(served: ServedModel, decoding: DecodingConfig, direction: dict,
                    texts: list[str], need_attention: bool = False,
                    lone_text_threads: int | None = None) -> list[TranslationResult]:
    """``texts`` through the served model (on the batcher's worker thread); with
    ``lone_text_threads``, a call of one text runs torch on that many threads."""
    base = served.translator
    translator = Translator(base.model, base.tokenizers, decoding, None, base.directions, base.pair,
                            base.calibration)
    threads = lone_text_threads if len(texts) == 1 else None
    if threads is None:
        return translator.translate_full(texts, need_attention, **direction)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return translator.translate_full(texts, need_attention, **direction)
    finally:
        torch.set_num_threads(before)


def result_json(r: TranslationResult) -> dict:
    """The fields of ``seq2seq-translate --output-format jsonl``, plus the total log-prob;
    ``flags``: "skipped" (far fewer words than the source), "numbers" (a number of the
    source missing), "truncated" (a cut source), "cut" (a clause cut at words), "unsure"
    (confidence below the model's calibrated threshold: ``/models``' ``unsure_below``)."""
    return {"src": r.src, "hyp": r.hyp, "score": r.score, "log_prob": r.log_prob,
            "confidence": r.confidence, "flags": r.flags,
            "nbest": [{"hyp": h, "score": s} for h, s in r.nbest]}


def attention_json(r: TranslationResult, first: str = "<s>") -> dict:
    """Pieces and every attention weight of the 1-best, per kind, layer and head: lists
    ``[layer][head][query][key]``, exactly the weights ``--plot-attention`` draws.
    Encoder self: source x source; decoder self: target x decoder input (``<s>`` + target
    minus its last piece; causal; ``first``: a decoder-tag model's tag instead of ``<s>``);
    cross: target x source."""
    a = r.attention
    assert a is not None

    def heads(layers):  # each (1, H, L, S) -> [H][L][S]
        return [w[0].float().cpu().tolist() for w in layers]

    return {**result_json(r), "src_pieces": r.src_pieces, "tgt_pieces": r.tgt_pieces,
            "tgt_in_pieces": [first, *r.tgt_pieces[:-1]],
            "attention": {"encoder_self": heads(a.encoder_self),
                          "decoder_self": heads(a.decoder_self),
                          "cross": heads(a.decoder_cross)}}


# ---------------------------------------------------------------- the server
class Server:
    """The models, limits, keys, batcher and document workers behind one app
    (``app.state.server``)."""

    def __init__(self, models: dict[str, ServedModel], cfg: ServeConfig):
        if not models:
            raise ValueError("seq2seq-serve needs at least one model (-m CHECKPOINT)")
        self.models, self.cfg = models, cfg
        self.batcher = MicroBatcher(cfg.window_ms / 1000.0, cfg.call_work, cfg.request_timeout_s, cfg.max_queue)
        self.documents = DocumentWork()
        self.default = next(iter(models))
        self.keys = ApiKeys.load(cfg.api_keys, cfg.req_limit) if cfg.api_keys else None

    def model(self, name: str | None) -> ServedModel:
        served = self.models.get(self.default if name is None else name)
        if served is None:
            raise HTTPException(404, f"unknown model {name!r}; available: {sorted(self.models)}")
        return served

    def direction(self, served: ServedModel, options: DecodingOptions) -> dict:
        """The request's direction, as ``Translator.translate_full`` takes it; 422 naming
        the model's directions when it has no such direction."""
        direction = {k: getattr(options, k) for k in DIRECTION}
        try:
            served.translator.tag_for(**direction)
        except DirectionError as e:
            # in the request's words: "name the target language (target_lang)", not the flag
            raise HTTPException(422, f"model {served.name!r}: {api_message(e)}") from None
        return direction

    def decoding(self, options: DecodingOptions) -> DecodingConfig:
        try:
            return decoding_for(options, self.cfg)
        except ValueError as e:
            raise HTTPException(422, api_message(e)) from None

    def authorize(self, key: str | None) -> None:
        """Nothing without ``--api-keys``; else 403 (no or unknown key) or 429 (over its limit)."""
        if self.keys is not None:
            try:
                self.keys.check(key)
            except KeyRefused as e:
                raise HTTPException(e.status, e.message) from None

    async def run(self, served: ServedModel, decoding: DecodingConfig, texts: list[str],
                  direction: dict | None = None) -> list[TranslationResult]:
        """``texts`` translated on the batcher in ``direction`` (``target_lang``,
        ``source_lang``: checked by :meth:`direction`), within the server's limits."""
        direction = direction or {}
        if len(texts) > self.cfg.max_texts:
            raise HTTPException(413, f"{len(texts)} texts; this server takes at most "
                                     f"{self.cfg.max_texts} per request")
        tokens = source_tokens(served, texts, self.cfg)
        costs = check_cost(tokens, decoding, served.translator.model.arch, self.cfg)
        # Sampling draws depend on the batch: a sampled request never shares a call.
        key = object() if decoding.method == "sample" else (
            served.name, repr(decoding), tuple(sorted(direction.items())))
        # --threads given: the user's count for every call
        lone = LONE_TEXT_THREADS if self.cfg.threads is None else None
        work = partial(translate_texts, served, decoding, direction, lone_text_threads=lone)
        return await self.batcher.submit(key, texts, costs, work)

    async def translate(self, req: TranslateRequest, request: Request) -> dict:
        served, decoding = self.model(req.model), self.decoding(req)
        direction = self.direction(served, req)
        results = await bounded(request, self.run(served, decoding, req.texts, direction),
                                self.cfg.request_timeout_s)
        return {"model": served.name, "results": [result_json(r) for r in results]}

    async def attention(self, req: AttentionRequest, request: Request) -> dict:
        served, decoding = self.model(req.model), self.decoding(req)
        direction = self.direction(served, req)
        tokens = source_tokens(served, [req.text], self.cfg)
        check_cost(tokens, decoding, served.translator.model.arch, self.cfg, attention=True)
        work = partial(translate_texts, served, decoding, direction, need_attention=True)
        results = await bounded(request, self.batcher.call(work, [req.text]),
                                self.cfg.request_timeout_s)
        if results[0].attention is None:
            raise HTTPException(422, "nothing to translate: the text is blank (or has no pieces)")
        return {"model": served.name, **attention_json(results[0], first_piece(served, direction))}

    def models_json(self) -> list[dict]:
        return [m.describe() for m in self.models.values()]

    def health(self) -> dict:
        b = self.batcher
        d = self.documents
        return {"status": "ok", "models": list(self.models), "requests": b.requests,
                "model_calls": b.model_calls, "rss_mb": rss_mb(),
                "documents": {"running": d.running, "started": d.started, "stopped": d.stopped}}


DIRECTION = ("target_lang", "source_lang")  # request fields = Translator keywords


def first_piece(served: ServedModel, direction: dict) -> str:
    """The decoder's first input: ``<s>``, or a decoder-tag model's target-language tag."""
    d = served.translator.directions
    if d is None or d.tag_position != "decoder":
        return "<s>"
    return tag_piece(d.resolve(direction.get("source_lang"), direction.get("target_lang"))[1])


def rss_mb() -> float | None:
    """This process's resident memory now (Linux; ``None`` elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)
