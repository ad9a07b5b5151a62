"""Batched beam search: ``beam_size`` live hypotheses per sentence, a pool of finished ones.

Shapes: ``B`` sentences, ``N`` of them still active, ``K = beam_size`` beams each, ``T``
steps, ``V`` target vocabulary. The only Python loop is over time steps.

Each step ranks all ``K x V`` extensions of a sentence and takes their top ``2K`` (via each
beam's top 2K: :func:`_candidates`): EOS candidates ranked within the top K finish (they enter the pool,
normalized by the length penalty), and the best K non-EOS candidates (there always are K,
as each beam has one EOS) become the next beams. Step 0 expands only beam 0 (the others
start at -inf) so the K beams are K different tokens. A sentence is done when its n-th
best finished hypothesis reaches :func:`finish_bound`; done sentences leave the batch.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
from torch import Tensor

from seq2seq.config import DecodingConfig, ModelConfig
from seq2seq.decoding.rules import NEG_INF, constrain, length_penalty, max_lengths
from seq2seq.decoding.state import DecoderRows, Hypothesis, start, steps_for
from seq2seq.model import Seq2Seq
from seq2seq.profiling import phase


@dataclass
class FinishedPool:
    """Finished hypotheses per sentence, the ``n`` best by normalized score."""

    tokens: Tensor  # (B, n, T)
    scores: Tensor  # (B, n) total log-prob
    norm: Tensor  # (B, n) normalized, -inf = empty slot
    lengths: Tensor  # (B, n) including EOS

    @classmethod
    def empty(cls, B: int, n: int, T: int, pad: int, device) -> FinishedPool:
        return cls(torch.full((B, n, T), pad, dtype=torch.long, device=device),
                   torch.full((B, n), NEG_INF, device=device),
                   torch.full((B, n), NEG_INF, device=device),
                   torch.zeros((B, n), dtype=torch.long, device=device))

    def merge(self, sent: Tensor, tokens: Tensor, scores: Tensor, norm: Tensor, length: int) -> None:
        """Offer candidates ``tokens (N, C, T)``, ``scores/norm (N, C)`` (-inf = not
        finishing) of active sentences ``sent (N,)``; keep each sentence's best n."""
        with phase("seq2seq.search.pool"):
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

    def hypotheses(self, eos: int) -> list[list[Hypothesis]]:
        """Per sentence, its finished hypotheses best first (ids without EOS)."""
        out = []
        for toks, scores, norms, lens in zip(self.tokens.tolist(), self.scores.tolist(),
                                             self.norm.tolist(), self.lengths.tolist()):
            out.append([Hypothesis(ids[: ids.index(eos)] if eos in ids else ids[:n], s, z)
                        for ids, s, z, n in zip(toks, scores, norms, lens) if math.isfinite(z)])
        return out


def finish_bound(best_live: Tensor, t: int, max_len: Tensor, decoding: DecodingConfig,
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
    with phase("seq2seq.search.finish_bound"):
        if force_length is not None:  # every hypothesis has exactly force_length tokens
            lo = hi = torch.full_like(max_len, force_length)
        elif decoding.stopping == "heuristic":  # as if the best live one ended now: not a bound
            lo = hi = torch.full_like(max_len, t + 1)
        else:
            lo, hi = torch.full_like(max_len, t + 2).minimum(max_len + 1), max_len + 1
        lp = torch.maximum(
            torch.as_tensor(length_penalty(lo.to(best_live.dtype), decoding)),
            torch.as_tensor(length_penalty(hi.to(best_live.dtype), decoding)),
        )
        return best_live / lp


@dataclass
class _Beams:
    """The live beams of the N active sentences."""

    sent: Tensor  # (N,) original index of each active sentence
    scores: Tensor  # (N, K) total log-probs, best first
    tokens: Tensor  # (N, K, T) ids so far, then pad
    last: Tensor  # (N * K,) the token each beam feeds the decoder next
    max_len: Tensor  # (N,) each sentence's length limit
    row0: Tensor  # (N, 1) each sentence's first decoder row, n * K (kept: no arange a step)


@dataclass
class _Candidates:
    """The top 2K extensions of each active sentence, best first."""

    scores: Tensor  # (N, 2K)
    origin: Tensor  # (N, 2K) the beam each extends
    tok: Tensor  # (N, 2K) the token it adds


ROW_CHUNK = 64  # vocabulary entries per chunk in :func:`row_topk` (measured: 32-100 alike)
# Log-probs (floats) formed at once in a beam step: rows go through projection, log-softmax,
# output rules and top-k a block at a time, so each block is still in cache for the passes
# after the matmul. Measured at V = 8000 on 2 cores: 10.4 us a row at 750 rows at once, 19 us
# at 3,000-6,000 at once, 10.4-11 us in blocks of 512-768 rows.
LOGITS_BLOCK = 6_000_000


def row_topk(x: Tensor, k: int, chunk: int = ROW_CHUNK) -> tuple[Tensor, Tensor]:
    """``x.topk(k, dim=1)`` of ``x (R, V)``, sorted: values ``(R, k)`` and indices, read
    mostly from ``k`` chunks of each row instead of all ``V`` entries.

    Cut each row into chunks of ``chunk`` entries. An entry among the row's top k has at
    most k entries >= it, so at most k chunks have a maximum >= it, and its own chunk is
    one of them: the top k lie in the k chunks with the largest maxima. So: one max per
    chunk, the top k chunks, the top k of their ``k * chunk`` entries (plus the row's tail
    past the last whole chunk). At V = 8000, k = 10 this takes ~0.6x torch.topk's time on
    CPU, where topk of the vocabulary was the largest single cost of a beam step. Among
    exactly equal values the index chosen may differ from ``torch.topk``'s (which is
    unspecified there too)."""
    R, V = x.shape
    G = V // chunk
    if G < 4 * k:  # few chunks: nothing to save
        return x.topk(k, dim=1)
    body = x[:, : G * chunk].view(R, G, chunk)
    top_chunks = body.amax(dim=2).topk(k, dim=1).indices  # (R, k)
    cand = body.gather(1, top_chunks[..., None].expand(R, k, chunk)).view(R, k * chunk)
    if G * chunk < V:  # the tail is always a candidate
        cand = torch.cat((cand, x[:, G * chunk :]), dim=1)
    values, i = cand.topk(k, dim=1)
    # candidate i -> vocabulary id: its chunk's start plus its offset, or a tail position
    idx = top_chunks.gather(1, (i // chunk).clamp_(max=k - 1)) * chunk + i % chunk
    if G * chunk < V:
        idx = torch.where(i < k * chunk, idx, i + (G - k) * chunk)
    return values, idx


def _row_tops(rows: DecoderRows, beams: _Beams, t: int, decoding: DecodingConfig,
              arch: ModelConfig, force: bool, on_step) -> tuple[Tensor, Tensor]:
    """Feed each beam its last token; the top ``C = 2K`` log-probs of every beam's row after
    the output rules, and their tokens, ``(N*K, C)`` each, formed a block of rows at a time
    (:data:`LOGITS_BLOCK`). ``on_step`` (tests) sees all rows' raw log-probs at once."""
    K = beams.scores.shape[1]
    h = rows.hidden(beams.last)  # (N*K, d_model)
    row_max = beams.max_len.repeat_interleave(K)
    V = arch.tgt_vocab_size
    C = min(2 * K, V)
    block = h.shape[0] if on_step is not None else max(1, LOGITS_BLOCK // V)
    # each beam's output so far (N*K, t), for the n-gram rule only
    prefix = beams.tokens[:, :, :t].reshape(h.shape[0], t) if decoding.no_repeat_ngram_size else None
    tops, toks = [], []
    for i in range(0, h.shape[0], block):
        lprobs = rows.log_probs(h[i : i + block])
        if on_step is not None:
            on_step(t, lprobs)
        with phase("seq2seq.search.constrain"):
            lprobs = constrain(lprobs, t, row_max[i : i + block], decoding, arch, force,
                               None if prefix is None else prefix[i : i + block])
        top, tok = row_topk(lprobs, C)
        tops.append(top)
        toks.append(tok)
    return (tops[0], toks[0]) if len(tops) == 1 else (torch.cat(tops), torch.cat(toks))


def _candidates(beams: _Beams, row_top: Tensor, row_tok: Tensor) -> _Candidates:
    """Extend every beam by every token and keep each sentence's top 2K, from each beam's
    top ``C`` (``row_top``/``row_tok (N*K, C)``, :func:`_row_tops`).

    The top 2K of a sentence's ``K x V`` extensions are among the top 2K of each beam's row
    (a beam adds one score to its whole row, which keeps the row's order), so only
    ``(N, K, 2K)`` scores are formed: no pass over all ``K x V`` to add the beam scores."""
    N, K = beams.scores.shape
    C = row_top.shape[1]
    total = (row_top.view(N, K, C) + beams.scores[..., None]).view(N, K * C)
    scores, idx = total.topk(min(2 * K, K * C), dim=1)  # sorted
    return _Candidates(scores, idx // C, row_tok.view(N, K * C).gather(1, idx))


def _histories(beams: _Beams, origin: Tensor, tok: Tensor, t: int) -> Tensor:
    """``(N, c, T)`` ids so far of the extensions ``tok (N, c)`` of beams ``origin (N, c)``
    at step ``t``: formed only for the candidates kept (the next beams, finishing ones)."""
    tokens = beams.tokens.gather(1, origin[..., None].expand(-1, -1, beams.tokens.shape[2]))
    tokens[:, :, t] = tok
    return tokens


def _next_beams(beams: _Beams, cand: _Candidates, is_eos: Tensor, rank: Tensor, t: int
                ) -> tuple[_Beams, Tensor]:
    """The K best non-EOS candidates become the beams (topk is sorted: order by rank).
    ``is_eos (N, 2K)``: which candidates end with EOS; ``rank (2K,)``: 0 .. 2K-1.
    Returns them and each new beam's parent row ``(N, K)`` among the old ``N*K`` rows."""
    N, K = beams.scores.shape
    live = (rank + is_eos * 2 * K).argsort(dim=1)[:, :K]  # (N, K)
    origin, tok = cand.origin.gather(1, live), cand.tok.gather(1, live)
    return _Beams(beams.sent, cand.scores.gather(1, live), _histories(beams, origin, tok, t),
                  tok.view(-1), beams.max_len, beams.row0), beams.row0 + origin


def _offer_finished(pool: FinishedPool, beams: _Beams, cand: _Candidates, is_eos: Tensor,
                    t: int, decoding: DecodingConfig, last_step: bool) -> None:
    """EOS candidates ranked within the top K (all top K at a forced last step) finish;
    a step where none does leaves the pool alone (one sync instead of its merge)."""
    K = beams.scores.shape[1]
    finishing = ((is_eos[:, :K] | last_step) & cand.scores[:, :K].isfinite())
    if not bool(finishing.any()):
        return
    scores = cand.scores[:, :K]  # only the top K can finish
    norm = scores / length_penalty(float(t + 1), decoding)
    pool.merge(beams.sent, _histories(beams, cand.origin[:, :K], cand.tok[:, :K], t),
               scores.masked_fill(~finishing, NEG_INF), norm.masked_fill(~finishing, NEG_INF),
               t + 1)


def _drop_done(rows: DecoderRows, beams: _Beams, parents: Tensor, done: Tensor,
               n_done: int) -> _Beams:
    """Reorder the decoder rows to the new beams; the ``n_done`` sentences that are done
    leave the batch (their memory rows too), the others keep theirs without a copy."""
    if n_done == 0:
        rows.select(parents.view(-1), cross=False)
        return beams
    keep = (~done).nonzero().squeeze(1)
    rows.select(parents[keep].view(-1), cross=True)
    N, K = keep.shape[0], beams.scores.shape[1]
    return _Beams(beams.sent[keep], beams.scores[keep], beams.tokens[keep],
                  beams.last.view(-1, K)[keep].reshape(-1), beams.max_len[keep],
                  beams.row0[:N])


@torch.inference_mode()
def beam_search(model: Seq2Seq, src: Tensor, decoding: DecodingConfig, *, use_cache: bool = True,
                force_length: int | None = None, on_step=None, stop_early: bool = True,
                first: Tensor | None = None) -> tuple[list[list[Hypothesis]], Tensor]:
    """Beam search of ``src (B, S)`` with ``decoding.beam_size`` beams; returns per sentence
    its ``decoding.nbest`` hypotheses best first, and the 1-best ids ``(B, T)``.
    ``stop_early=False`` runs every sentence to max length: the reference that shows the
    :func:`finish_bound` stop is exact. ``first (B,)``: each sentence's first decoder input
    instead of BOS."""
    K, arch = decoding.beam_size, model.arch
    n = pool_size(decoding)
    B, device, eos = src.shape[0], src.device, arch.eos_id
    max_len_all = max_lengths(src, decoding, arch.pad_id, arch.max_positions)
    T = steps_for(model, max_len_all, force_length)
    rows, first = start(model, src, use_cache, T, beam_size=K, first=first)
    pool = FinishedPool.empty(B, n, T, arch.pad_id, device)
    scores = torch.full((B, K), NEG_INF, device=device)
    scores[:, 0] = 0.0
    sent = torch.arange(B, device=device)
    beams = _Beams(sent, scores, torch.full((B, K, T), arch.pad_id, dtype=torch.long, device=device),
                   first, max_len_all, sent[:, None] * K)
    rank = torch.arange(min(2 * K, K * min(2 * K, arch.tgt_vocab_size)), device=device)
    scorer = None if force_length is not None or on_step is not None else _scorer(
        model, rows, src, decoding, K)
    limits = torch.tensor([0, int(max_len_all[0]), decoding.min_len,
                           decoding.no_repeat_ngram_size])  # the scorer's rules
    for t in range(T):
        if scorer is not None:  # one sentence (N stays 1: it ends the search when done)
            limits[0] = t
            cand = _Candidates(*(x[None] for x in scorer(
                rows.cache, beams.last, beams.tokens[0], beams.scores[0], limits)))
        else:
            row_top, row_tok = _row_tops(rows, beams, t, decoding, arch,
                                         force_length is not None, on_step)
            cand = _candidates(beams, row_top, row_tok)
        last_step = force_length is not None and t == T - 1
        is_eos = cand.tok == eos
        _offer_finished(pool, beams, cand, is_eos, t, decoding, last_step)
        max_len = beams.max_len
        beams, parents = _next_beams(beams, cand, is_eos, rank, t)
        done = (t >= max_len) if force_length is None else torch.full_like(max_len, last_step, dtype=torch.bool)
        if stop_early:
            done = done | _finished(pool, beams, t, max_len, decoding, force_length)
        n_done = int(done.sum())  # the step's one sync for stopping
        if n_done == done.shape[0]:
            break
        beams = _drop_done(rows, beams, parents, done, n_done)
    nbest = min(decoding.nbest, K)
    return [h[:nbest] for h in pool.hypotheses(eos)], pool.tokens[:, 0]


def _scorer(model, rows, src: Tensor, decoding: DecodingConfig, K: int):
    """One sentence's compiled scoring of a step (``compiled_beam``: the step's top 2K
    extensions in one package call), or None: :func:`_row_tops` and :func:`_candidates`."""
    beam = model.inference.compiled_beam if isinstance(model, Seq2Seq) else None
    if (beam is None or not isinstance(rows, DecoderRows) or rows.cache is None
            or not beam.applies(model, src, decoding)):
        return None
    loader = beam.scorer(model, K)
    return None if loader is None else functools.partial(beam.candidates, model, loader)


def pool_size(decoding: DecodingConfig) -> int:
    """Finished hypotheses kept per sentence: the n-best (exact), or as many as the stopping
    rule counts (beam_size for "heuristic", patience x beam_size for "patience")."""
    n = min(decoding.nbest, decoding.beam_size)  # a beam holds K hypotheses at most
    if decoding.stopping == "heuristic":
        return max(n, decoding.beam_size)
    if decoding.stopping == "patience":
        return max(n, math.ceil(decoding.patience * decoding.beam_size))
    return n


def _finished(pool: FinishedPool, beams: _Beams, t: int, max_len: Tensor,
              decoding: DecodingConfig, force_length: int | None) -> Tensor:
    """``(N,)`` which active sentences the stopping rule ends after step ``t``: the pool's
    last slot (the n-th / K-th / patience x K-th finished) is filled and, unless the rule is
    "patience", scores at least what a live hypothesis could still reach."""
    last = pool.norm[beams.sent, -1]
    if decoding.stopping == "patience" and force_length is None:
        return last > NEG_INF
    return last >= finish_bound(beams.scores[:, 0], t, max_len, decoding, force_length)

