"""The one-token cached decoder step, written for inference speed.

Searches feed one new token per decoder row per step. Through the general layers
(``DecoderLayer.forward``: 4-D ``matmul``, mask checks, module calls) such a step costs about
1,200 operator calls for a 4-layer decoder, and at Tiny sizes the dispatch of those calls,
not the arithmetic, is most of the time. This step does the same maths in ~70 operator calls
per layer (all levels, as ``torch.profiler`` counts them: ``scripts/bench/opcount.py``) on
2-D and 3-D tensors:

- the linear layers as :class:`StepPlan` lays them out once per weights (not per step):
  self-attention's W^Q, W^K, W^V as one matmul whose output is per head ``[q_h k_h v_h]``
  (so Q, K and V are views of it), 1/sqrt(d_k) folded into the query weights, and, on a
  float32 CPU, every linear of at least ``packed.PACK_MIN_WEIGHTS`` weights one prepacked
  oneDNN call with the feed-forward's activation fused (``packed.Packed``; smaller ones,
  where oneDNN's fixed cost per call loses, and compute types go through ``layers.linear``);
- self-attention: K/V appended to the cache, one ``bmm`` for the scores ``(R*H, 1, P+1)``
  (no mask: one new query may see every cached position), softmax, one ``bmm`` with V;
- cross-attention: the memory's K^T ``(M*H, d_k, S)``, V ``(M*H, S, d_v)`` and the additive
  padding mask ``(M*H, 1, S)`` are laid out once per cache (``DecoderCache.cross_layout``),
  so a step is one ``baddbmm`` (mask + scores), softmax and one ``bmm`` for the ``g`` rows
  (beams) that share a memory row;
- norms and residuals as the layers have them (``Residual.pre``).

``Seq2Seq.decode_hidden`` takes this path for a one-token cached step in eval mode without
autograd, with no weights requested and sinusoidal or learned positions; everything else,
and the reference every search is tested against (uncached decoding), goes through the
layers. Tests hold both paths equal (``tests/model/inference/test_step.py``,
``tests/model/test_model.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seq2seq.model.cache import DecoderCache
from seq2seq.model.inference.compute import Weights
from seq2seq.model.inference.packed import prepare_linear
from seq2seq.model.layers import DecoderLayer, Embedding, Linear, MultiHeadAttention, linear
from seq2seq.model.members import Members
from seq2seq.model.norms import Residual
from seq2seq.profiling import phase

RowsLinear = Callable[[Tensor], Tensor]  # rows (R, in) -> (R, out)


@dataclass
class Projections:
    """One decoder layer's linear layers as the step calls them."""

    qkv: RowsLinear  # (R, d_model) -> (R, H * (2 d_k + d_v)): per head [q_h / sqrt(d_k), k_h, v_h]
    self_out: RowsLinear  # W^O of self-attention
    cross_q: RowsLinear  # W^Q of cross-attention, scaled by 1 / sqrt(d_k)
    cross_out: RowsLinear
    ff_in: RowsLinear  # W1 and the activation
    ff_out: RowsLinear  # W2


def _weights(m, scale: float = 1.0) -> tuple[Tensor, Tensor]:
    """``(weight (out, in), bias (out,))`` of an ``nn.Linear``, times ``scale`` (zeros for no bias)."""
    w = m.weight.detach()
    b = torch.zeros(w.shape[0], dtype=w.dtype, device=w.device) if m.bias is None else m.bias.detach()
    return w * scale, b * scale


def _qkv_weights(attn: MultiHeadAttention) -> tuple[Tensor, Tensor]:
    """W^Q (scaled by 1/sqrt(d_k)) and W^KV as one weight whose output rows are per head
    ``[q_h k_h v_h]``: ``(H * (2 d_k + d_v), d_model)`` and its bias."""
    H, d_k, d_v = attn.h, attn.d_k, attn.d_v
    wq, bq = _weights(attn.w_q, 1.0 / math.sqrt(d_k))
    wkv, bkv = _weights(attn.w_kv)
    parts = [(wq, bq, d_k), *zip(wkv.split([H * d_k, H * d_v]), bkv.split([H * d_k, H * d_v]),
                                 (d_k, d_v))]
    w = torch.cat([w.view(H, d, -1) for w, _, d in parts], dim=1).flatten(0, 1)
    b = torch.cat([b.view(H, d) for _, b, d in parts], dim=1).flatten()
    return w, b


def _as_linear(like: Linear, weight: Tensor, bias: Tensor, act=None,
               packed: bool = True) -> RowsLinear:
    """``act(x weight^T + bias)``: ``packed.prepare_linear``'s call where that is the same
    function (float32 on CPU, no compute-type kernel on ``like``), else ``layers.linear``
    with a kernel of ``like``'s type for these weights (``compute.Weights``)."""
    fast = prepare_linear(weight, bias, act) if packed and like.kernel is None else None
    if fast is not None:
        return fast
    m = Weights(weight, bias, like)
    return partial(linear, m) if act is None else lambda x: act(linear(m, x))


def projections(layer: DecoderLayer, packed: bool = True) -> Projections:
    """The layer's :class:`Projections` (``packed=False``: through ``layers.linear`` only,
    what an exported graph can hold)."""
    self_attn, cross, ff = layer.self_attn, layer.cross_attn, layer.ff
    as_linear = partial(_as_linear, packed=packed)
    if self_attn.w_q.kernel is not None:  # a compute type: its own layers
        return _kernel_projections(layer)
    return Projections(
        qkv=as_linear(self_attn.w_q, *_qkv_weights(self_attn)),
        self_out=as_linear(self_attn.w_o, *_weights(self_attn.w_o)),
        cross_q=as_linear(cross.w_q, *_weights(cross.w_q, 1.0 / math.sqrt(cross.d_k))),
        cross_out=as_linear(cross.w_o, *_weights(cross.w_o)),
        ff_in=as_linear(ff.w1, *_weights(ff.w1), act=ff.act),
        ff_out=as_linear(ff.w2, *_weights(ff.w2)))


def _kernel_projections(layer: DecoderLayer) -> Projections:
    """:class:`Projections` through the layer's own compute-type kernels (int8, bfloat16),
    unfused: a kernel quantizes or rounds per layer, and a fused or rescaled weight would
    round apart from the layers that the general path (and its measured agreement) use."""
    attn, cross, ff = layer.self_attn, layer.cross_attn, layer.ff
    H, s = attn.h, 1.0 / math.sqrt(attn.d_k)

    def qkv(x: Tensor) -> Tensor:  # per head [q_h * s, k_h, v_h], as the fused weight gives
        k, v = linear(attn.w_kv, x).split([H * attn.d_k, H * attn.d_v], dim=-1)
        parts = (linear(attn.w_q, x) * s, k, v)
        return torch.cat([t.view(x.shape[0], H, -1) for t in parts], dim=-1).flatten(1)

    return Projections(qkv=qkv, self_out=partial(linear, attn.w_o),
                       cross_q=lambda x: linear(cross.w_q, x) * (1.0 / math.sqrt(cross.d_k)),
                       cross_out=partial(linear, cross.w_o),
                       ff_in=lambda x: ff.act(linear(ff.w1, x)), ff_out=partial(linear, ff.w2))


def _version(t: Tensor) -> int:
    return 0 if t.is_inference() else t._version  # an inference tensor has no counter


class StepPlan:
    """A model's :class:`Projections`, one per decoder layer, made again when a weight or
    the compute type changes. Checked once per cache (``Seq2Seq.init_cache``), not per step:
    the check reads every decoder weight."""

    def __init__(self) -> None:
        self.key: tuple | None = None
        self.layers: list[Projections] = []
        self.members: Members | None = None  # the decoder's parameters, listed once

    def refresh(self, model) -> list[Projections]:
        if self.members is None or self.members.module is not model.decoder:
            self.members = Members.of(model.decoder)
        params = self.members.parameters()
        key = (model.inference.compute_type, *((p.data_ptr(), _version(p)) for p in params))
        if key != self.key:
            # normal tensors, not inference ones: a compute-type kernel reads their versions
            with torch.inference_mode(False), torch.no_grad():
                self.layers = [projections(layer) for layer in model.decoder.layers]
            self.key = key
        return self.layers

    def __deepcopy__(self, memo) -> StepPlan:
        return StepPlan()  # a copy lays out its own weights when first used

    def __getstate__(self) -> dict:
        return {"key": None, "layers": [], "members": None}  # prepacked weights do not pickle


def supported(model, cache: DecoderCache, L: int, want_weights: bool) -> bool:
    """Whether :func:`decoder_step` computes this call (else the general layers do)."""
    return (L == 1 and not want_weights and not model.training and not torch.is_grad_enabled()
            and model.arch.positional in ("sinusoidal", "learned")
            and cache.length < model.arch.max_positions and cache.cross_layout() is not None)


def embed(emb: Embedding, tokens: Tensor, position: int) -> Tensor:
    """``tokens (R,)`` at one position -> ``(R, d_model)`` (eval: no dropout)."""
    return torch.add(emb.positions[position], F.embedding(tokens, emb.tokens.weight),
                     alpha=emb.scale)


def sublayer(block: Residual, x: Tensor, f) -> Tensor:
    """``x + f(norm(x))`` (Pre-LN) or ``norm(x + f(x))`` (Post-LN), eval mode."""
    if block.pre:
        return x + f(norm(block.norm, x))
    return norm(block.norm, x + f(x))


def norm(module, x: Tensor) -> Tensor:
    """``module(x)``; a LayerNorm as its one kernel call, without the module call's and
    ``F.layer_norm``'s layers around it."""
    if isinstance(module, nn.LayerNorm):
        return torch.native_layer_norm(x, module.normalized_shape, module.weight, module.bias,
                                       module.eps)[0]
    return module(x)


def self_attention(attn: MultiHeadAttention, proj: Projections, h: Tensor, write) -> Tensor:
    """One new query per row over the row's cached positions plus itself. ``h (R, d_model)``;
    ``write(k, v)`` stores the new K ``(R, H, 1, d_k)`` / V and returns K/V over all ``P + 1``
    positions (``DecoderCache.append``, or a compiled step's write into its buffers)."""
    R, H, d_k, d_v = h.shape[0], attn.h, attn.d_k, attn.d_v
    q, k, v = proj.qkv(h).view(R, H, 1, 2 * d_k + d_v).split([d_k, d_k, d_v], dim=-1)
    K, V = write(k, v)  # (R, H, P+1, d): views whose rows and heads merge (view, not copy)
    P1 = K.shape[2]
    scores = torch.bmm(q.view(R * H, 1, d_k), K.view(R * H, P1, d_k).transpose(1, 2))
    out = torch.bmm(torch.softmax(scores, dim=-1), V.view(R * H, P1, d_v))  # (R*H, 1, d_v)
    return proj.self_out(out.view(R, H * d_v))  # q came scaled by 1/sqrt(d_k)


def cross_attention(attn: MultiHeadAttention, proj: Projections, h: Tensor,
                    layout: tuple[Tensor, Tensor, Tensor], M: int, lone: bool = False) -> Tensor:
    """Rows ``h (R, d_model)``, ``g = R / M`` per memory row, over the memory's K/V.
    ``lone``: a one-sentence package's graph, where the bias is added after a ``bmm`` that
    Inductor compiles into its own kernel (``baddbmm`` stays an ATen call from the package:
    ~10% of that step, 2-core AMD EPYC with AVX2, De->En Tiny)."""
    R, H, d_k, d_v = h.shape[0], attn.h, attn.d_k, attn.d_v
    k_t, v, bias = layout  # (M*H, d_k, S), (M*H, S, d_v), (M*H, 1, S)
    g = R // M
    q = proj.cross_q(h)  # scaled by 1/sqrt(d_k) already
    # the g rows of a memory row as its g queries, heads first: with g = 1 only views
    q = q.view(M * H, 1, d_k) if g == 1 else q.view(M, g, H, d_k).transpose(1, 2).reshape(M * H, g, d_k)
    scores = torch.bmm(q, k_t) + bias if lone else torch.baddbmm(bias, q, k_t)  # (M*H, g, S)
    out = torch.bmm(torch.softmax(scores, dim=-1), v)  # (M*H, g, d_v)
    out = out.view(R, H * d_v) if g == 1 else out.view(M, H, g, d_v).transpose(1, 2).reshape(R, H * d_v)
    return proj.cross_out(out)


def layer_step(layer: DecoderLayer, proj: Projections, x: Tensor, write, layout,
               lone: bool = False) -> Tensor:
    """One decoder layer for rows ``x (R, d_model)``: ``write`` as :func:`self_attention`'s,
    ``layout`` the cross layout, whose first dimension is memory rows x heads; ``lone`` as
    :func:`cross_attention`'s."""
    M = layout[0].shape[0] // layer.cross_attn.h
    with phase("seq2seq.decoder.self_attn"):  # the profiler's labels, free when off
        x = sublayer(layer.self_block, x, lambda h: self_attention(layer.self_attn, proj, h, write))
    with phase("seq2seq.decoder.cross_attn"):
        x = sublayer(layer.cross_block, x,
                     lambda h: cross_attention(layer.cross_attn, proj, h, layout, M, lone))
    with phase("seq2seq.decoder.ffn"):
        return sublayer(layer.ff_block, x, lambda h: proj.ff_out(proj.ff_in(h)))


def decoder_step(model, tokens: Tensor, cache: DecoderCache) -> Tensor:
    """``tokens (R,)``, one per decoder row, after the cache's P positions -> the decoder's
    last states ``(R, 1, d_model)`` (before the output projection); the cache is extended."""
    x = embed(model.tgt_embed, tokens, cache.length)
    plan = model.inference.step_plan.layers or model.inference.step_plan.refresh(model)
    for index, (layer, proj, layout) in enumerate(zip(model.decoder.layers, plan,
                                                      cache.cross_layout())):
        x = layer_step(layer, proj, x, partial(cache.append, index), layout)
    return norm(model.decoder.final_norm, x)[:, None]
