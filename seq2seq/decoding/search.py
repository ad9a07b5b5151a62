"""Decoding: greedy, beam search and sampling over ``Seq2Seq.encode``/``decode`` + the cache.

Everything is batched over sentences of mixed length (``src (B, S)`` right-padded); the only
Python loop is over time steps. Shapes: ``B`` sentences, ``N`` of them still active, ``k``
beams, ``T`` steps, ``V`` target vocabulary.

Conventions shared by all three searches
- Step ``t`` (0-based) produces output token ``t``; its decoder input is ``bos y_0 .. y_{t-1}``.
- Max length per sentence ``max_len = floor(a * |src| + b)`` tokens *before* EOS, capped at
  ``model.arch.max_positions - 1`` (so the EOS step still has a position). At step ``max_len``
  only EOS is allowed: every hypothesis ends with EOS and its score includes EOS's log-prob.
- Min length: EOS gets -inf at steps ``t < min(min_len, max_len)``. Masks are applied to the
  log-probs (no renormalisation), so scores stay true model log-probs.
- ``|y|`` for the length penalty counts the generated tokens including EOS.
- ``force_length=N`` forbids EOS at every step and stops after exactly N tokens (benchmarks).
- Finished sentences leave the active batch: their cache rows are dropped with
  ``DecoderCache.reorder`` (which also drops their cross K/V), so they stop costing compute.
- ``use_cache=False`` recomputes the whole prefix each step (the reference path).
- ``on_step(t, log_probs)`` (debug hook) sees the raw log-probs ``(rows, V)`` of each step,
  before any masking: rows are the active sentences (greedy/sample) or their beams (beam).

Call on a model in eval mode (dropout would make every step random).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence

from seq2seq.config import DecodingConfig
from seq2seq.decoding.rules import NEG_INF, constrain, length_penalty, max_lengths
from seq2seq.model import Attentions, Seq2Seq
from seq2seq.model.cache import DecoderCache
from seq2seq.profiling import phase

StepHook = Callable[[int, Tensor], None]


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


# ---------------------------------------------------------------- decoder state
class _DecoderState:
    """Per-row decoder state behind one interface: cached (K/V) or uncached (whole prefix).

    ``step(tokens (R,)) -> log_probs (R, V)`` feeds one new token per row; ``select(rows)``
    keeps/reorders rows. ``cross=False`` is only valid when each row stays within its own
    sentence (beam reordering): the memory rows are then identical and need no copy.
    """

    def __init__(self, model: Seq2Seq, memory: Tensor, memory_mask: Tensor, use_cache: bool):
        self.model = model
        self.cache: DecoderCache | None = model.init_cache(memory, memory_mask) if use_cache else None
        self.memory, self.memory_mask = (None, None) if use_cache else (memory, memory_mask)
        self.prefix = None if use_cache else memory.new_zeros((memory.shape[0], 0), dtype=torch.long)

    def step(self, tokens: Tensor) -> Tensor:
        with phase("seq2seq.decode_step"):
            return self._step(tokens)

    def _step(self, tokens: Tensor) -> Tensor:
        if self.cache is not None:
            logits, self.cache = self.model.decode(tokens[:, None], None, None, self.cache)
        else:
            self.prefix = torch.cat((self.prefix, tokens[:, None]), dim=1)
            logits, _ = self.model.decode(self.prefix, self.memory, self.memory_mask)
        return F.log_softmax(logits[:, -1].float(), dim=-1)

    def select(self, rows: Tensor, cross: bool = True) -> None:
        with phase("seq2seq.search.select"):
            self._select(rows, cross)

    def _select(self, rows: Tensor, cross: bool) -> None:
        if self.cache is not None:
            self.cache = self.cache.reorder(rows, cross=cross)
            return
        self.prefix = self.prefix.index_select(0, rows)
        if cross:
            self.memory = self.memory.index_select(0, rows)
            self.memory_mask = self.memory_mask.index_select(0, rows)


def _start(model: Seq2Seq, src: Tensor, use_cache: bool, repeat: int = 1) -> _DecoderState:
    """Encode ``src (B, S)`` once; each sentence gets ``repeat`` consecutive decoder rows."""
    src_mask = model.source_mask(src)
    with phase("seq2seq.encode"):
        memory = model.encode(src, src_mask)
    state = _DecoderState(model, memory, src_mask, use_cache)
    if repeat > 1:
        state.select(torch.arange(src.shape[0], device=src.device).repeat_interleave(repeat))
    return state


def _steps(model: Seq2Seq, max_len: Tensor, force_length: int | None) -> int:
    if force_length is None:
        return int(max_len.max()) + 1  # steps 0..max_len, the last one EOS only
    if not 0 < force_length <= model.arch.max_positions:
        raise ValueError(
            f"force_length={force_length} must be in 1..max_positions={model.arch.max_positions}"
        )
    return force_length


# ---------------------------------------------------------------- greedy and sampling
Chooser = Callable[[Tensor], Tensor]


def _single_path(model: Seq2Seq, src: Tensor, cfg: DecodingConfig, choose: Chooser, *,
                 use_cache: bool, force_length: int | None, on_step: StepHook | None):
    """One hypothesis per row of ``src``: returns ids ``(B, T)`` (EOS then pad), total
    log-probs ``(B,)`` and lengths ``(B,)`` counting EOS."""
    B, device, pad, eos = src.shape[0], src.device, model.arch.pad_id, model.arch.eos_id
    max_len = max_lengths(src, cfg, pad, model.arch.max_positions)
    T = _steps(model, max_len, force_length)
    state = _start(model, src, use_cache)
    out = torch.full((B, T), pad, dtype=torch.long, device=device)
    scores = torch.zeros(B, device=device)
    lengths = torch.full((B,), T, dtype=torch.long, device=device)
    rows = torch.arange(B, device=device)  # original sentence of each active row
    last = torch.full((B,), model.arch.bos_id, dtype=torch.long, device=device)
    for t in range(T):
        lprobs = state.step(last)
        if on_step is not None:
            on_step(t, lprobs)
        with phase("seq2seq.search.constrain"):
            lprobs = constrain(lprobs, t, max_len[rows], cfg, model.arch, force_length is not None)
        tok = choose(lprobs)
        scores[rows] += lprobs.gather(1, tok[:, None]).squeeze(1)
        out[rows, t] = tok
        done = tok == eos
        lengths[rows[done]] = t + 1
        if bool(done.all()) or t == T - 1:
            break
        if bool(done.any()):
            keep = (~done).nonzero().squeeze(1)
            state.select(keep)
            rows, tok = rows[keep], tok[keep]
        last = tok
    return out, scores, lengths


def _to_hypotheses(out: Tensor, scores: Tensor, norm: Tensor, eos: int) -> list[Hypothesis]:
    """Rows of ``out (R, T)`` (ids, EOS, pad) as hypotheses without EOS/pad."""
    return [Hypothesis(ids[: ids.index(eos)] if eos in ids else ids, s, z)
            for ids, s, z in zip(out.tolist(), scores.tolist(), norm.tolist())]


@torch.inference_mode()
def greedy(model: Seq2Seq, src: Tensor, cfg: DecodingConfig, *, use_cache: bool = True,
           force_length: int | None = None, need_attention: bool = False,
           on_step: StepHook | None = None) -> SearchResult:
    """Arg-max decoding of ``src (B, S)``; one hypothesis per sentence."""
    src = src.to(_device(model))
    out, scores, lengths = _single_path(
        model, src, cfg, lambda lp: lp.argmax(-1),
        use_cache=use_cache, force_length=force_length, on_step=on_step,
    )
    norm = scores / length_penalty(lengths.to(scores.dtype), cfg)
    hyps = [[h] for h in _to_hypotheses(out, scores, norm, model.arch.eos_id)]
    return _result(model, src, hyps, out, need_attention)


def filter_logits(logits: Tensor, top_k: int = 0, top_p: float = 1.0) -> Tensor:
    """``(R, V)`` with everything outside the top-k / the top-p nucleus set to -inf."""
    if top_k:
        kth = logits.topk(min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, NEG_INF)
    if top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        # Drop a token when the tokens before it already reach top_p (the first always stays).
        drop_sorted = (cum - sorted_logits.softmax(-1)) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)
        logits = logits.masked_fill(drop, NEG_INF)
    return logits


@torch.inference_mode()
def sample(model: Seq2Seq, src: Tensor, cfg: DecodingConfig, *, use_cache: bool = True,
           force_length: int | None = None, need_attention: bool = False,
           on_step: StepHook | None = None, generator: torch.Generator | None = None) -> SearchResult:
    """Ancestral sampling with temperature, top-k and top-p; ``cfg.nbest`` samples per
    sentence, best first. Scores are the model's log-probs (temperature 1, unfiltered), so
    they compare with greedy's. Seeded by ``generator``, else ``cfg.seed``, else torch's RNG."""
    src = src.to(_device(model))
    if generator is None and cfg.seed is not None:
        generator = torch.Generator(device=src.device).manual_seed(cfg.seed)

    def choose(lprobs: Tensor) -> Tensor:
        logits = filter_logits(lprobs / cfg.temperature, cfg.top_k, cfg.top_p)
        return torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(1)

    n = cfg.nbest
    out, scores, lengths = _single_path(
        model, src.repeat_interleave(n, dim=0), cfg, choose,
        use_cache=use_cache, force_length=force_length, on_step=on_step,
    )
    # Rank each sentence's n samples by normalized score: (B, n) -> sorted row indices.
    norm = (scores / length_penalty(lengths.to(scores.dtype), cfg)).view(-1, n)
    order = (norm.argsort(dim=1, descending=True) + torch.arange(0, norm.numel(), n, device=src.device)[:, None]).view(-1)
    flat = _to_hypotheses(out[order], scores[order], norm.view(-1)[order], model.arch.eos_id)
    hyps = [flat[i : i + n] for i in range(0, len(flat), n)]
    return _result(model, src, hyps, out[order[::n]], need_attention)


# ---------------------------------------------------------------- beam search
@dataclass
class _Pool:
    """Finished hypotheses per sentence, the ``nbest`` best by normalized score."""

    tokens: Tensor  # (B, n, T)
    scores: Tensor  # (B, n) total log-prob
    norm: Tensor  # (B, n) normalized, -inf = empty slot
    lengths: Tensor  # (B, n) including EOS

    @classmethod
    def empty(cls, B: int, n: int, T: int, pad: int, device) -> _Pool:
        return cls(torch.full((B, n, T), pad, dtype=torch.long, device=device),
                   torch.full((B, n), NEG_INF, device=device),
                   torch.full((B, n), NEG_INF, device=device),
                   torch.zeros((B, n), dtype=torch.long, device=device))

    def merge(self, sent: Tensor, tokens: Tensor, scores: Tensor, norm: Tensor, length: int) -> None:
        """Offer candidates ``tokens (N, C, T)``, ``scores/norm (N, C)`` (-inf = not
        finishing) of active sentences ``sent (N,)``; keep each sentence's best n."""
        n = self.norm.shape[1]
        all_norm = torch.cat((self.norm[sent], norm), dim=1)  # (N, n + C)
        best_norm, idx = all_norm.topk(n, dim=1)
        all_tokens = torch.cat((self.tokens[sent], tokens), dim=1)
        all_scores = torch.cat((self.scores[sent], scores), dim=1)
        all_len = torch.cat((self.lengths[sent], torch.full_like(scores, length, dtype=torch.long)), 1)
        self.norm[sent] = best_norm
        self.scores[sent] = all_scores.gather(1, idx)
        self.lengths[sent] = all_len.gather(1, idx)
        self.tokens[sent] = all_tokens.gather(1, idx[..., None].expand(-1, -1, all_tokens.shape[2]))


def finish_bound(best_live: Tensor, t: int, max_len: Tensor, cfg: DecodingConfig,
                 force_length: int | None = None) -> Tensor:
    """``(N,)`` upper bound on the normalized score of any hypothesis that can still finish
    after step ``t``, from the best live raw score ``best_live (N,)``.

    A continuation of a live hypothesis with raw score ``s <= 0`` ends with raw ``s' <= s``
    (log-probs are <= 0) and length ``L`` in ``[t+2, max_len+1]``, so its normalized score is
    ``s'/lp(L) <= s/lp(L) <= s/max_L lp(L)`` (dividing a non-positive number by a larger
    positive one can only raise it). ``lp`` is monotone in ``L`` (GNMT for either sign of
    alpha, average, none), so the max is at an end of the range. This is exact: stopping
    when the n-th best finished score reaches the bound returns what running to max length
    would. Note it is ``s/lp(max_len+1)``, not the common ``s/lp(t+1)`` heuristic, which
    can stop while a longer hypothesis would still win under GNMT or average.
    """
    if force_length is not None:  # every hypothesis has exactly force_length tokens
        lo = hi = torch.full_like(max_len, force_length)
    elif cfg.stopping == "heuristic":  # as if the best live hypothesis ended now: not a bound
        lo = hi = torch.full_like(max_len, t + 1)
    else:
        lo, hi = torch.full_like(max_len, t + 2).minimum(max_len + 1), max_len + 1
    lp = torch.maximum(
        torch.as_tensor(length_penalty(lo.to(best_live.dtype), cfg)),
        torch.as_tensor(length_penalty(hi.to(best_live.dtype), cfg)),
    )
    return best_live / lp


@torch.inference_mode()
def beam_search(model: Seq2Seq, src: Tensor, cfg: DecodingConfig, *, use_cache: bool = True,
                force_length: int | None = None, need_attention: bool = False,
                on_step: StepHook | None = None, stop_early: bool = True) -> SearchResult:
    """Beam search of size ``k = cfg.beam_size``; ``cfg.nbest`` hypotheses per sentence.

    Each step scores all ``k x V`` extensions ``(N, k, V)``, takes the top ``2k`` of the
    flattened ``(N, k*V)``: EOS candidates ranked within the top k finish (enter the pool,
    normalized by the length penalty), and the best k non-EOS candidates (there always are
    k, as each beam has one EOS) become the next beams. A sentence is done when its n-th
    best finished hypothesis reaches :func:`finish_bound` (``stop_early=False``: only at max
    length, the reference for testing that the bound is exact). Step 0 expands only beam 0
    (the others start at -inf) so the k beams are k different tokens.
    """
    src = src.to(_device(model))
    k, V = cfg.beam_size, model.arch.tgt_vocab_size
    n = min(cfg.nbest, k)  # a beam holds k hypotheses at most
    B, device, pad, eos = src.shape[0], src.device, model.arch.pad_id, model.arch.eos_id
    force = force_length is not None
    max_len_all = max_lengths(src, cfg, pad, model.arch.max_positions)
    T = _steps(model, max_len_all, force_length)
    state = _start(model, src, use_cache, repeat=k)
    pool = _Pool.empty(B, n, T, pad, device)
    sent = torch.arange(B, device=device)  # original id of each active sentence
    beam_scores = torch.full((B, k), NEG_INF, device=device)
    beam_scores[:, 0] = 0.0
    beam_tokens = torch.full((B, k, T), pad, dtype=torch.long, device=device)
    last = torch.full((B * k,), model.arch.bos_id, dtype=torch.long, device=device)
    rank = torch.arange(2 * k, device=device)
    for t in range(T):
        N, max_len = sent.shape[0], max_len_all[sent]
        lprobs = state.step(last)  # (N*k, V)
        if on_step is not None:
            on_step(t, lprobs)
        with phase("seq2seq.search.constrain"):
            lprobs = constrain(lprobs, t, max_len.repeat_interleave(k), cfg, model.arch, force)
        cand = (beam_scores[..., None] + lprobs.view(N, k, V)).view(N, k * V)
        top_scores, top_idx = cand.topk(min(2 * k, k * V), dim=1)  # (N, 2k), sorted
        origin, tok = top_idx // V, top_idx % V
        hist = beam_tokens.gather(1, origin[..., None].expand(-1, -1, T))  # (N, 2k, T)
        hist[:, :, t] = tok
        final = (t == T - 1) if force else False  # force_length: the last step finishes all
        finishing = ((tok == eos) | final) & (rank[: tok.shape[1]] < k) & top_scores.isfinite()
        norm = top_scores / length_penalty(float(t + 1), cfg)
        with phase("seq2seq.search.pool"):
            pool.merge(sent, hist, top_scores.masked_fill(~finishing, NEG_INF),
                       norm.masked_fill(~finishing, NEG_INF), t + 1)
        # Live beams: the k best non-EOS candidates (topk is sorted, so order by rank).
        live = (rank[: tok.shape[1]] + (tok == eos) * 2 * k).argsort(dim=1)[:, :k]  # (N, k)
        beam_scores = top_scores.gather(1, live)
        beam_tokens = hist.gather(1, live[..., None].expand(-1, -1, T))
        origin, last = origin.gather(1, live), tok.gather(1, live)
        with phase("seq2seq.search.finish_bound"):
            bound = finish_bound(beam_scores[:, 0], t, max_len, cfg, force_length)
        done = (t >= max_len) if not force else torch.full_like(sent, t == T - 1, dtype=torch.bool)
        if stop_early:
            done = done | (pool.norm[sent, n - 1] >= bound)
        if bool(done.all()):
            break
        rows = (torch.arange(N, device=device)[:, None] * k + origin)  # (N, k) parent rows
        if bool(done.any()):
            keep = (~done).nonzero().squeeze(1)
            state.select(rows[keep].view(-1), cross=True)  # drops finished sentences' memory
            sent, beam_scores, beam_tokens = sent[keep], beam_scores[keep], beam_tokens[keep]
            last = last[keep]
        else:
            state.select(rows.view(-1), cross=False)
        last = last.reshape(-1)
    hyps = _pool_hypotheses(pool, eos)
    out = pool.tokens[:, 0]
    return _result(model, src, hyps, out, need_attention)


def _pool_hypotheses(pool: _Pool, eos: int) -> list[list[Hypothesis]]:
    hyps = []
    for toks, scores, norms, lens in zip(pool.tokens.tolist(), pool.scores.tolist(),
                                         pool.norm.tolist(), pool.lengths.tolist()):
        sent = [Hypothesis(ids[: ids.index(eos)] if eos in ids else ids[:n], s, z)
                for ids, s, z, n in zip(toks, scores, norms, lens) if math.isfinite(z)]
        hyps.append(sent)
    return hyps


# ---------------------------------------------------------------- dispatch + attention
def search(model: Seq2Seq, src: Tensor, cfg: DecodingConfig, **kwargs) -> SearchResult:
    """Run the search named by ``cfg.method`` (keyword options as for the functions)."""
    fn = {"greedy": greedy, "beam": beam_search, "sample": sample}[cfg.method]
    if fn is not sample:
        kwargs.pop("generator", None)
    return fn(model, src, cfg, **kwargs)


def _device(model: Seq2Seq) -> torch.device:
    return next(model.parameters()).device


def _result(model: Seq2Seq, src: Tensor, hyps: list[list[Hypothesis]], out: Tensor,
            need_attention: bool) -> SearchResult:
    attn = best_attentions(model, src, [h[0].tokens for h in hyps]) if need_attention else None
    return SearchResult(hyps, out, attn)


def best_attentions(model: Seq2Seq, src: Tensor, tokens: list[list[int]]) -> list[Attentions]:
    """Exact attention weights of the given outputs: one teacher-forced pass over
    ``bos + tokens`` (batched, then cut per sentence to its own lengths)."""
    cfg = model.arch
    tgt_in = pad_sequence([torch.tensor([cfg.bos_id, *ids]) for ids in tokens], batch_first=True,
                          padding_value=cfg.pad_id).to(src.device)
    weights = model.attentions(src, tgt_in)
    src_len = (src != cfg.pad_id).sum(1).tolist()
    out = []
    for i, (s, ids) in enumerate(zip(src_len, tokens)):
        t = len(ids) + 1
        out.append(Attentions(
            [w[i : i + 1, :, :s, :s] for w in weights.encoder_self],
            [w[i : i + 1, :, :t, :t] for w in weights.decoder_self],
            [w[i : i + 1, :, :t, :s] for w in weights.decoder_cross],
        ))
    return out
