"""The output rules every search shares: how long an output may be, how hypotheses of
different lengths compare, and which tokens a step may emit.

- Max length per sentence ``max_len = floor(a * |src| + b)`` tokens *before* EOS, capped at
  ``max_positions - 1`` (so the EOS step still has a position). At step ``max_len`` only
  EOS is allowed: every hypothesis ends with EOS and its score includes EOS's log-prob.
- A source longer than the model accepts is cut to ``max_positions - 1`` tokens (room for
  the EOS that ``collate_src`` appends): :func:`truncate_source`.
- Min length: EOS gets -inf at steps ``t < min(min_len, max_len)`` (unless the n-gram rule
  below has banned every other token). Masks are applied to the
  log-probs (no renormalisation), so scores stay true model log-probs.
- ``|y|`` for the length penalty counts the generated tokens including EOS.
- No repeated n-gram (``no_repeat_ngram_size = n > 0``, as in fairseq and HF generate): a
  token that would complete an n-gram already in the row's output gets -inf. EOS is never
  in an output before its end, so it is never banned: a row can always end.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch
from torch import Tensor

from seq2seq.config import DecodingConfig, ModelConfig

NEG_INF = float("-inf")


def truncate_source(ids: Sequence[int], max_positions: int) -> list[int]:
    """Source ids the encoder accepts: at most ``max_positions - 1`` (room for EOS)."""
    return list(ids[: max_positions - 1])


def max_lengths(src: Tensor, decoding: DecodingConfig, pad_id: int, max_positions: int) -> Tensor:
    """``(B,)`` longest output (tokens before EOS) per sentence: ``a*|src| + b``, capped."""
    return length_limits((src != pad_id).sum(1), decoding, max_positions)


def length_limits(src_len: Tensor, decoding: DecodingConfig, max_positions: int) -> Tensor:
    """:func:`max_lengths` from source lengths ``(B,)`` (EOS included)."""
    # Capped in float64 before the cast: a huge a or b (1e30) must mean "the model's
    # limit", not wrap around int64 to a length of 1.
    limit = torch.floor(decoding.max_len_a * src_len.double() + float(decoding.max_len_b))
    return limit.clamp(1, max_positions - 1).long()


def length_penalty(lengths: Tensor | float, decoding: DecodingConfig) -> Tensor | float:
    """Divisor of the total log-prob: GNMT ``((5+|y|)/6)^alpha``, ``|y|`` (average) or 1."""
    if decoding.length_penalty == "gnmt":
        return ((5.0 + lengths) / 6.0) ** decoding.alpha
    if decoding.length_penalty == "average":
        return lengths * 1.0
    return lengths * 0.0 + 1.0


def ban_repeated_ngrams(lprobs: Tensor, prefix: Tensor, n: int) -> None:
    """In place: -inf in ``lprobs (R, V)`` for every token that would complete an n-gram
    already in its row's output so far, ``prefix (R, t)``. ``n = 0`` is off."""
    t = prefix.shape[1]
    if n == 0 or t < n:
        return
    windows = prefix.unfold(1, n, 1)  # (R, t - n + 1, n): every n-gram so far
    # A window whose first n-1 tokens are the row's last n-1 would be repeated by its last.
    match = (windows[:, :, :-1] == prefix[:, None, t - n + 1:]).all(-1)  # (R, t - n + 1)
    # each window's last token takes min(itself, -inf) where it matches, min(itself, +inf)
    # (unchanged) elsewhere: one scatter, no sync on the number of matches
    lprobs.scatter_reduce_(1, windows[:, :, -1], torch.where(match, NEG_INF, float("inf")),
                           "amin")


@functools.lru_cache(maxsize=16)
def never_output(pad: int, bos: int, device: torch.device) -> Tensor:
    """``(2,)`` ids no step may emit, made once (not a list turned into a tensor each step)."""
    with torch.inference_mode(False):  # usable inside and outside inference mode
        return torch.tensor([pad, bos], device=device)


def constrain(lprobs: Tensor, t: int, max_len: Tensor, decoding: DecodingConfig,
              arch: ModelConfig, force: bool, prefix: Tensor | None = None,
              first_limit: int = 0) -> Tensor:
    """Apply the output rules to step-``t`` log-probs ``(R, V)`` *in place* (a step's log-probs
    are a fresh tensor; copying R x V floats every step cost more than the rules themselves);
    ``max_len (R,)`` per row; ``prefix (R, t)`` the rows' outputs so far (needed only with
    ``no_repeat_ngram_size``); ``first_limit``: no row's ``max_len`` is below it (a caller
    that knows spares the steps before it a host sync)."""
    eos = arch.eos_id
    # pad and bos are never outputs: pad then only ever means "after EOS".
    lprobs.index_fill_(1, never_output(arch.pad_id, arch.bos_id, lprobs.device), NEG_INF)
    if prefix is not None:
        ban_repeated_ngrams(lprobs, prefix, decoding.no_repeat_ngram_size)
    if force:
        lprobs[:, eos] = NEG_INF
        return lprobs
    # Forced EOS wins over min_len: a sentence capped below min_len still ends.
    early = (t < max_len.clamp(max=decoding.min_len)) if decoding.min_len else None
    if early is not None:
        eos_lp = lprobs[:, eos].clone()
        lprobs[:, eos] = eos_lp.masked_fill(early, NEG_INF)
        if prefix is not None and decoding.no_repeat_ngram_size:
            # min_len and the n-gram ban together may leave a row no token: it ends there
            stuck = lprobs.isneginf().all(1)
            lprobs[stuck, eos] = eos_lp[stuck]
    if t < first_limit:
        return lprobs
    at_max = max_len == t
    if bool(at_max.any()):
        eos_lp = lprobs[:, eos].clone()
        lprobs[at_max] = NEG_INF
        lprobs[:, eos] = eos_lp
    return lprobs


# ------------------------------------------------------------ the rules inside a graph
NGRAM_MAX = 8  # the longest n a compiled loop bans by (a larger one decodes eagerly)


def constrain_graph(lprobs: Tensor, t: Tensor, out: Tensor, max_len: Tensor, min_len: Tensor,
                    ngram: Tensor, never: Tensor, eos: int) -> Tensor:
    """:func:`constrain` inside a compiled step, with no host sync and fixed shapes, for one
    row or the rows of one sentence: ``lprobs (V,)`` or ``(R, V)`` at step ``t`` (0-d),
    ``out (C,)`` / ``(R, C)`` the rows' outputs so far (``t`` of them, pad after),
    ``max_len``/``min_len``/``ngram`` 0-d, shared by the rows (``ngram`` at most
    :data:`NGRAM_MAX`), ``never (V,)`` 0 or ``-inf`` (pad and bos). Returns new log-probs:
    the same values :func:`constrain` leaves."""
    is_eos = torch.arange(lprobs.shape[-1], device=lprobs.device) == eos
    raw_eos = lprobs.select(-1, eos)[..., None]
    lprobs = _ban_ngrams_graph(lprobs + never, t, out, ngram)
    early = t < torch.minimum(min_len, max_len)
    lprobs = torch.where(is_eos & early, NEG_INF, lprobs)
    # min_len and the n-gram ban together may leave no token: EOS then stays allowed
    stuck = (early & (ngram > 0) & lprobs.isneginf().all(-1))[..., None]
    lprobs = torch.where(is_eos & stuck, raw_eos, lprobs)
    return torch.where((t == max_len) & ~is_eos, NEG_INF, lprobs)


def _ban_ngrams_graph(lprobs: Tensor, t: Tensor, out: Tensor, n: Tensor) -> Tensor:
    """:func:`ban_repeated_ngrams` for ``out (C,)`` or ``(R, C)``, ``n`` (0-d, 0 = off) a
    tensor: every window ``out[..., i : i + n]`` inside the first ``t`` outputs whose first
    ``n - 1`` tokens are the row's last ``n - 1`` bans its last token."""
    C = out.shape[-1]
    i = torch.arange(C, device=out.device)[:, None]  # window starts
    j = torch.arange(NGRAM_MAX - 1, device=out.device)[None, :]  # offsets in the context
    context = out[..., (t - n + 1 + j).clamp(0, C - 1)]  # (..., 1, NGRAM_MAX - 1): the last n - 1
    same = (out[..., (i + j).clamp(max=C - 1)] == context) | (j >= n - 1)  # (..., C, NGRAM_MAX - 1)
    match = same.all(-1) & (i[:, 0] <= t - n) & (n > 0)  # (..., C): whole windows only
    last = out[..., (i[:, 0] + n - 1).clamp(0, C - 1)]  # each window's last token
    return lprobs.scatter_reduce(-1, last, torch.where(match, NEG_INF, float("inf")), "amin")
