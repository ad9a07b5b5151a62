"""Scaled dot-product attention and its masks.

Notation (the chapter's): queries ``(B, H, L, d_k)``, keys ``(B, H, S, d_k)``,
values ``(B, H, S, d_v)``; scores and weights ``(B, H, L, S)``; output ``(B, H, L, d_v)``.

Mask convention: boolean, ``True`` = may attend. A mask is either ``(L, S)`` or rank 4
with each dim equal to ``(B, H, L, S)``'s or 1. Anything else is refused: silent
broadcasting along the wrong axis is the classic masking bug.

Two paths with the same maths:
- :func:`attention` (the fast path) routes by shape to ``F.scaled_dot_product_attention`` or
  to two plain matmuls, whichever is faster for that size on CPU;
- :func:`reference_attention` spells out scores -> scale -> additive -inf -> softmax -> @V
  and returns the weights (tests, plots).
A query row with no allowed key gives a zero output (and finite gradients) on both.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from seq2seq.model.dropout import dropout


def causal_mask(
    L: int, S: int | None = None, *, align: str = "bottom_right", device=None
) -> Tensor:
    """``(L, S)`` mask where query ``i`` may see keys ``0 .. S-L+i`` (bottom-right).

    Bottom-right is what cached decoding needs: the L new queries are the *last* L
    positions of the S keys. ``align="top_left"`` (query i sees keys 0..i) is what
    PyTorch's ``is_causal=True`` does; it is only the same when L == S.
    """
    S = L if S is None else S
    if align not in ("bottom_right", "top_left"):
        raise ValueError(f"causal_mask: align must be 'bottom_right' or 'top_left', got {align!r}")
    offset = S - L if align == "bottom_right" else 0
    i = torch.arange(L, device=device).unsqueeze(1)
    j = torch.arange(S, device=device).unsqueeze(0)
    return j <= i + offset


def padding_mask(ids: Tensor, pad_id: int) -> Tensor:
    """Key mask ``(B, 1, 1, S)`` from token ids ``(B, S)``: True where not padding."""
    return (ids != pad_id)[:, None, None, :]


def lengths_mask(lengths: Tensor, S: int) -> Tensor:
    """Key mask ``(B, 1, 1, S)`` from lengths ``(B,)``: True for positions < length."""
    return (torch.arange(S, device=lengths.device)[None, :] < lengths[:, None])[:, None, None, :]


def _check(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor | None:
    """Validate shapes; return the mask as rank 4 (or None)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(
                f"attention: expected {name} of rank 4 (B, H, len, dim), got shape {tuple(t.shape)}"
            )
    B, H, L, d_k = q.shape
    S = k.shape[2]
    if k.shape[:2] != (B, H) or k.shape[3] != d_k:
        raise ValueError(
            f"attention: expected k of shape ({B}, {H}, S, {d_k}) to match q {tuple(q.shape)}, "
            f"got {tuple(k.shape)}"
        )
    if v.shape[:3] != (B, H, S):
        raise ValueError(
            f"attention: expected v of shape ({B}, {H}, {S}, d_v) to match k {tuple(k.shape)}, "
            f"got {tuple(v.shape)}"
        )
    if mask is None:
        return None
    if mask.dtype != torch.bool:
        raise ValueError(f"attention: mask must be boolean (True = may attend), got {mask.dtype}")
    given = tuple(mask.shape)  # report the caller's shape, not the unsqueezed one
    if mask.dim() == 2:
        mask = mask[None, None]
    full = (B, H, L, S)
    if mask.dim() != 4 or any(m not in (1, f) for m, f in zip(mask.shape, full)):
        raise ValueError(
            f"attention: expected a mask of shape (L, S) = ({L}, {S}) or broadcastable as "
            f"(B|1, H|1, L|1, S|1) to (B, H, L, S) = {full}, got {given}"
        )
    return mask


def _rows_with_keys(mask: Tensor) -> Tensor:
    """``(B|1, H|1, L|1, 1)``: True where a query row has at least one allowed key."""
    return mask.any(dim=-1, keepdim=True)


# Largest score matrix per head (L x S) for which the explicit matmul path beats PyTorch's
# CPU SDPA kernel, measured on 2 cores (``python scripts/benchmark.py --sections attention``):
# fwd+bwd at L = S = 20 the matmul path takes 0.46x SDPA's time, at 64 x 64 0.8-0.9x, at
# 128 x 128 1.2x; one-query decode steps (1 x 20) 0.6x. Short sentences (Multi30k: ~13
# tokens) are all on the matmul side; long documents go to SDPA.
MATMUL_MAX_SCORES = 64 * 64


def attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, dropout_p: float = 0.0
) -> Tensor:
    """Fast path: ``softmax(q k^T / sqrt(d_k) + mask) v``. Returns ``(B, H, L, d_v)``.

    Routed by shape: :func:`matmul_attention` for score matrices of at most
    ``MATMUL_MAX_SCORES`` entries, else :func:`sdpa_attention`; the same maths as
    :func:`reference_attention` (tested equal, gradients included)."""
    mask = _check(q, k, v, mask)
    has_key = None if mask is None else _rows_with_keys(mask)
    empty_rows = has_key is not None and not bool(has_key.all())
    if empty_rows:  # softmax over all -inf would be NaN: open such rows, zero them after
        mask = mask | ~has_key
    small = q.shape[2] * k.shape[2] <= MATMUL_MAX_SCORES
    out = (matmul_attention if small else sdpa_attention)(q, k, v, mask, dropout_p)
    return out.masked_fill(~has_key, 0.0) if empty_rows else out


def sdpa_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
                   dropout_p: float = 0.0) -> Tensor:
    """``F.scaled_dot_product_attention``; every query row must have an allowed key."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)


def matmul_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
                     dropout_p: float = 0.0) -> Tensor:
    """Two matmuls around a softmax; every query row must have an allowed key."""
    scores = (q * (1.0 / math.sqrt(q.shape[-1]))) @ k.transpose(-2, -1)  # (B, H, L, S)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = dropout(torch.softmax(scores, dim=-1), dropout_p, dropout_p > 0.0)
    return weights @ v


def reference_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, dropout_p: float = 0.0
) -> tuple[Tensor, Tensor]:
    """The chapter's five steps, explicitly. Returns ``(out (B,H,L,d_v), weights (B,H,L,S))``."""
    mask = _check(q, k, v, mask)
    scores = q @ k.transpose(-2, -1)  # (B, H, L, S): L x S, not square
    scores = scores / math.sqrt(q.shape[-1])
    if mask is not None:
        # Mask *before* the softmax (additive -inf), so allowed weights sum to 1.
        scores = scores.masked_fill(~mask, float("-inf"))
        # Rows with no allowed key: give softmax finite input, then zero the weights.
        scores = scores.masked_fill(~_rows_with_keys(mask), 0.0)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    return weights @ v, weights
