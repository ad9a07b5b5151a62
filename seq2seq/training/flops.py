"""FLOPs of a training or validation batch, for Lightning's ``ThroughputMonitor``
(``flops_per_sec``, and MFU on a GPU it knows).

Counted as ``torch.utils.flop_counter.FlopCounterMode`` counts: 2 FLOPs per multiply-add of
every matmul (projections, attention scores and weighted sums, feed-forward, output
projection), nothing for norms, softmax or dropout. A backward pass costs two forwards (the
gradients with respect to inputs and to weights), so a training batch is 3x its forward.
Shapes as padded, since padded positions are computed too; the output projection only runs
on the ``N`` non-pad targets (``Seq2SeqModule.loss``).
"""

from __future__ import annotations

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
