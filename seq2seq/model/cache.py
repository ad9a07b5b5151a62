"""The decoder cache: the one class that owns what cached decoding keeps between steps.

Per decoder layer it holds
- self-attention keys ``(B, H, P, d_k)`` and values ``(B, H, P, d_v)`` of the ``P`` target
  positions decoded so far, written in place into buffers preallocated for ``capacity``
  positions (doubled when a decode call needs more), so a step appends without copying
  the past, and
- cross-attention keys/values ``(M, H, S, d_k)`` / ``(M, H, S, d_v)`` of the encoder memory,
  projected once per source sentence and reused at every step. ``group`` decoder rows share
  one memory row (``B = M * group``): beam search's K hypotheses of a sentence read its
  memory K/V as K queries of one row, so the memory is neither copied to the beams nor
  moved when they are reordered.

It also owns positions: :attr:`length` (``P``) is where the next target tokens sit, which
is where their positional encodings (and RoPE angles) start. ``reorder`` selects rows
in place (beam search keeps surviving hypotheses, finished sentences leave the batch),
one layer at a time, so at most one layer's K/V exist twice.
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
        self._buffers: list[KV] = []  # per layer: K (B, H, capacity, d_k), V (..., d_v)
        self._filled: list[int] = [0] * len(cross_kv)  # positions written, per layer
        self._layout: list[tuple[Tensor, Tensor, Tensor]] | None = None  # see cross_layout

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

    def append(self, layer: int, k: Tensor, v: Tensor) -> KV:
        """Write layer ``layer``'s K ``(B, H, L, d_k)`` / V ``(B, H, L, d_v)`` of L new positions
        after its P cached ones; return its K/V over all ``P + L`` positions (views)."""
        if layer == len(self._buffers):  # first call: the buffers take dtype/device from K/V
            B, H, _, _ = k.shape
            self._buffers.append((k.new_empty(B, H, self.capacity, k.shape[-1]),
                                  v.new_empty(B, H, self.capacity, v.shape[-1])))
        P, L = self._filled[layer], k.shape[2]
        if P + L > self._buffers[layer][0].shape[2]:
            self._grow(layer, P + L)
        buf_k, buf_v = self._buffers[layer]
        buf_k[:, :, P : P + L] = k
        buf_v[:, :, P : P + L] = v
        self._filled[layer] = P + L
        return buf_k[:, :, : P + L], buf_v[:, :, : P + L]

    def extend(self, L: int, heads: int, d_k: int, d_v: int) -> list[KV]:
        """Every layer's K ``(B, H, P + L, d_k)`` / V views over ``P + L`` positions, the last
        L counted as written: the caller writes them before reading (a compiled step, whose
        shapes then depend only on the views, writes them inside its graph)."""
        K0 = self.cross_kv[0][0]
        B, P = self.batch_size, self.length
        for layer in range(len(self.cross_kv)):
            if layer == len(self._buffers):
                self._buffers.append((K0.new_empty(B, heads, self.capacity, d_k),
                                      K0.new_empty(B, heads, self.capacity, d_v)))
            if P + L > self._buffers[layer][0].shape[2]:
                self._grow(layer, P + L)
            self._filled[layer] = P + L
        return [(k[:, :, : P + L], v[:, :, : P + L]) for k, v in self._buffers]

    def _grow(self, layer: int, needed: int) -> None:
        """Double the layer's buffers until ``needed`` positions fit (amortized O(1) a step)."""
        buf_k, buf_v = self._buffers[layer]
        size = buf_k.shape[2]
        while size < needed:
            size *= 2
        P = self._filled[layer]
        new_k = buf_k.new_empty(*buf_k.shape[:2], size, buf_k.shape[3])
        new_v = buf_v.new_empty(*buf_v.shape[:2], size, buf_v.shape[3])
        new_k[:, :, :P], new_v[:, :, :P] = buf_k[:, :, :P], buf_v[:, :, :P]
        self._buffers[layer] = (new_k, new_v)

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
            for layer, P in enumerate(self._filled):  # the old layer is freed before the next
                self._buffers[layer] = self._pick_filled(self._buffers[layer], P, indices)
            return self

    @staticmethod
    def _pick_filled(kv: KV, P: int, indices: Tensor) -> KV:
        """Rows ``indices`` of the first P positions into fresh buffers: the free positions
        after P are never read, so they are not copied. The fresh buffers have room for
        ``P // 4 + 1`` more positions, not the old capacity: beam search reorders (and so
        reallocates) at every step, so a doubled capacity would only cost memory."""
        out = []
        for buf in kv:
            B, H, _, d = buf.shape
            new = buf.new_empty((indices.shape[0], H, P + P // 4 + 1, d))
            torch.index_select(buf[:, :, :P], 0, indices, out=new[:, :, :P])
            out.append(new)
        return out[0], out[1]
