"""The decoder cache: the one class that owns what cached decoding keeps between steps.

Per decoder layer it holds
- self-attention keys ``(B, H, P, d_k)`` and values ``(B, H, P, d_v)`` of the ``P`` target
  positions decoded so far, written in place into buffers preallocated for ``capacity``
  positions (doubled when a decode call needs more), so a step appends without copying
  the past; all layers' keys are one tensor ``(layers, B, H, C, d_k)`` (values likewise),
  so a reorder is one ``index_select`` each, not one per layer, and
- cross-attention keys/values ``(M, H, S, d_k)`` / ``(M, H, S, d_v)`` of the encoder memory,
  projected once per source sentence and reused at every step. ``group`` decoder rows share
  one memory row (``B = M * group``): beam search's K hypotheses of a sentence read its
  memory K/V as K queries of one row, so the memory is neither copied to the beams nor
  moved when they are reordered.

It also owns positions: :attr:`length` (``P``) is where the next target tokens sit, which
is where their positional encodings (and RoPE angles) start. ``reorder`` selects rows
in place (beam search keeps surviving hypotheses, finished sentences leave the batch).
"""

from __future__ import annotations

import torch
from torch import Tensor

from seq2seq.profiling import phase

KV = tuple[Tensor, Tensor]


class DecoderCache:
    def __init__(self, cross_kv: list[KV], memory_mask: Tensor | None, capacity: int = 64,
                 group: int = 1):
        self.cross_kv = cross_kv  # per layer: K (M, H, S, d_k), V (M, H, S, d_v)
        self.memory_mask = memory_mask  # (M, 1, 1, S)
        self.capacity = max(int(capacity), 1)
        self.group = group  # decoder rows n*group .. n*group + group-1 read memory row n
        self._stacked: KV | None = None  # K (layers, B, H, C, d_k), V (..., d_v)
        self._buffers: list[KV] = []  # per layer: views K (B, H, C, d_k), V of the stacks
        self._filled: list[int] = [0] * len(cross_kv)  # positions written, per layer
        self._layout: list[tuple[Tensor, Tensor, Tensor]] | None = None  # see cross_layout

    @classmethod
    def from_layout(cls, layout: list[tuple[Tensor, Tensor, Tensor]], memory_mask: Tensor,
                    capacity: int = 64, group: int = 1) -> DecoderCache:
        """A cache for one memory row (``group`` decoder rows) whose cross side arrives laid
        out already (a compiled source package, :meth:`cross_layout`'s form): its K/V are
        views of that layout."""
        H, d_k, S = layout[0][0].shape
        cross_kv = [(k_t.view(1, H, d_k, S).transpose(2, 3), v.view(1, H, S, v.shape[2]))
                    for k_t, v, _ in layout]
        cache = cls(cross_kv, memory_mask, capacity, group)
        cache._layout = list(layout)
        return cache

    @property
    def length(self) -> int:
        """Target positions already decoded (P): the position of the next token."""
        return self._filled[-1] if self._filled else 0

    @property
    def batch_size(self) -> int:
        """Decoder rows B (= memory rows x group)."""
        return self.cross_kv[0][0].shape[0] * self.group

    @property
    def self_kv(self) -> list[KV]:
        """Per layer, self-attention K ``(B, H, P, d_k)`` and V ``(B, H, P, d_v)`` (views)."""
        P = self.length
        return [(k[:, :, :P], v[:, :, :P]) for k, v in self._buffers]

    @property
    def buffers(self) -> list[KV]:
        """Per layer, the whole K ``(B, H, C, d_k)`` / V buffers of capacity C, positions from
        ``length`` on unwritten: for an exported step, whose input strides must follow C
        (views over the first P positions carry C in their strides only)."""
        return list(self._buffers)

    def _allocate(self, like: Tensor, heads: int, d_k: int, d_v: int) -> None:
        """Every layer's (empty) buffers, dtype and device of ``like``, for B rows."""
        shape = (len(self.cross_kv), self.batch_size, heads, self.capacity)
        self._set(like.new_empty(*shape, d_k), like.new_empty(*shape, d_v))

    def _set(self, k: Tensor, v: Tensor) -> None:
        self._stacked = (k, v)  # views by select: unbind's may not be written with autograd on
        self._buffers = [(k[i], v[i]) for i in range(k.shape[0])]

    def append(self, layer: int, k: Tensor, v: Tensor) -> KV:
        """Write layer ``layer``'s K ``(B, H, L, d_k)`` / V ``(B, H, L, d_v)`` of L new positions
        after its P cached ones; return its K/V over all ``P + L`` positions (views)."""
        if self._stacked is None:  # first call: the buffers take dtype/device from K/V
            self._allocate(k, k.shape[1], k.shape[-1], v.shape[-1])
        P, L = self._filled[layer], k.shape[2]
        if P + L > self._stacked[0].shape[3]:
            self._grow(P + L)
        buf_k, buf_v = self._buffers[layer]
        buf_k[:, :, P : P + L] = k
        buf_v[:, :, P : P + L] = v
        self._filled[layer] = P + L
        return buf_k[:, :, : P + L], buf_v[:, :, : P + L]

    def extend(self, L: int, heads: int, d_k: int, d_v: int) -> list[KV]:
        """Every layer's K ``(B, H, P + L, d_k)`` / V views over ``P + L`` positions, the last
        L counted as written (:meth:`advance`)."""
        P = self.advance(L, heads, d_k, d_v)
        return [(k[:, :, : P + L], v[:, :, : P + L]) for k, v in self._buffers]

    def advance(self, L: int, heads: int, d_k: int, d_v: int) -> int:
        """Count L more positions as written, in every layer, and return the P before: the
        caller writes them before reading (a compiled step, which takes the whole
        :attr:`buffers`, writes them inside its graph)."""
        if self._stacked is None:
            self._allocate(self.cross_kv[0][0], heads, d_k, d_v)
        P = self.length
        if P + L > self._stacked[0].shape[3]:
            self._grow(P + L)
        self._filled = [P + L] * len(self._filled)
        return P

    def _grow(self, needed: int) -> None:
        """Double the buffers until ``needed`` positions fit (amortized O(1) a step)."""
        size = self._stacked[0].shape[3]
        while size < needed:
            size *= 2
        P = max(self._filled)
        grown = []
        for buf in self._stacked:
            new = buf.new_empty(*buf.shape[:3], size, buf.shape[4])
            new[:, :, :, :P] = buf[:, :, :, :P]
            grown.append(new)
        self._set(*grown)

    def cross_layout(self) -> list[tuple[Tensor, Tensor, Tensor]] | None:
        """Per layer, the memory side laid out for one-token steps (``model.step``): K^T
        ``(M*H, d_k, S)``, V ``(M*H, S, d_v)`` and the additive padding mask ``(M*H, 1, S)``
        (0 or -inf), made once per memory and kept until the memory rows change. None when a
        memory row has no key to attend to (the general path handles that case). Contiguous
        for every M: with one memory row the reshapes would be views (the bias with stride 0
        over heads), and a compiled step reads its inputs with the strides it was built for."""
        if self._layout is None:
            K0 = self.cross_kv[0][0]
            M, H, S, _ = K0.shape
            mask = self.memory_mask
            if mask is not None and not bool(mask.any(dim=-1).all()):
                return None
            bias = K0.new_zeros(M, 1, 1, S)
            if mask is not None:
                bias = bias.masked_fill(~mask.view(M, 1, 1, S), float("-inf"))
            bias = bias.expand(M, H, 1, S).reshape(M * H, 1, S).contiguous()
            self._layout = [(k.transpose(2, 3).reshape(M * H, k.shape[3], S).contiguous(),
                             v.reshape(M * H, S, v.shape[3]).contiguous(), bias)
                            for k, v in self.cross_kv]
        return self._layout

    def reorder(self, indices: Tensor, cross: bool = True) -> DecoderCache:
        """Keep rows ``indices (B',)``, in place (returns ``self``). ``cross=False`` keeps the
        memory K/V as they are: valid when every index stays within its own sentence's rows
        (beam reordering), which saves copying the memory at every step. With ``group > 1``,
        ``indices`` must keep whole groups (each ``group`` consecutive new rows from one
        memory row)."""
        with phase("seq2seq.cache.reorder"):
            if cross:
                memory_rows = indices[:: self.group] // self.group  # each group's memory row
                self.cross_kv = [(k.index_select(0, memory_rows), v.index_select(0, memory_rows))
                                 for k, v in self.cross_kv]
                if self.memory_mask is not None:
                    self.memory_mask = self.memory_mask.index_select(0, memory_rows)
                self._layout = None  # made again from the kept rows when next needed
            if self._stacked is not None:
                self._set(*(self._pick_filled(buf, max(self._filled), indices)
                            for buf in self._stacked))
            return self

    @staticmethod
    def _pick_filled(buf: Tensor, P: int, indices: Tensor) -> Tensor:
        """Rows ``indices`` of the first P positions of ``buf (layers, B, H, C, d)``, all
        layers at once, into a fresh buffer: the free positions after P are never read, so
        they are not copied. The fresh buffer has room for ``P // 4 + 1`` more positions,
        not the old capacity: beam search reorders (and so reallocates) at every step, so
        a doubled capacity would only cost memory."""
        layers, _, H, _, d = buf.shape
        new = buf.new_empty((layers, indices.shape[0], H, P + P // 4 + 1, d))
        torch.index_select(buf[:, :, :, :P], 1, indices, out=new[:, :, :, :P])
        return new
