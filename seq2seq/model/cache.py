"""The decoder cache, passed into ``Seq2Seq.decode`` and returned from it.

Per decoder layer it holds
- self-attention keys/values ``(B, H, P, d_k)`` / ``(B, H, P, d_v)`` of the ``P`` target
  positions decoded so far (they grow by the new positions each step), and
- cross-attention keys/values ``(B, H, S, d_k)`` / ``(B, H, S, d_v)`` of the encoder memory,
  projected once per source sentence and reused at every step.

It is a value object: ``decode`` returns a new cache, ``reorder`` returns a reordered one
(beam search selects surviving hypotheses with it).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from seq2seq.profiling import phase

KV = tuple[Tensor, Tensor]


@dataclass(frozen=True)
class DecoderCache:
    cross_kv: list[KV]  # per layer, computed once from the memory
    memory_mask: Tensor | None  # (B, 1, 1, S)
    self_kv: list[KV] | None = None  # per layer; None before the first step

    @property
    def length(self) -> int:
        """Target positions already decoded (P)."""
        return 0 if self.self_kv is None else self.self_kv[0][0].shape[2]

    @property
    def batch_size(self) -> int:
        return self.cross_kv[0][0].shape[0]

    def with_self_kv(self, self_kv: list[KV]) -> DecoderCache:
        return DecoderCache(self.cross_kv, self.memory_mask, self_kv)

    def reorder(self, indices: Tensor, cross: bool = True) -> DecoderCache:
        with phase("seq2seq.cache.reorder"):
            return self._reorder(indices, cross)

    def _reorder(self, indices: Tensor, cross: bool) -> DecoderCache:
        """Select rows ``indices (B',)`` of everything. ``cross=False`` keeps the memory
        K/V as they are: valid when every index stays within its own sentence's rows
        (beam reordering), which saves copying the memory at every step."""

        def pick(kv: KV) -> KV:
            return kv[0].index_select(0, indices), kv[1].index_select(0, indices)

        self_kv = None if self.self_kv is None else [pick(kv) for kv in self.self_kv]
        if not cross:
            return DecoderCache(self.cross_kv, self.memory_mask, self_kv)
        mask = None if self.memory_mask is None else self.memory_mask.index_select(0, indices)
        return DecoderCache([pick(kv) for kv in self.cross_kv], mask, self_kv)
