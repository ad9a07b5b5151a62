"""Batches: the packing rule, the ``Batch`` tensors, and the only place BOS/EOS are added.

Training (``TokenBudgetSampler``) and inference (``Translator``) share one packing rule,
:func:`pack`: a batch's padded size, count x longest, stays within ``max_tokens``.
Kept free of ``datasets``/``lightning`` so inference can import it cheaply.
"""

from __future__ import annotations

import copy
import functools
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from seq2seq.specials import BOS_ID, EOS_ID, PAD_ID


@dataclass
class Batch:
    """Padded tensors for one step; all right-padded with ``pad_id``.

    src:     (B, S) long  x + [eos]
    tgt_in:  (B, L) long  [bos] + y       decoder input
    tgt_out: (B, L) long  y + [eos]       labels
    ids:     (B,)   long  dataset row of each pair (restore order; drop DDP repeats)
    """

    src: Tensor
    tgt_in: Tensor
    tgt_out: Tensor
    ids: Tensor
    pad_id: int = PAD_ID

    def __len__(self) -> int:
        return self.src.size(0)

    @functools.cached_property
    def n_tgt_tokens(self) -> int:
        """Non-pad label tokens (eos included): the loss normalizer."""
        return int((self.tgt_out != self.pad_id).sum())

    @functools.cached_property
    def n_src_tokens(self) -> int:
        return int((self.src != self.pad_id).sum())

    def _apply(self, fn: Any) -> Batch:
        # a copy carries the counts already computed on CPU (cached_property keeps them on
        # the instance), so reading them on GPU costs no sync
        moved = copy.copy(self)
        moved.src, moved.tgt_in = fn(self.src), fn(self.tgt_in)
        moved.tgt_out, moved.ids = fn(self.tgt_out), fn(self.ids)
        return moved

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """Used by Lightning's ``transfer_batch_to_device``."""
        return self._apply(lambda t: t.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> Batch:
        """Used by ``DataLoader(pin_memory=True)``."""
        return self._apply(lambda t: t.pin_memory())


def pack(sizes: np.ndarray, max_tokens: int) -> np.ndarray:
    """Greedy batch boundaries over ascending ``sizes``: a batch's cost is count x largest
    size, kept within ``max_tokens`` (an example larger than that sits alone).

    Works a run of equal sizes at a time (at most ``max_len`` runs), not an example at a
    time: a run of size ``s`` fills the open batch up to ``max(1, max_tokens // s)``
    examples and then opens a full batch every that many. Same boundaries as the
    one-by-one greedy rule, for millions of examples in milliseconds.
    """
    sizes = np.asarray(sizes)
    if len(sizes) == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.r_[0, np.flatnonzero(np.diff(sizes)) + 1]
    ends = np.r_[starts[1:], len(sizes)]
    cuts, start = [np.zeros(0, dtype=np.int64)], 0
    for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
        size = int(sizes[a])
        cap = max(1, max_tokens // size) if size > 0 else len(sizes)
        run_cuts = np.arange(max(a, start + cap), b, cap)
        if len(run_cuts):
            cuts.append(run_cuts)
            start = int(run_cuts[-1])
    return np.concatenate(cuts)


def token_batches(sizes: Sequence[int], max_tokens: int) -> list[np.ndarray]:
    """Indices of ``sizes`` grouped by :func:`pack` (sorted by size, ties in input order),
    longest batch first (inference: the slowest batch starts while memory is fresh)."""
    order = np.argsort(np.asarray(sizes, dtype=np.int64), kind="stable")
    batches = np.split(order, pack(np.asarray(sizes, dtype=np.int64)[order], max_tokens))
    return batches[::-1]


@dataclass(frozen=True)
class Ragged:
    """Sequences as one flat array of values and their lengths (an Arrow list column)."""

    values: np.ndarray  # (sum of lengths,)
    lengths: np.ndarray  # (B,)

    def __len__(self) -> int:
        return len(self.lengths)


def _pad(
    seqs: Sequence[Sequence[int]] | Ragged, pad_id: int, prefix: int | np.ndarray | None,
    suffix: int | None
) -> Tensor:
    """(B, max len + specials) long tensor, right-padded; ragged input is placed in one
    vectorized assignment instead of row by row. ``prefix``: one id for every row, or one
    per row ``(B,)`` (a language tag)."""
    if not isinstance(seqs, Ragged):
        lengths = np.fromiter(map(len, seqs), np.int64, len(seqs))
        seqs = Ragged(np.fromiter(itertools.chain.from_iterable(seqs), np.int64, int(lengths.sum())), lengths)
    lengths = seqs.lengths.astype(np.int64)
    start, extra = int(prefix is not None), (prefix is not None) + (suffix is not None)
    out = np.full((len(lengths), int(lengths.max(initial=0)) + extra), pad_id, dtype=np.int64)
    if prefix is not None:
        out[:, 0] = prefix
    rows = np.repeat(np.arange(len(lengths)), lengths)
    first = np.repeat(np.cumsum(lengths) - lengths, lengths)  # where each value's row begins
    out[rows, np.arange(len(rows)) - first + start] = seqs.values
    if suffix is not None:
        out[np.arange(len(lengths)), lengths + start] = suffix
    return torch.from_numpy(out)


def collate_tgt_in(tgt_ids: Sequence[Sequence[int]], pad_id: int, bos_id: int | np.ndarray) -> Tensor:
    """Decoder input (B, L) = [bos] + y, right-padded (training, and teacher-forced
    attention of finished outputs). ``bos_id (B,)``: a start per row (decoder-side tags)."""
    return _pad(tgt_ids, pad_id, bos_id, None)


def decoder_start(batch_size: int, bos_id: int, device: torch.device | str | None = None) -> Tensor:
    """The first decoder input of every row: ``(batch_size,)`` of BOS (search)."""
    return torch.full((batch_size,), bos_id, dtype=torch.long, device=device)


def collate_src(src_ids: Sequence[Sequence[int]], pad_id: int, eos_id: int,
                tags: np.ndarray | None = None) -> Tensor:
    """Source tensor (B, S) = x + [eos], right-padded, or [tag] + x + [eos] with one tag
    id per row ``tags (B,)`` (source-side language tags). Use it at inference time too."""
    return _pad(src_ids, pad_id, tags, eos_id)


def collate(
    examples: Sequence[Mapping[str, Any]] | Mapping[str, Any],
    pad_id: int = PAD_ID,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    tag_position: str | None = None,
) -> Batch:
    """Examples with ``src_ids``/``tgt_ids`` (and optionally ``id``) -> ``Batch``; or the
    same as columns: ``{"src_ids": Ragged, "tgt_ids": Ragged, "id": (B,) array}``, with
    ``"tag": (B,)`` target-language tag ids when ``tag_position`` is ``"source"`` (``[tag] x
    [eos]``) or ``"decoder"`` (``[tag] y``: the tag replaces BOS).

    The only place bos/eos (and tags) are added.
    """
    tags = None
    if tag_position is not None:
        tags = np.asarray(examples["tag"] if isinstance(examples, Mapping) else [ex["tag"] for ex in examples])
    if isinstance(examples, Mapping):
        src, tgt, ids = examples["src_ids"], examples["tgt_ids"], torch.as_tensor(examples["id"], dtype=torch.long)
    else:
        src = [ex["src_ids"] for ex in examples]
        tgt = [ex["tgt_ids"] for ex in examples]
        ids = torch.tensor([ex.get("id", -1) for ex in examples], dtype=torch.long)
    batch = Batch(
        src=collate_src(src, pad_id, eos_id, tags if tag_position == "source" else None),
        tgt_in=collate_tgt_in(tgt, pad_id, tags if tag_position == "decoder" else bos_id),
        tgt_out=_pad(tgt, pad_id, None, eos_id),
        ids=ids,
        pad_id=pad_id,
    )
    _ = batch.n_tgt_tokens, batch.n_src_tokens  # computed here, on CPU
    return batch
