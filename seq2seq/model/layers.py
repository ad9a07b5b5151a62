"""Building blocks: linear layers, positional encodings, embeddings, multi-head attention,
feed-forward, and the encoder/decoder layers (norms and the residual wrapper:
``seq2seq.model.norms``).

Activations are ``(B, T, d_model)``; per-head tensors ``(B, H, T, d_k | d_v)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seq2seq.config import ModelConfig
from seq2seq.model.attention import attention, reference_attention
from seq2seq.model.cache import KV, DecoderCache
from seq2seq.model.dropout import Dropout
from seq2seq.model.norms import Residual
from seq2seq.profiling import phase


# ---------------------------------------------------------------- linear layers
class Linear(nn.Linear):
    """``nn.Linear`` (the same parameters and state-dict keys) with a declared ``kernel``:
    how it multiplies at inference, set by a compute type (``model/inference/compute.py``);
    None: ``F.linear``, as training and float32 run."""

    kernel: Callable[[Linear, Tensor], Tensor] | None

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None,
                 dtype=None):
        super().__init__(in_features, out_features, bias, device, dtype)
        self.kernel = None

    def forward(self, x: Tensor) -> Tensor:
        return linear(self, x)


def linear(m: Linear, x: Tensor) -> Tensor:
    """``m(x)`` ``(..., in) -> (..., out)`` without a module call: through ``m.kernel``, else
    ``F.linear``. ``m``: a :class:`Linear` or any object with ``weight``, ``bias`` and
    ``kernel`` (``compute.Weights``)."""
    kernel = m.kernel  # an instance attribute: one plain read, nothing added to float32's step
    return F.linear(x, m.weight, m.bias) if kernel is None else kernel(m, x)


# ---------------------------------------------------------------- positions
def sinusoidal_table(n_positions: int, d_model: int) -> Tensor:
    """``(n_positions, d_model)``: sin on even dims, cos on odd dims (Vaswani et al.).
    Computed in float64, then rounded: the table Marian/Pegasus build (float32 angles
    drift by up to 1.6e-5 at position 512, which an imported model's logits amplify)."""
    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]
    inv_freq = torch.exp(-math.log(10000.0) * torch.arange(0, d_model, 2).double() / d_model)
    table = torch.zeros(n_positions, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(pos * inv_freq)
    table[:, 1::2] = torch.cos(pos * inv_freq)
    return table.float()


class RotaryEmbedding(nn.Module):
    """RoPE: rotate pairs of q/k channels by position-dependent angles (Su et al. 2021)."""

    def __init__(self, head_dim: int, max_positions: int, base: float = 10000.0):
        super().__init__()
        inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2).float() / head_dim)
        angles = torch.arange(max_positions).float()[:, None] * inv_freq[None, :]  # (P, d/2)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x: Tensor, start: int = 0) -> Tensor:
        """``x (B, H, T, d)`` at positions ``start .. start+T-1`` -> rotated, same shape."""
        T = x.shape[2]
        cos, sin = self.cos[start : start + T], self.sin[start : start + T]
        x1, x2 = x[..., 0::2], x[..., 1::2]
        rotated = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
        return rotated.flatten(-2)


class Embedding(nn.Module):
    """Token embedding scaled by sqrt(d_model), plus absolute positions, then dropout."""

    def __init__(self, vocab_size: int, arch: ModelConfig, tokens: nn.Embedding | None = None):
        super().__init__()
        self.tokens = tokens if tokens is not None else nn.Embedding(vocab_size, arch.d_model)
        if tokens is None:
            nn.init.normal_(self.tokens.weight, std=arch.d_model**-0.5)
            with torch.no_grad():
                self.tokens.weight[arch.pad_id].zero_()
        self.scale = math.sqrt(arch.d_model)
        self.max_positions = arch.max_positions
        self.kind = arch.positional
        if self.kind == "sinusoidal":
            table = sinusoidal_table(arch.max_positions, arch.d_model)
            self.register_buffer("positions", table, persistent=False)
        elif self.kind == "learned":
            self.positions = nn.Parameter(torch.randn(arch.max_positions, arch.d_model) * 0.02)
        self.dropout = Dropout(arch.dropout)

    def forward(self, ids: Tensor, start: int = 0) -> Tensor:
        """``ids (B, T)`` at positions ``start..`` -> ``(B, T, d_model)``."""
        T = ids.shape[1]
        if start + T > self.max_positions:
            raise ValueError(
                f"sequence of {start + T} tokens exceeds model.max_positions={self.max_positions}"
            )
        x = self.tokens(ids) * self.scale
        if self.kind != "rope":  # rope rotates q/k inside attention instead
            x = x + self.positions[start : start + T]
        return self.dropout(x)


# ---------------------------------------------------------------- attention + FFN
class MultiHeadAttention(nn.Module):
    """h heads with independent ``d_k``/``d_v``; W^Q, W^K, W^V (fused as W^KV), then W^O.

    Parameters: ``d_model * h * (2 d_k + d_v) + h d_v * d_model`` (+ biases), i.e.
    ``4 d_model^2`` when ``d_k = d_v = d_model / h``, whatever h is.
    """

    def __init__(self, arch: ModelConfig, rope: RotaryEmbedding | None = None):
        super().__init__()
        self.h, self.d_k, self.d_v = arch.n_heads, arch.head_dim_k, arch.head_dim_v
        self.w_q = Linear(arch.d_model, self.h * self.d_k)
        self.w_kv = Linear(arch.d_model, self.h * (self.d_k + self.d_v))  # K and V in one matmul
        self.w_o = Linear(self.h * self.d_v, arch.d_model)
        self.dropout_p = arch.attention_dropout
        self.rope = rope

    def split_heads(self, x: Tensor, d: int) -> Tensor:
        """``(B, T, h*d) -> (B, h, T, d)``."""
        B, T, _ = x.shape
        return x.view(B, T, self.h, d).transpose(1, 2)

    def project_kv(self, x: Tensor, start: int = 0) -> tuple[Tensor, Tensor]:
        """Keys ``(B, H, S, d_k)`` and values ``(B, H, S, d_v)`` of ``x (B, S, d_model)``."""
        k, v = linear(self.w_kv, x).split([self.h * self.d_k, self.h * self.d_v], dim=-1)
        k, v = self.split_heads(k, self.d_k), self.split_heads(v, self.d_v)
        if self.rope is not None:
            k = self.rope(k, start)
        return k, v

    def forward(
        self,
        x: Tensor,
        kv: tuple[Tensor, Tensor],
        mask: Tensor | None,
        start: int = 0,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Queries from ``x (B, L, d_model)`` at positions ``start..`` attend over projected
        ``kv = (K (B,H,S,d_k), V (B,H,S,d_v))``. Returns ``(B, L, d_model)`` and, on request,
        weights ``(B, H, L, S)``."""
        q = self.split_heads(linear(self.w_q, x), self.d_k)
        if self.rope is not None:
            q = self.rope(q, start)
        p = self.dropout_p if self.training else 0.0
        if need_weights:
            out, weights = reference_attention(q, *kv, mask, dropout_p=p)
        else:
            out, weights = attention(q, *kv, mask, dropout_p=p), None
        B, _, L, _ = out.shape
        return linear(self.w_o, out.transpose(1, 2).reshape(B, L, self.h * self.d_v)), weights


class FeedForward(nn.Module):
    """Position-wise ``W2 act(W1 x)`` with optional dropout after the activation."""

    def __init__(self, arch: ModelConfig):
        super().__init__()
        self.w1 = Linear(arch.d_model, arch.d_ff)
        self.w2 = Linear(arch.d_ff, arch.d_model)
        self.act = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu}[arch.activation]
        self.dropout = Dropout(arch.activation_dropout)

    def forward(self, x: Tensor) -> Tensor:
        return linear(self.w2, self.dropout(self.act(linear(self.w1, x))))


# ---------------------------------------------------------------- layers
class EncoderLayer(nn.Module):
    def __init__(self, arch: ModelConfig, rope: RotaryEmbedding | None = None):
        super().__init__()
        self.self_attn = MultiHeadAttention(arch, rope)
        self.ff = FeedForward(arch)
        self.attn_block, self.ff_block = Residual(arch), Residual(arch)

    def forward(self, x: Tensor, mask: Tensor | None, need_weights: bool = False):
        """``x (B, S, d)``, ``mask (B, 1, 1, S)`` -> ``(B, S, d)``, self-attn weights or None."""

        def self_attend(h: Tensor):
            return self.self_attn(h, self.self_attn.project_kv(h), mask, need_weights=need_weights)

        x, weights = self.attn_block(x, self_attend)
        x, _ = self.ff_block(x, lambda h: (self.ff(h), None))
        return x, weights


class DecoderLayer(nn.Module):
    def __init__(self, arch: ModelConfig, rope: RotaryEmbedding | None = None):
        super().__init__()
        self.self_attn = MultiHeadAttention(arch, rope)
        self.cross_attn = MultiHeadAttention(arch)  # no rope: source and target positions differ
        self.ff = FeedForward(arch)
        self.self_block, self.cross_block, self.ff_block = Residual(arch), Residual(arch), Residual(arch)

    def forward(
        self,
        y: Tensor,
        self_mask: Tensor | None,
        cross_kv: KV,
        memory_mask: Tensor | None,
        cache: DecoderCache | None = None,
        index: int = 0,
        start: int = 0,
        need_weights: bool = False,
    ) -> tuple[Tensor, tuple[Tensor | None, Tensor | None]]:
        """``y (B, L, d_model)``: the L new target positions ``start ..``. ``cross_kv``: the
        memory's K ``(M, H, S, d_k)`` / V ``(M, H, S, d_v)``, ``B = M * g``: g rows per memory
        row (beam search's hypotheses of one sentence). With ``cache``, this layer's
        (number ``index``) new self-attention K/V are appended to the P cached ones and the
        queries attend over all ``P + L``; without, over the L given positions only.

        Returns ``(B, L, d_model)`` and ``(self_weights (B, H, L, P+L), cross_weights
        (B, H, L, S))``, both None unless ``need_weights``.
        """

        def self_attend(h: Tensor):
            k, v = self.self_attn.project_kv(h, start)
            if cache is not None:
                k, v = cache.append(index, k, v)
            return self.self_attn(h, (k, v), self_mask, start, need_weights)

        with phase("seq2seq.decoder.self_attn"):
            y, self_w = self.self_block(y, self_attend)
        def cross_attend(h: Tensor):
            # R = M * g rows, g per memory row (beams of a sentence): their queries become
            # g*L queries of that row, a view, so the M memory K/V rows serve all R.
            (R, L, D), M = h.shape, cross_kv[0].shape[0]
            out, w = self.cross_attn(h.reshape(M, R // M * L, D), cross_kv, memory_mask,
                                     need_weights=need_weights)
            return out.view(R, L, D), None if w is None else _ungroup(w, R, L)

        with phase("seq2seq.decoder.cross_attn"):
            y, cross_w = self.cross_block(y, cross_attend)
        with phase("seq2seq.decoder.ffn"):
            y, _ = self.ff_block(y, lambda h: (self.ff(h), None))
        return y, (self_w, cross_w)


def _ungroup(weights: Tensor, R: int, L: int) -> Tensor:
    """Cross weights ``(M, H, g*L, S)`` of grouped queries back to ``(R, H, L, S)``."""
    M, H, _, S = weights.shape
    return weights.view(M, H, R // M, L, S).transpose(1, 2).reshape(R, H, L, S)
