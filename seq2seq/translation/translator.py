"""``Translator``: texts in, texts out (with scores, n-best lists and attention on request).

Used by the CLI, evaluation and validation during training. Policies:
- Sources are packed by length into batches of at most ``decoding.max_tokens`` padded
  source tokens (``seq2seq.data.batch.pack``, the rule training batches follow too),
  longest batch first; results come back in input order.
- Each text is cut into sentences and put back together (``paragraphs``; off with
  ``decoding.split_sentences = False``); what is not language (list markers, numbers alone,
  symbols, URLs: ``passthrough``) comes back as it is, never sent to the model; a link in
  mid-sentence is cut out of it and put back by the alignment (``alignment.put_back``).
- Empty or whitespace-only lines translate to ``""`` without a model call (so does a line
  whose text the tokenizer reduces to nothing).
- An output with far fewer words than its source is flagged ``"skipped"``, one missing a
  number of its source ``"numbers"``, a source cut to fit the model ``"truncated"``, an
  output whose confidence is below ``unsure_below`` (the checkpoint's calibrated
  threshold, ``seq2seq-calibrate``) ``"unsure"`` (``TranslationResult.flags``).
- A source longer than the model accepts is truncated to ``max_positions - 1`` tokens, with
  one warning per call naming how many lines were cut; it never crashes.
- Control characters and emoji go through SentencePiece like any text (unknown: ``<unk>``).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

import seq2seq.runtime as runtime
from seq2seq.checkpoint import build_model, calibration_of, load_model, shortlist_of
from seq2seq.config import DecodingConfig
from seq2seq.config.decoding import ComputeType, load_config
from seq2seq.data.batch import collate_src, token_batches
from seq2seq.data.tokenizer import TokenizerPair
from seq2seq.decoding import compiled_greedy
from seq2seq.decoding.ensemble import Ensemble
from seq2seq.decoding.rules import length_limits, truncate_source
from seq2seq.decoding.search import search
from seq2seq.directions import DirectionError, Directions, directions_of, tag_piece
from seq2seq.fields import FieldError, FieldWarning
from seq2seq.model import Seq2Seq
from seq2seq.model.inference import compute
from seq2seq.model.inference.shortlist import Shortlist
from seq2seq.model.members import Members
from seq2seq.translation import paragraphs, passthrough
from seq2seq.translation.alignment import put_back
from seq2seq.translation.numbers import restore_numbers
from seq2seq.translation.result import TranslationResult, confidence, output_flags


def _translates(t: Translator) -> str:
    """What a model translates, as the ensemble check compares and names it: its pair, or
    a multilingual model's directions and where its tags go."""
    if t.directions is not None:
        return f"{', '.join(t.directions.names())} (tags on the {t.directions.tag_position} side)"
    return t.direction_names[0] if t.direction_names else "an unrecorded pair"


def check_ensemble(names: list[str], members: list[Translator]) -> None:
    """Ensemble members read and write the same text: the same tokenizers (fingerprints)
    and direction(s) as the first (``Ensemble`` checks the model side)."""
    first = members[0]
    for name, t in zip(names[1:], members[1:]):
        for side in ("src", "tgt"):
            want = getattr(first.tokenizers, side).fingerprint
            got = getattr(t.tokenizers, side).fingerprint
            if got != want:
                raise ValueError(f"ensemble: {name} has another {side} tokenizer than {names[0]} "
                                 f"(sha256 {got[:16]}... vs {want[:16]}...): ensemble members "
                                 "must share one vocabulary")
        if _translates(t) != _translates(first):
            raise ValueError(f"ensemble: {name} translates {_translates(t)} but {names[0]} "
                             f"translates {_translates(first)}: ensemble members must translate "
                             "the same direction(s)")


@dataclass(frozen=True)
class _Tag:
    """Where a multilingual model's target-language tag goes for one call."""

    source: int | None = None  # first source token
    decoder: int | None = None  # first decoder input, instead of BOS


class Translator:
    """Wraps a model and its tokenizers. ``device=None`` leaves the model where it is
    (validation during training passes the module's device). A multilingual model
    (``directions``) is told the output language by ``target_lang`` on each call. The model
    may be an ``Ensemble`` of models sharing the tokenizers (:meth:`from_checkpoints`).
    ``calibration``: the checkpoint's entry (``seq2seq-calibrate``); outputs whose
    confidence is below ``unsure_below`` (its threshold unless set; ``None``: never) are
    flagged ``"unsure"``."""

    def __init__(self, model: Seq2Seq | Ensemble, tokenizers: TokenizerPair,
                 decoding: DecodingConfig | None = None,
                 device: str | torch.device | None = None, directions: Directions | None = None,
                 pair: tuple[str | None, str | None] = (None, None),
                 calibration: dict | None = None):
        self.model = model if device is None else model.to(device)
        self.members = Members.of(self.model)  # listed once: dropout off per call without eval()
        self.tokenizers = tokenizers
        self.decoding = decoding or DecodingConfig()
        self.directions = directions
        self.pair = pair  # a single-direction model's languages, where known
        self.calibration = calibration
        self.unsure_below: float | None = calibration["threshold"] if calibration else None

    @classmethod
    def from_checkpoint(cls, path: str | os.PathLike, decoding: DecodingConfig | None = None,
                        device: str | torch.device = "cpu", compute_type: ComputeType | None = None,
                        shortlist: bool | None = None, compile: bool | None = None) -> Translator:
        """Model and tokenizers from one checkpoint (``CheckpointError``/``ValueError`` on a
        bad file or a tokenizer whose bytes do not match its stored fingerprint). How the
        model is prepared is set here, once (``LoadConfig``; None = its default): its linear
        layers run in ``compute_type`` (``auto`` resolved, see :attr:`compute_type`;
        ``model/inference/compute.py``); ``shortlist``: decode over each batch's candidates of
        the checkpoint's lexical table (``model/inference/shortlist.py``; ``ValueError``
        without one); ``compile``: the decoder step compiled ahead of time (``compiled.py``;
        float32 only, ``ValueError`` otherwise)."""
        ckpt, model = load_model(path)  # the model is built once (verification's is reused)
        return cls.from_loaded(ckpt, f"checkpoint {path}", decoding, device, model, compute_type,
                               shortlist, compile)

    @classmethod
    def from_loaded(cls, ckpt: dict, where: str, decoding: DecodingConfig | None = None,
                    device: str | torch.device = "cpu", model=None,
                    compute_type: ComputeType | None = None, shortlist: bool | None = None,
                    compile: bool | None = None) -> Translator:
        """:meth:`from_checkpoint` of a checkpoint already loaded (and verified); ``model``:
        the one built from it, if any."""
        load = load_config(compute_type=compute_type, shortlist=shortlist, compile=compile)
        meta = ckpt["seq2seq"]
        tokenizers = TokenizerPair.from_state(meta["tokenizers"])
        model = build_model(ckpt) if model is None else model
        for side, tok in (("src", tokenizers.src), ("tgt", tokenizers.tgt)):
            size = getattr(model.arch, f"{side}_vocab_size")
            if size != tok.vocab_size:
                raise ValueError(f"{where}: the model has {size} {side} ids but its "
                                 f"{side} tokenizer {tok.vocab_size}")
        translator = cls(model, tokenizers, decoding, device, directions_of(meta, where),
                         (meta.get("src_lang"), meta.get("tgt_lang")), calibration_of(meta, where))
        compute.prepare(translator.model, load.compute_type)
        if load.shortlist:
            entry = shortlist_of(meta, model.arch, where)
            if entry is None:
                raise FieldError("{where}: has no shortlist table; build one with "
                                 "seq2seq-shortlist (-o NEW.ckpt or {in_place}), or decode "
                                 "without {shortlist}", where=where)
            translator.model.inference.shortlist = Shortlist.from_entry(entry, model.arch)
        if load.compile:
            if translator.compute_type != "float32":
                raise FieldError("{compile}: only for {compute_type} float32, not {got}",
                                 got=translator.compute_type)
            compiled_greedy.enable(translator.model)  # the step, encoder and greedy step
        return translator

    @classmethod
    def from_checkpoints(cls, paths: Sequence[str | os.PathLike],
                         decoding: DecodingConfig | None = None,
                         device: str | torch.device = "cpu",
                         compute_type: ComputeType | None = None,
                         shortlist: bool | None = None, compile: bool | None = None) -> Translator:
        """One checkpoint as :meth:`from_checkpoint`; several as an ensemble
        (``decoding.ensemble``): each step, the mean of the models' log-probs. Members must
        share tokenizers (so vocabulary and special ids) and direction(s); ``ValueError``
        naming both files otherwise. An ensemble has no calibration (its members' thresholds
        were measured on their own outputs, not the ensemble's)."""
        paths = list(paths)
        if not paths:
            raise ValueError("no checkpoints given")
        if len(paths) == 1:
            return cls.from_checkpoint(paths[0], decoding, device, compute_type, shortlist, compile)
        if load_config(compute_type=compute_type, shortlist=shortlist, compile=compile).compile:
            raise FieldError("{compile}: for one model, not an ensemble of {n} checkpoints",
                             n=len(paths))
        members = [cls.from_checkpoint(p, device=device, compute_type=compute_type,
                                       shortlist=shortlist) for p in paths]
        names = [str(p) for p in paths]
        check_ensemble(names, members)
        first = members[0]
        return cls(Ensemble([t.model for t in members], names), first.tokenizers, decoding,
                   device, first.directions, first.pair)

    @property
    def direction_names(self) -> list[str]:
        """``["en-de", ...]``: what this model translates (one pair, or none known)."""
        if self.directions is not None:
            return self.directions.names()
        return [f"{self.pair[0]}-{self.pair[1]}"] if None not in self.pair else []

    def tag_for(self, target_lang: str | None, source_lang: str | None = None) -> _Tag:
        """The tag of the asked direction (``DirectionError`` naming the model's directions
        when it has no such direction); a single-direction model takes no tag."""
        if self.directions is None:
            for asked, own, name in ((source_lang, self.pair[0], "from"), (target_lang, self.pair[1], "into")):
                if asked is not None and own is not None and asked != own:
                    raise DirectionError(f"this model translates {self.pair[0]}-{self.pair[1]}, "
                                         f"not {name} {asked!r}")
            return _Tag()
        _, tgt = self.directions.resolve(source_lang, target_lang)
        side = "src" if self.directions.tag_position == "source" else "tgt"
        tag_id = getattr(self.tokenizers, side).piece_id(tag_piece(tgt))
        return _Tag(source=tag_id) if side == "src" else _Tag(decoder=tag_id)

    @property
    def compute_type(self) -> str:
        """How the model's linear layers multiply: ``float32``, ``int8`` or ``bfloat16``
        (what ``auto`` became on this CPU)."""
        models = getattr(self.model, "members", [self.model])
        return models[0].inference.compute_type

    @property
    def shortlist(self) -> bool:
        """Whether decoding is restricted to the checkpoint's shortlist (an ensemble: the
        union of its members' candidates)."""
        models = getattr(self.model, "members", [self.model])
        return any(m.inference.shortlist is not None for m in models)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # ------------------------------------------------------------ public API
    def translate(self, texts: Sequence[str], progress: bool = False, *,
                  target_lang: str | None = None, source_lang: str | None = None) -> list[str]:
        return [r.hyp for r in self.translate_full(texts, progress=progress, target_lang=target_lang,
                                                   source_lang=source_lang)]

    def translate_full(self, texts: Sequence[str], need_attention: bool = False,
                       progress: bool = False, *, target_lang: str | None = None,
                       source_lang: str | None = None) -> list[TranslationResult]:
        """One result per text, in input order; ``target_lang`` (and optionally
        ``source_lang``) choose a multilingual model's direction. With
        ``decoding.split_sentences`` each text is translated a sentence at a time, all
        sentences of the call batched together (``paragraphs``); attention is of one model
        call, so ``need_attention`` translates each text whole."""
        texts = list(texts)
        tag = self.tag_for(target_lang, source_lang)
        if not self.decoding.split_sentences or need_attention:
            return self._flag_unsure(self._translate_lines(texts, need_attention, progress, tag))
        limit = min(self.decoding.max_sentence_tokens, self._max_source(tag) - 1)
        known: dict[str, list[int]] = {}  # tokenize once: the plan's lengths, then the ids
        plan = paragraphs.plan(texts, self.source_language(source_lang, target_lang),
                               lambda pieces: self._lengths(pieces, known), limit)
        results = plan.assemble(self._translate_lines(plan.units, False, progress, tag, known))
        return self._flag_unsure(results)

    def _flag_unsure(self, results: list[TranslationResult]) -> list[TranslationResult]:
        """``"unsure"`` on each text's output below ``unsure_below`` (its own confidence:
        a text of several sentences is judged whole, as its result reports it)."""
        if self.unsure_below is not None:
            for r in results:
                if r.confidence < self.unsure_below and "unsure" not in r.flags:
                    r.flags.append("unsure")
        return results

    def source_language(self, source_lang: str | None = None,
                        target_lang: str | None = None) -> str | None:
        """The language the input is in, as far as known: the one asked, the model's single
        source language (of the asked direction), else ``None``."""
        if source_lang is not None:
            return source_lang
        if self.directions is None:
            return self.pair[0]
        _, tgt = self.directions.resolve(None, target_lang)
        sources = {s for s, t in self.directions.pairs if t == tgt}
        return sources.pop() if len(sources) == 1 else None

    def _lengths(self, texts: list[str], known: dict | None = None) -> list[int]:
        return [len(ids) for ids in self.tokenizers.src.encode_once(texts, known)]

    def _max_source(self, tag: _Tag) -> int:
        """Source positions left for the text's tokens (and EOS)."""
        return self.model.arch.max_positions - (tag.source is not None)

    def _translate_lines(self, texts: list[str], need_attention: bool, progress: bool,
                         tag: _Tag, known: dict | None = None) -> list[TranslationResult]:
        """Each text as one model input (blank text: ``""`` without a model call). Without
        ``need_attention``, links inside a text never reach the model: they are cut out,
        and put back by the alignment (those texts are translated with attention)."""
        cut_out = [passthrough.holes(t) if not need_attention else (t, []) for t in texts]
        model_texts = [m for m, _ in cut_out]
        ids, cut = self._source_ids(model_texts, tag, known)
        results = [TranslationResult(t, "", 0.0, 0.0, [("", 0.0)]) for t in texts]
        todo = [i for i, s in enumerate(ids) if s]
        if not todo:
            return results
        holed = [i for i in todo if cut_out[i][1]]  # attention for these: it puts their links back
        runs = [(b, attention or need_attention) for attention in (False, True)
                for b in self._batches([i for i in todo if bool(cut_out[i][1]) == attention], ids)]
        was_training = [m for m in self.members.modules() if m.training]  # dropout off, then back
        for m in was_training:
            m.training = False
        try:
            with torch.inference_mode():
                generator = self._generator()
                for batch, attention in _progress(runs, progress):
                    runtime.tick()  # follow the machine's load in a long file
                    self._run(batch, model_texts, ids, results, attention, generator, tag)
        finally:
            for m in was_training:
                m.training = True
        for i in holed:
            results[i] = put_back(results[i], texts[i], cut_out[i][1])
        for i in cut:
            results[i].flags.append("truncated")
        return results

    # ------------------------------------------------------------ steps
    def _source_ids(self, texts: list[str], tag: _Tag = _Tag(),
                    known: dict | None = None) -> tuple[list[list[int]], list[int]]:
        """Subword ids per text (``collate_src`` adds EOS and a source tag); ``[]`` for blank
        text; sources longer than the model's positions are truncated with a warning (and
        their indices returned, to be flagged)."""
        full = [i for i, t in enumerate(texts) if t.strip()]
        encoded = dict(zip(full, self.tokenizers.src.encode_once([texts[i] for i in full], known)))
        max_positions = self._max_source(tag)
        ids = [truncate_source(encoded.get(i, []), max_positions) for i in range(len(texts))]
        limit = max_positions - 1
        cut = [i for i, toks in encoded.items() if len(toks) > limit]
        if cut:
            msg = f"{len(cut)} source line(s) longer than {limit} tokens were truncated to {limit}"
            warnings.warn(msg, stacklevel=4)
        self._warn_min_len([len(ids[i]) + 1 for i in full])
        return ids, cut

    def _warn_min_len(self, src_lens: list[int]) -> None:
        """Forced EOS wins over ``min_len``: where the length limit is at or below it, the
        output is cut at the limit, never ended by the model. Say so rather than cut silently."""
        m = self.decoding.min_len
        if not m or not src_lens:
            return
        limits = length_limits(torch.tensor(src_lens), self.decoding, self.model.arch.max_positions)
        short = int((limits <= m).sum())
        if short:
            warnings.warn(FieldWarning(
                "{short} sentence(s) have a length limit (max_len_a * source + max_len_b, at "
                "most {limit}) at or below {min_len} {m}: their outputs stop at that limit, "
                "unfinished", short=short, limit=self.model.arch.max_positions - 1, m=m),
                stacklevel=5)

    def _batches(self, todo: list[int], ids: list[list[int]]) -> Iterator[list[int]]:
        """Indices of ``todo`` packed within ``max_tokens`` padded source tokens (+ EOS)."""
        for batch in [] if not todo else token_batches([len(ids[i]) + 1 for i in todo], self.decoding.max_tokens):
            yield [todo[j] for j in batch.tolist()]

    def _generator(self) -> torch.Generator | None:
        """One seeded generator per call: sampling is reproducible whatever the batching."""
        if self.decoding.method != "sample" or self.decoding.seed is None:
            return None
        return torch.Generator(device=self.device).manual_seed(self.decoding.seed)

    def _run(self, batch: list[int], texts: list[str], ids: list[list[int]],
             results: list[TranslationResult], need_attention: bool,
             generator: torch.Generator | None, tag: _Tag = _Tag()) -> None:
        cfg, B = self.model.arch, len(batch)
        tags = None if tag.source is None else np.full(B, tag.source)
        src = collate_src([ids[i] for i in batch], cfg.pad_id, cfg.eos_id, tags)  # (B, S): [tag] x [eos]
        first = None if tag.decoder is None else torch.full((B,), tag.decoder, device=self.device)
        out = search(self.model, src.to(self.device), self.decoding,
                     need_attention=need_attention, generator=generator, first=first)
        tgt = self.tokenizers.tgt
        for row, i in enumerate(batch):
            hyps = out.hypotheses[row]
            texts_n = tgt.decode([h.tokens for h in hyps])
            if self.decoding.restore_numbers:
                texts_n = [restore_numbers(texts[i], t) for t in texts_n]
            best = hyps[0]
            r = TranslationResult(texts[i], texts_n[0], best.normalized, best.score,
                                  [(s, h.normalized) for s, h in zip(texts_n, hyps)],
                                  confidence=confidence(best), tokens=len(best.tokens) + 1,
                                  flags=output_flags(texts[i], texts_n[0], self.decoding))
            if need_attention:
                r.attention = out.attentions[row]
                r.src_pieces = self.tokenizers.src.id_to_piece(src[row][src[row] != cfg.pad_id].tolist())
                r.tgt_pieces = tgt.id_to_piece(best.tokens) + ["</s>"]
            results[i] = r


def _progress(batches: list, enabled: bool):
    if not enabled:
        return batches
    try:
        from tqdm import tqdm
    except ImportError:  # progress is a nicety, not a dependency
        return batches
    return tqdm(batches, desc="translate", unit="batch", leave=False)
