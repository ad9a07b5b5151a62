"""Encoder, Decoder and Seq2Seq: a plain ``nn.Module`` (no loss, optimizer or Lightning),
with its inference features declared (``inference``: ``model/inference/features.py``).

Shapes: source ids ``(B, S)``, target ids ``(B, L)``, memory ``(B, S, d_model)``,
logits ``(B, L, V_tgt)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

import seq2seq.model.inference.step as step
from seq2seq.config import ModelConfig
from seq2seq.model.attention import causal_mask, padding_mask
from seq2seq.model.cache import KV, DecoderCache
from seq2seq.model.inference import output
from seq2seq.model.inference.features import Inference
from seq2seq.model.layers import DecoderLayer, Embedding, EncoderLayer, Linear, RotaryEmbedding
from seq2seq.model.norms import final_norm
from seq2seq.profiling import phase


@dataclass
class Attentions:
    """Attention weights per layer, each ``(B, H, L, S)``, for plots and inspection."""

    encoder_self: list[Tensor]
    decoder_self: list[Tensor]
    decoder_cross: list[Tensor]


def _rope(arch: ModelConfig) -> RotaryEmbedding | None:
    return RotaryEmbedding(arch.head_dim_k, arch.max_positions) if arch.positional == "rope" else None


class Encoder(nn.Module):
    """Stack of self-attention layers over embedded source ``(B, S, d)``."""

    def __init__(self, arch: ModelConfig):
        super().__init__()
        rope = _rope(arch)
        self.layers = nn.ModuleList(EncoderLayer(arch, rope) for _ in range(arch.encoder_layers))
        self.final_norm = final_norm(arch)

    def forward(self, x: Tensor, mask: Tensor | None, weights: list | None = None) -> Tensor:
        for layer in self.layers:
            x, w = layer(x, mask, need_weights=weights is not None)
            if weights is not None:
                weights.append(w)
        return self.final_norm(x)


class Decoder(nn.Module):
    """Stack of causal self-attention + cross-attention layers over embedded target."""

    def __init__(self, arch: ModelConfig):
        super().__init__()
        rope = _rope(arch)
        self.layers = nn.ModuleList(DecoderLayer(arch, rope) for _ in range(arch.decoder_layers))
        self.final_norm = final_norm(arch)

    def cross_kv(self, memory: Tensor) -> list[KV]:
        """Each layer's cross-attention K ``(B, H, S, d_k)`` / V ``(B, H, S, d_v)`` of
        ``memory (B, S, d_model)``: computed once per source."""
        return [layer.cross_attn.project_kv(memory) for layer in self.layers]

    def forward(
        self,
        y: Tensor,
        self_mask: Tensor | None,
        cross_kv: list[KV],
        memory_mask: Tensor | None,
        cache: DecoderCache | None = None,
        start: int = 0,
        weights: Attentions | None = None,
    ) -> Tensor:
        """``y (B, L, d_model)`` at positions ``start ..`` -> ``(B, L, d_model)``; with a
        cache, each layer's new self-attention K/V are appended to it."""
        for i, layer in enumerate(self.layers):
            y, (self_w, cross_w) = layer(
                y, self_mask, cross_kv[i], memory_mask, cache, i, start,
                need_weights=weights is not None,
            )
            if weights is not None:
                weights.decoder_self.append(self_w)
                weights.decoder_cross.append(cross_w)
        return self.final_norm(y)


class Seq2Seq(nn.Module):
    """Encoder-decoder Transformer with ``encode`` and ``decode`` (the annotated-transformer API)."""

    def __init__(self, arch: ModelConfig):
        super().__init__()
        self.arch = arch
        self.src_embed = Embedding(arch.src_vocab_size, arch)
        shared = self.src_embed.tokens if arch.share_embeddings else None
        self.tgt_embed = Embedding(arch.tgt_vocab_size, arch, tokens=shared)
        self.encoder = Encoder(arch)
        self.decoder = Decoder(arch)
        self.output = Linear(arch.d_model, arch.tgt_vocab_size, bias=arch.output_bias)
        if arch.tie_output:
            self.output.weight = self.tgt_embed.tokens.weight
        self.inference = Inference()  # not weights: compute type, step plan, compiled step, ...
        self._init_weights()

    def _init_weights(self) -> None:
        for name, p in self.named_parameters():
            if p.dim() == 2 and "tokens" not in name and "positions" not in name:
                nn.init.xavier_uniform_(p)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    # ------------------------------------------------------------ masks
    def source_mask(self, src: Tensor) -> Tensor:
        """``(B, 1, 1, S)``: True on real source tokens."""
        return padding_mask(src, self.arch.pad_id)

    # ------------------------------------------------------------ API
    def encode(self, src: Tensor, src_mask: Tensor | None = None, weights: list | None = None) -> Tensor:
        """``src (B, S)`` -> memory ``(B, S, d_model)``."""
        if src_mask is None:
            src_mask = self.source_mask(src)
        fast = self.inference.compiled_encoder  # --compile, small batches (compiled_encoder.py)
        if fast is not None and weights is None and not self.training and not torch.is_grad_enabled():
            memory = fast(self, src, src_mask)
            if memory is not None:
                return memory
        return self.encoder(self.src_embed(src), src_mask, weights)

    def init_cache(self, memory: Tensor, memory_mask: Tensor | None,
                   capacity: int = 64, group: int = 1) -> DecoderCache:
        """A fresh cache holding each layer's cross-attention K/V of ``memory (M, S, d_model)``,
        with room for ``capacity`` target positions before it grows, for ``M * group``
        decoder rows (``group`` consecutive rows per memory row: beams of one sentence).
        The one-token step's weights are checked here, once per cache (``step.StepPlan``)."""
        self.inference.step_plan.refresh(self)
        return DecoderCache(self.decoder.cross_kv(memory), memory_mask, capacity, group)

    def decode(
        self,
        tgt: Tensor,
        memory: Tensor | None,
        memory_mask: Tensor | None,
        cache: DecoderCache | None = None,
        weights: Attentions | None = None,
    ) -> tuple[Tensor, DecoderCache | None]:
        """Target logits ``(B, L, V)``.

        Without a cache, ``tgt (B, L)`` is the whole prefix and nothing is kept (returns
        ``None``). With one, ``tgt`` holds only the L new positions after the cache's P,
        ``memory`` may be None (its K/V are in the cache), and the cache, extended in place,
        is returned. Both give the same logits for the same positions.
        """
        hidden, cache = self.decode_hidden(tgt, memory, memory_mask, cache, weights)
        with phase("seq2seq.output_projection"):
            return self.project(hidden), cache

    def project(self, hidden: Tensor) -> Tensor:
        """Logits ``(..., V)`` of decoder states ``hidden (..., d_model)``: the output
        projection as ``output.project`` decides (the compute type's kernel, a prepacked
        weight at inference on CPU, or ``F.linear``)."""
        return output.project(self.output, hidden, self.inference.packed_output)

    def decode_hidden(
        self,
        tgt: Tensor,
        memory: Tensor | None,
        memory_mask: Tensor | None,
        cache: DecoderCache | None = None,
        weights: Attentions | None = None,
    ) -> tuple[Tensor, DecoderCache | None]:
        """:meth:`decode` before the output projection: ``(B, L, d_model)`` and the cache."""
        if cache is None:
            cross_kv, start = self.decoder.cross_kv(memory), 0
        elif step.supported(self, cache, tgt.shape[1], weights is not None):
            fast = self.inference.compiled_step  # --compile (compiled.py)
            out = None if fast is None else fast(self, tgt[:, 0], cache)
            out = step.decoder_step(self, tgt[:, 0], cache) if out is None else out
            return out, cache  # the fused one-token step
        else:
            cross_kv, start, memory_mask = cache.cross_kv, cache.length, cache.memory_mask
        L = tgt.shape[1]
        # New queries are the last L of P+L keys: bottom-right causal. One new query sees all.
        self_mask = None if L == 1 else causal_mask(L, start + L, device=tgt.device)
        y = self.tgt_embed(tgt, start)
        return self.decoder(y, self_mask, cross_kv, memory_mask, cache, start, weights), cache

    def forward(self, src: Tensor, tgt_in: Tensor, keep: Tensor | None = None, *,
                project: bool = True) -> Tensor:
        """Teacher forcing: ``src (B, S)``, ``tgt_in (B, L)`` -> logits ``(B, L, V)``.

        ``keep (B, L)`` (bool) keeps only those positions and returns ``(N, V)``: training
        passes the non-pad targets, skipping the vocabulary matmul and softmax on padding.
        ``project=False`` returns the decoder states ``(N | B, L, d_model)`` instead, for a
        loss that applies the output projection itself (``training.loss``).
        Right-padded targets need no key-padding mask: causality already hides every pad
        from every real position.
        """
        src_mask = self.source_mask(src)
        memory = self.encode(src, src_mask)
        y, _ = self.decode_hidden(tgt_in, memory, src_mask)
        y = y if keep is None else y[keep]
        # the layer as trained (its kernel, else F.linear), never the inference-only packed
        # copy: validation's logits and FLOPs are those of the network
        return output.project(self.output, y) if project else y

    @torch.no_grad()
    def attentions(self, src: Tensor, tgt_in: Tensor) -> Attentions:
        """All attention weights for one teacher-forced pass (reference path)."""
        weights = Attentions([], [], [])
        src_mask = self.source_mask(src)
        memory = self.encode(src, src_mask, weights.encoder_self)
        self.decode(tgt_in, memory, src_mask, weights=weights)
        return weights
