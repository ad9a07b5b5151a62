"""What every search keeps per decoder row, and what every search returns.

``DecoderRows`` puts the two ways of decoding behind one interface: cached (the model's
``DecoderCache`` holds K/V and positions) or uncached (the whole prefix is decoded again
each step: the reference the cached path is tested against). An ensemble's rows
(``decoding.ensemble.EnsembleRows``) hold one ``DecoderRows`` per member behind the same interface.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from seq2seq.data.batch import decoder_start
from seq2seq.decoding.ensemble import Ensemble, EnsembleRows
from seq2seq.model import Attentions, DecoderCache, Seq2Seq
from seq2seq.model.inference import output
from seq2seq.model.inference.shortlist import Restricted
from seq2seq.profiling import phase


@dataclass
class Hypothesis:
    tokens: list[int]  # without bos/eos
    score: float  # total log-prob (including EOS when produced)
    normalized: float  # score under the length penalty: what ranks hypotheses


@dataclass
class SearchResult:
    """Per sentence, its hypotheses best first (``nbest`` of them for beam and sampling).

    ``output (B, T)``: the 1-best as ids, then EOS, then pad. ``attentions`` (on request): per
    sentence, the 1-best's weights with batch dim 1: encoder self ``(1, H, S_b, S_b)``, decoder
    self ``(1, H, T_b, T_b)`` and cross ``(1, H, T_b, S_b)`` per layer, where ``S_b`` is the
    source length and the ``T_b = |tokens| + 1`` decoder queries are ``bos y_0 .. y_{n-1}``:
    query row ``i`` is the state that produced token ``i`` (the last row produced EOS).
    """

    hypotheses: list[list[Hypothesis]]
    output: Tensor
    attentions: list[Attentions] | None = None


class DecoderRows:
    """Decoder rows of one search. ``step(tokens (R,)) -> log_probs (R, V)`` feeds one new
    token per row; ``select(rows (R',))`` keeps/reorders rows. ``cross=False`` is only valid
    when each row stays within its own sentence (beam reordering): the memory rows are then
    identical and need no copy. ``shortlist (C,)``: the only target ids the output
    projection computes (``model/inference/shortlist.py``)."""

    def __init__(self, model: Seq2Seq, memory: Tensor | None, memory_mask: Tensor | None,
                 use_cache: bool, capacity: int, group: int = 1, shortlist: Tensor | None = None,
                 cache: DecoderCache | None = None):
        self.model = model
        self.restricted = None if shortlist is None else Restricted(model.output, shortlist)
        if cache is None and use_cache:  # ``cache``: made already (one sentence's package)
            cache = model.init_cache(memory, memory_mask, capacity, group)
        self.cache: DecoderCache | None = cache
        self.memory, self.memory_mask = (None, None) if use_cache else (memory, memory_mask)
        self.prefix = None if use_cache else memory.new_zeros((memory.shape[0], 0), dtype=torch.long)

    def step(self, tokens: Tensor) -> Tensor:
        """Feed ``tokens (R,)``: the next-token log-probs ``(R, V)``."""
        return self.log_probs(self.hidden(tokens))

    def hidden(self, tokens: Tensor) -> Tensor:
        """Feed ``tokens (R,)``: each row's last decoder state ``(R, d_model)``, before the
        output projection (which :meth:`log_probs` applies, to all rows or a block)."""
        with phase("seq2seq.decode_step"):
            if self.cache is not None:
                h, self.cache = self.model.decode_hidden(tokens[:, None], None, None, self.cache)
            else:
                self.prefix = torch.cat((self.prefix, tokens[:, None]), dim=1)
                h, _ = self.model.decode_hidden(self.prefix, self.memory, self.memory_mask)
            return h[:, -1]

    def log_probs(self, hidden: Tensor) -> Tensor:
        """Log-probs ``(r, V)`` of decoder states ``hidden (r, d_model)`` (``output.log_probs``:
        with a shortlist, over its candidates only, ``-inf`` elsewhere)."""
        return output.log_probs(self.model, hidden, self.restricted)

    def select(self, rows: Tensor, cross: bool = True) -> None:
        with phase("seq2seq.search.select"):
            if self.cache is not None:
                self.cache.reorder(rows, cross=cross)
                return
            self.prefix = self.prefix.index_select(0, rows)
            if cross:
                self.memory = self.memory.index_select(0, rows)
                self.memory_mask = self.memory_mask.index_select(0, rows)


def encoded_rows(model: Seq2Seq, src: Tensor, use_cache: bool, capacity: int,
                 group: int = 1, shortlist: Tensor | None = None) -> DecoderRows:
    """Encode ``src (B, S)`` once: one model's decoder rows over its memory (with
    ``--compile``, one sentence's cache straight from its source package:
    ``model.inference.compiled_source``)."""
    fast = model.inference.compiled_source
    if fast is not None and use_cache and shortlist is None:
        cache = fast.cache(model, src, capacity, group)
        if cache is not None:
            return DecoderRows(model, None, None, True, capacity, group, cache=cache)
    src_mask = model.source_mask(src)  # (B, 1, 1, S)
    with phase("seq2seq.encode"):
        memory = model.encode(src, src_mask)  # (B, S, d_model)
    return DecoderRows(model, memory, src_mask, use_cache, capacity, group, shortlist)


def shortlist_ids(model: Seq2Seq | Ensemble, src: Tensor) -> Tensor | None:
    """The batch's candidate target ids ``(C,)``, sorted, when the model (an ensemble: any
    member) has a shortlist (``Seq2Seq.inference.shortlist``, which ``Translator`` sets); an
    ensemble's is the union of its members'."""
    lists = [m.inference.shortlist for m in getattr(model, "members", [model])
             if m.inference.shortlist is not None]
    if not lists:
        return None
    return torch.unique(torch.cat([s.candidates(src) for s in lists]))


def start(model: Seq2Seq | Ensemble, src: Tensor, use_cache: bool, steps: int, beam_size: int = 1,
          first: Tensor | None = None) -> tuple[DecoderRows | EnsembleRows, Tensor]:
    """Encode ``src (B, S)`` once (an ensemble: once per member); each sentence gets
    ``beam_size`` consecutive decoder rows. Returns the rows and their first input
    ``(B * beam_size,)``: BOS, or each sentence's ``first (B,)`` (a multilingual model's
    target-language tag in the decoder)."""
    # Room for 16 positions, doubled on demand: memory follows the real lengths, not the limit.
    # Cached, the beams of a sentence share its memory K/V (a cache group); the uncached
    # reference copies the memory to each beam.
    group = beam_size if use_cache else 1
    capacity = min(steps, 16)
    ids = shortlist_ids(model, src)  # computed once per batch, shared by ensemble members
    if isinstance(model, Ensemble):
        state = EnsembleRows([encoded_rows(m, src, use_cache, capacity, group, ids)
                              for m in model.members])
    else:
        state = encoded_rows(model, src, use_cache, capacity, group, ids)
    if beam_size > group:
        state.select(torch.arange(src.shape[0], device=src.device).repeat_interleave(beam_size))
    if first is not None:
        return state, first.to(src.device).repeat_interleave(beam_size)
    return state, decoder_start(src.shape[0] * beam_size, model.arch.bos_id, src.device)


def steps_for(model: Seq2Seq, max_len: Tensor, force_length: int | None) -> int:
    """Decoding steps for a batch: ``max(max_len) + 1`` (the last one EOS only), or exactly
    ``force_length``."""
    if force_length is None:
        return int(max_len.max()) + 1
    if not 0 < force_length <= model.arch.max_positions:
        raise ValueError(
            f"force_length={force_length} must be in 1..max_positions={model.arch.max_positions}"
        )
    return force_length


def to_hypotheses(out: Tensor, scores: Tensor, norm: Tensor, eos: int) -> list[Hypothesis]:
    """Rows of ``out (R, T)`` (ids, EOS, pad) as hypotheses without EOS/pad."""
    return [Hypothesis(ids[: ids.index(eos)] if eos in ids else ids, s, z)
            for ids, s, z in zip(out.tolist(), scores.tolist(), norm.tolist())]
