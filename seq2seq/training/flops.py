"""FLOPs of a training or validation batch, for Lightning's ``ThroughputMonitor``
(``flops_per_sec``, and MFU on a GPU it knows).

Counted as ``torch.utils.flop_counter.FlopCounterMode`` counts: 2 FLOPs per multiply-add of
every matmul (projections, attention scores and weighted sums, feed-forward, output
projection), nothing for norms, softmax or dropout. A backward pass costs two forwards (the
gradients with respect to inputs and to weights), so a training batch is 3x its forward.
Shapes as padded, since padded positions are computed too; the output projection only runs
on the ``N`` non-pad targets (``Seq2SeqModule.loss``).

:func:`step_gemms` lists the same FLOPs as the matrix products themselves (shapes and how
often a step runs each), so that a benchmark can time a plain ``torch.mm``/``bmm`` at each
shape: the step's time if it were nothing but GEMMs at torch's speed (docs/speed.md).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from seq2seq.config import ModelConfig


def _attention(arch: ModelConfig, queries: int, keys: int, rows: int) -> int:
    """One attention block: ``rows`` sequences of ``queries`` over ``keys`` positions, the
    K/V projections counted on ``keys`` (cross-attention: the memory)."""
    d, h, dk, dv = arch.d_model, arch.n_heads, arch.head_dim_k, arch.head_dim_v
    projections = queries * d * h * dk + keys * d * h * (dk + dv) + queries * h * dv * d
    scores = queries * keys * h * (dk + dv)  # Q K^T and weights @ V, (B, H, L, S) each
    return 2 * rows * (projections + scores)


def forward_flops(arch: ModelConfig, batch: int, src_len: int, tgt_len: int, n_targets: int) -> int:
    """Matmul FLOPs of one teacher-forced forward: ``src (B, S)``, ``tgt_in (B, L)``,
    output projection on ``n_targets`` rows."""
    ff = 2 * 2 * arch.d_model * arch.d_ff  # two linears per position
    encoder = _attention(arch, src_len, src_len, batch) + batch * src_len * ff
    decoder = (_attention(arch, tgt_len, tgt_len, batch) + _attention(arch, tgt_len, src_len, batch)
               + batch * tgt_len * ff)
    output = 2 * n_targets * arch.d_model * arch.tgt_vocab_size
    return arch.encoder_layers * encoder + arch.decoder_layers * decoder + output


def batch_flops(arch: ModelConfig, batch: int, src_len: int, tgt_len: int, n_targets: int,
                training: bool) -> int:
    """Forward, plus backward when ``training``."""
    return (3 if training else 1) * forward_flops(arch, batch, src_len, tgt_len, n_targets)


@dataclass(frozen=True)
class Gemm:
    """``count`` products ``(batch, m, k) @ (batch, k, n)`` (``batch`` 1: a plain mm) of one
    kind: ``projection`` (attention's Q/K/V/output linears), ``attention`` (scores and
    weighted sums, per row and head), ``feed-forward``, ``output`` (the vocabulary)."""

    kind: str
    m: int
    k: int
    n: int
    batch: int = 1
    count: int = 1

    @property
    def flops(self) -> int:
        return 2 * self.count * self.batch * self.m * self.k * self.n


def _attention_gemms(arch: ModelConfig, queries: int, keys: int, rows: int) -> list[Gemm]:
    """The products :func:`_attention` counts: Q from ``queries``, K and V from ``keys``."""
    d, h, dk, dv = arch.d_model, arch.n_heads, arch.head_dim_k, arch.head_dim_v
    q, kv = rows * queries, rows * keys
    return [Gemm("projection", q, d, h * dk), Gemm("projection", kv, d, h * dk),
            Gemm("projection", kv, d, h * dv), Gemm("projection", q, h * dv, d),
            Gemm("attention", queries, dk, keys, batch=rows * h),  # Q K^T
            Gemm("attention", queries, keys, dv, batch=rows * h)]  # weights @ V


def _ff_gemms(arch: ModelConfig, rows: int) -> list[Gemm]:
    return [Gemm("feed-forward", rows, arch.d_model, arch.d_ff),
            Gemm("feed-forward", rows, arch.d_ff, arch.d_model)]


def _backward(g: Gemm) -> list[Gemm]:
    """The two products of ``A (m, k) @ B (k, n)``'s backward: dA = dC (m, n) @ B^T (n, k)
    and dB = A^T (k, m) @ dC (m, n)."""
    return [replace(g, k=g.n, n=g.k), replace(g, m=g.k, k=g.m)]


def step_gemms(arch: ModelConfig, batch: int, src_len: int, tgt_len: int, n_targets: int,
               training: bool) -> list[Gemm]:
    """The matrix products of one batch (the arguments of :func:`batch_flops`; backward too
    when ``training``), equal shapes merged into one entry with their ``count``; their FLOPs
    sum to :func:`batch_flops`."""
    encoder = _attention_gemms(arch, src_len, src_len, batch) + _ff_gemms(arch, batch * src_len)
    decoder = (_attention_gemms(arch, tgt_len, tgt_len, batch)
               + _attention_gemms(arch, tgt_len, src_len, batch) + _ff_gemms(arch, batch * tgt_len))
    forward = ([replace(g, count=arch.encoder_layers) for g in encoder]
               + [replace(g, count=arch.decoder_layers) for g in decoder]
               + [Gemm("output", n_targets, arch.d_model, arch.tgt_vocab_size)])
    products = forward + [b for g in forward for b in _backward(g)] if training else forward
    merged: dict[Gemm, int] = {}
    for g in products:
        if g.flops:
            key = replace(g, count=1)
            merged[key] = merged.get(key, 0) + g.count
    return [replace(g, count=c) for g, c in merged.items()]
