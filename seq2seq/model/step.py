"""The one-token cached decoder step, written for inference speed.

Searches feed one new token per decoder row per step. Through the general layers
(``DecoderLayer.forward``: 4-D ``matmul``, mask checks, module calls) such a step costs about
1,200 operator calls for a 4-layer decoder, and at Tiny sizes the dispatch of those calls,
not the arithmetic, is most of the time. This step does the same maths in ~25 calls per
layer on 2-D and 3-D tensors:

- self-attention: Q and K/V projections of the ``(R, d_model)`` rows, K/V appended to the
  cache, one ``bmm`` for the scores ``(R*H, 1, P+1)`` (no mask: one new query may see every
  cached position), softmax, one ``bmm`` with V;
- cross-attention: the memory's K^T ``(M*H, d_k, S)``, V ``(M*H, S, d_v)`` and the additive
  padding mask ``(M*H, 1, S)`` are laid out once per cache (``DecoderCache.cross_layout``),
  so a step is one ``baddbmm`` (mask + scaled scores), softmax and one ``bmm`` for the
  ``g`` rows (beams) that share a memory row;
- norms, activations and residuals as the layers have them (``Residual.pre``);
- every linear layer through ``compute.linear`` (the model's compute type).

``Seq2Seq.decode_hidden`` takes this path for a one-token cached step in eval mode with
no weights requested and sinusoidal or learned positions; everything else, and the
reference every search is tested against (uncached decoding), goes through the layers.
Tests hold both paths equal (``tests/model/test_model.py``).
"""

from __future__ import annotations

import math
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor

from seq2seq.model.cache import DecoderCache
from seq2seq.model.compute import linear
from seq2seq.model.layers import DecoderLayer, Embedding, MultiHeadAttention
from seq2seq.model.norms import Residual
from seq2seq.profiling import phase


def supported(model, cache: DecoderCache, L: int, want_weights: bool) -> bool:
    """Whether :func:`decoder_step` computes this call (else the general layers do)."""
    return (L == 1 and not want_weights and not model.training
            and model.arch.positional in ("sinusoidal", "learned")
            and cache.length < model.arch.max_positions and cache.cross_layout() is not None)


def embed(emb: Embedding, tokens: Tensor, position: int) -> Tensor:
    """``tokens (R,)`` at one position -> ``(R, d_model)`` (eval: no dropout)."""
    return torch.add(emb.positions[position], F.embedding(tokens, emb.tokens.weight),
                     alpha=emb.scale)


def sublayer(block: Residual, x: Tensor, f) -> Tensor:
    """``x + f(norm(x))`` (Pre-LN) or ``norm(x + f(x))`` (Post-LN), eval mode."""
    if block.pre:
        return x + f(block.norm(x))
    return block.norm(x + f(x))


def self_attention(attn: MultiHeadAttention, h: Tensor, write) -> Tensor:
    """One new query per row over the row's cached positions plus itself. ``h (R, d_model)``;
    ``write(k, v)`` stores the new K ``(R, H, 1, d_k)`` / V and returns K/V over all ``P + 1``
    positions (``DecoderCache.append``, or a compiled step's write into its buffers)."""
    R, H, d_k, d_v = h.shape[0], attn.h, attn.d_k, attn.d_v
    q = linear(attn.w_q, h).view(R * H, 1, d_k)
    k, v = linear(attn.w_kv, h).split([H * d_k, H * d_v], dim=-1)
    K, V = write(k.view(R, H, 1, d_k), v.view(R, H, 1, d_v))  # (R, H, P+1, d)
    scores = torch.bmm(q * (1.0 / math.sqrt(d_k)), K.flatten(0, 1).transpose(1, 2))
    out = torch.bmm(torch.softmax(scores, dim=-1), V.flatten(0, 1))  # (R*H, 1, d_v)
    return linear(attn.w_o, out.view(R, H * d_v))


def cross_attention(attn: MultiHeadAttention, h: Tensor, layout: tuple[Tensor, Tensor, Tensor],
                    M: int) -> Tensor:
    """Rows ``h (R, d_model)``, ``g = R / M`` per memory row, over the memory's K/V."""
    R, H, d_k, d_v = h.shape[0], attn.h, attn.d_k, attn.d_v
    k_t, v, bias = layout  # (M*H, d_k, S), (M*H, S, d_v), (M*H, 1, S)
    g = R // M
    q = linear(attn.w_q, h).view(M, g, H, d_k).transpose(1, 2)
    scores = torch.baddbmm(bias, q.reshape(M * H, g, d_k), k_t, alpha=1.0 / math.sqrt(d_k))
    out = torch.bmm(torch.softmax(scores, dim=-1), v)  # (M*H, g, d_v)
    out = out.view(M, H, g, d_v).transpose(1, 2).reshape(R, H * d_v)
    return linear(attn.w_o, out)


def layer_step(layer: DecoderLayer, x: Tensor, write, layout) -> Tensor:
    """One decoder layer for rows ``x (R, d_model)``: ``write`` as :func:`self_attention`'s,
    ``layout`` the cross layout, whose first dimension is memory rows x heads."""
    M, ff = layout[0].shape[0] // layer.cross_attn.h, layer.ff
    with phase("seq2seq.decoder.self_attn"):  # the profiler's labels, free when off
        x = sublayer(layer.self_block, x, lambda h: self_attention(layer.self_attn, h, write))
    with phase("seq2seq.decoder.cross_attn"):
        x = sublayer(layer.cross_block, x, lambda h: cross_attention(layer.cross_attn, h, layout, M))
    with phase("seq2seq.decoder.ffn"):
        return sublayer(layer.ff_block, x, lambda h: linear(ff.w2, ff.act(linear(ff.w1, h))))


def decoder_step(model, tokens: Tensor, cache: DecoderCache) -> Tensor:
    """``tokens (R,)``, one per decoder row, after the cache's P positions -> the decoder's
    last states ``(R, 1, d_model)`` (before the output projection); the cache is extended."""
    x = embed(model.tgt_embed, tokens, cache.length)
    for index, (layer, layout) in enumerate(zip(model.decoder.layers, cache.cross_layout())):
        x = layer_step(layer, x, partial(cache.append, index), layout)
    return model.decoder.final_norm(x)[:, None]
