"""Decoding: greedy, beam search and sampling over ``Seq2Seq.encode``/``decode`` + the cache.

Everything is batched over sentences of mixed length (``src (B, S)`` right-padded); the only
Python loop is over time steps. Shapes: ``B`` sentences, ``N`` of them still active, ``T``
steps, ``V`` target vocabulary.

Conventions shared by all three searches (the rules themselves: ``seq2seq.decoding.rules``)
- Step ``t`` (0-based) produces output token ``t``; its decoder input is ``bos y_0 .. y_{t-1}``.
- Each sentence may emit up to ``max_len`` tokens before EOS (``rules.max_lengths``); at
  step ``max_len`` only EOS is allowed, so every hypothesis ends with EOS.
- ``force_length=N`` forbids EOS at every step and stops after exactly N tokens (benchmarks).
- Finished sentences leave the active batch: their decoder rows (and memory) are dropped,
  so they stop costing compute.
- ``use_cache=False`` recomputes the whole prefix each step (the reference path).
- ``on_step(t, log_probs)`` (debug hook) sees the raw log-probs ``(rows, V)`` of each step,
  before any masking: rows are the active sentences (greedy/sample) or their beams (beam).
  The search then modifies that tensor in place: a hook that keeps it must copy it.

Call on a model in eval mode (dropout would make every step random). Every search also takes
an ensemble (``seq2seq.decoding.ensemble.Ensemble``): the mean of its members' log-probs.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from seq2seq.config import DecodingConfig
from seq2seq.data.batch import collate_tgt_in
from seq2seq.decoding.beam import beam_search as _beam_search
from seq2seq.decoding.beam import finish_bound  # noqa: F401  (part of the search API)
from seq2seq.decoding.rules import NEG_INF, constrain, length_penalty, max_lengths
from seq2seq.decoding.state import Hypothesis, SearchResult, start, steps_for, to_hypotheses
from seq2seq.model import Attentions, Seq2Seq
from seq2seq.profiling import phase

__all__ = ["Hypothesis", "SearchResult", "beam_search", "best_attentions", "filter_logits",
           "finish_bound", "greedy", "max_lengths", "sample", "search"]

StepHook = Callable[[int, Tensor], None]
Chooser = Callable[[Tensor], Tensor]  # step log-probs (R, V) -> chosen ids (R,)


def _single_path(model: Seq2Seq, src: Tensor, decoding: DecodingConfig, choose: Chooser, *,
                 use_cache: bool, force_length: int | None, on_step: StepHook | None,
                 first: Tensor | None = None):
    """One hypothesis per row of ``src (B, S)``: returns ids ``(B, T)`` (EOS then pad), total
    log-probs ``(B,)`` and lengths ``(B,)`` counting EOS. ``first (B,)``: each row's first
    decoder input instead of BOS (a decoder-side language tag)."""
    B, device, arch = src.shape[0], src.device, model.arch
    max_len = max_lengths(src, decoding, arch.pad_id, arch.max_positions)  # (B,)
    first_limit = int(max_len.min())  # no row is at its limit before: no sync per step till then
    T = steps_for(model, max_len, force_length)
    state, last = start(model, src, use_cache, T, first=first)
    out = torch.full((B, T), arch.pad_id, dtype=torch.long, device=device)
    scores = torch.zeros(B, device=device)
    lengths = torch.full((B,), T, dtype=torch.long, device=device)  # a row ending at t: t + 1
    rows = None  # original sentence of each active row; None while all B are (no gathers)
    for t in range(T):
        lprobs = state.step(last)  # (N, V)
        if on_step is not None:
            on_step(t, lprobs)
        with phase("seq2seq.search.constrain"):
            prefix = _active(out, rows)[:, :t] if decoding.no_repeat_ngram_size else None  # (N, t)
            lprobs = constrain(lprobs, t, _active(max_len, rows), decoding, arch,
                               force_length is not None, prefix, first_limit)
        tok = choose(lprobs)  # (N,)
        chosen = lprobs.gather(1, tok[:, None]).squeeze(1)
        if rows is None:
            scores += chosen
            out[:, t] = tok
        else:
            scores[rows] += chosen
            out[rows, t] = tok
        if t == T - 1:
            break
        done = tok == arch.eos_id
        if bool(done.any()):  # the step's one sync: rows end rarely
            lengths[done if rows is None else rows[done]] = t + 1
            keep = (~done).nonzero().squeeze(1)
            if keep.shape[0] == 0:
                break
            state.select(keep)
            rows, tok = (keep if rows is None else rows[keep]), tok[keep]
        last = tok
    return out, scores, lengths


def _active(x: Tensor, rows: Tensor | None) -> Tensor:
    """The active rows of ``x (B, ...)``: all while ``rows`` is None."""
    return x if rows is None else x[rows]


@torch.inference_mode()
def greedy(model: Seq2Seq, src: Tensor, decoding: DecodingConfig, *, use_cache: bool = True,
           force_length: int | None = None, need_attention: bool = False,
           on_step: StepHook | None = None, first: Tensor | None = None) -> SearchResult:
    """Arg-max decoding of ``src (B, S)``; one hypothesis per sentence."""
    src = src.to(_device(model))
    whole = model.inference.compiled_greedy if isinstance(model, Seq2Seq) else None
    fast = (whole.run(model, src, decoding, first) if whole is not None and use_cache
            and force_length is None and on_step is None else None)
    out, scores, lengths = fast if fast is not None else _single_path(
        model, src, decoding, lambda lp: lp.argmax(-1),
        use_cache=use_cache, force_length=force_length, on_step=on_step, first=first,
    )
    norm = scores / length_penalty(lengths.to(scores.dtype), decoding)
    hyps = [[h] for h in to_hypotheses(out, scores, norm, model.arch.eos_id)]
    return _result(model, src, hyps, out, need_attention, first)


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
def sample(model: Seq2Seq, src: Tensor, decoding: DecodingConfig, *, use_cache: bool = True,
           force_length: int | None = None, need_attention: bool = False,
           on_step: StepHook | None = None, generator: torch.Generator | None = None,
           first: Tensor | None = None) -> SearchResult:
    """Ancestral sampling with temperature, top-k and top-p; ``decoding.nbest`` samples per
    sentence, best first. Scores are the model's log-probs (temperature 1, unfiltered), so
    they compare with greedy's. Seeded by ``generator``, else ``decoding.seed``, else torch's
    RNG."""
    src = src.to(_device(model))
    if generator is None and decoding.seed is not None:
        generator = torch.Generator(device=src.device).manual_seed(decoding.seed)

    def choose(lprobs: Tensor) -> Tensor:
        logits = filter_logits(lprobs / decoding.temperature, decoding.top_k, decoding.top_p)
        return torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(1)

    n = decoding.nbest
    out, scores, lengths = _single_path(
        model, src.repeat_interleave(n, dim=0), decoding, choose,
        use_cache=use_cache, force_length=force_length, on_step=on_step,
        first=None if first is None else first.repeat_interleave(n),
    )
    # Rank each sentence's n samples by normalized score: (B, n) -> sorted row indices.
    norm = (scores / length_penalty(lengths.to(scores.dtype), decoding)).view(-1, n)
    first = torch.arange(0, norm.numel(), n, device=src.device)[:, None]
    order = (norm.argsort(dim=1, descending=True) + first).view(-1)
    flat = to_hypotheses(out[order], scores[order], norm.view(-1)[order], model.arch.eos_id)
    hyps = [flat[i : i + n] for i in range(0, len(flat), n)]
    return _result(model, src, hyps, out[order[::n]], need_attention, first)


def beam_search(model: Seq2Seq, src: Tensor, decoding: DecodingConfig, *, use_cache: bool = True,
                force_length: int | None = None, need_attention: bool = False,
                on_step: StepHook | None = None, stop_early: bool = True,
                first: Tensor | None = None) -> SearchResult:
    """Beam search (``seq2seq.decoding.beam``); ``decoding.nbest`` hypotheses per sentence."""
    src = src.to(_device(model))
    hyps, out = _beam_search(model, src, decoding, use_cache=use_cache,
                             force_length=force_length, on_step=on_step, stop_early=stop_early,
                             first=first)
    return _result(model, src, hyps, out, need_attention, first)


def search(model: Seq2Seq, src: Tensor, decoding: DecodingConfig, **kwargs) -> SearchResult:
    """Run the search named by ``decoding.method`` (keyword options as for the functions)."""
    fn = {"greedy": greedy, "beam": beam_search, "sample": sample}[decoding.method]
    if fn is not sample:
        kwargs.pop("generator", None)
    return fn(model, src, decoding, **kwargs)


def _device(model: Seq2Seq) -> torch.device:
    return next(model.parameters()).device


def _result(model: Seq2Seq, src: Tensor, hyps: list[list[Hypothesis]], out: Tensor,
            need_attention: bool, first: Tensor | None = None) -> SearchResult:
    attn = best_attentions(model, src, [h[0].tokens for h in hyps], first) if need_attention else None
    return SearchResult(hyps, out, attn)


def best_attentions(model: Seq2Seq, src: Tensor, tokens: list[list[int]],
                    first: Tensor | None = None) -> list[Attentions]:
    """Exact attention weights of the given outputs: one teacher-forced pass over
    ``bos + tokens`` (or ``first (B,)`` + tokens; batched, then cut per sentence to its own
    lengths)."""
    arch = model.arch
    start = arch.bos_id if first is None else first.cpu().numpy()
    tgt_in = collate_tgt_in(tokens, arch.pad_id, start).to(src.device)  # (B, T)
    weights = model.attentions(src, tgt_in)
    src_len = (src != arch.pad_id).sum(1).tolist()
    out = []
    for i, (s, ids) in enumerate(zip(src_len, tokens)):
        t = len(ids) + 1
        out.append(Attentions(
            [w[i : i + 1, :, :s, :s] for w in weights.encoder_self],
            [w[i : i + 1, :, :t, :t] for w in weights.decoder_self],
            [w[i : i + 1, :, :t, :s] for w in weights.decoder_cross],
        ))
    return out
