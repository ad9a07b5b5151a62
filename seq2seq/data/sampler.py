"""``TokenBudgetSampler``: length-bucketed batches within a padded-token budget, seeded
per epoch, sharded across ranks, resumable mid-epoch."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence

import numpy as np
from torch.utils.data import Sampler

from seq2seq.data.batch import pack

log = logging.getLogger(__name__)


def _compact(a: np.ndarray) -> np.ndarray:
    """Non-negative integers in the smallest unsigned dtype that holds them."""
    return a.astype(np.min_scalar_type(int(a.max())), copy=False)


def length_order(sizes: np.ndarray, tiebreak: np.ndarray, noise: np.ndarray | None = None) -> np.ndarray:
    """Indices sorted by ``sizes``, then ``tiebreak``, then ``noise`` (a permutation of
    ``range(N)``; None = index order): ``np.lexsort((noise, tiebreak, sizes))``.

    Computed as one argsort of a packed int64 key when the three fit in 63 bits (the keys
    are unique, so the order is the same), which needs a third of lexsort's memory.
    """
    n = len(sizes)
    noise = np.arange(n) if noise is None else noise
    bits = [int(sizes.max()).bit_length(), int(tiebreak.max()).bit_length(), max(1, (n - 1).bit_length())]
    if sum(bits) > 63:
        return np.lexsort((noise, tiebreak, sizes))
    key = sizes.astype(np.int64)
    key <<= bits[1]
    key |= tiebreak
    key <<= bits[2]
    key |= noise
    return np.argsort(key)


def bucket(sizes: np.ndarray, tiebreak: np.ndarray, bounds: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
    """One shuffled epoch: sorted by length with ties broken by ``rng``, cut at ``bounds``
    (``pack`` of the sorted sizes), the batch order shuffled by ``rng``."""
    batches = np.split(length_order(sizes, tiebreak, rng.permutation(len(sizes))), bounds)
    return [batches[i] for i in rng.permutation(len(batches))]


class TokenBudgetSampler(Sampler[list[int]]):
    """Batches of indices whose padded size ``B * max(S, L)`` stays within ``max_tokens``.

    ``lengths_src``/``lengths_tgt`` are the padded lengths the tensors will have, i.e. the
    token counts plus the one special token ``collate`` adds per side.

    Pairs are sorted by length (ties broken at random per epoch when shuffling) and packed
    greedily; the batch order is shuffled from ``(seed, epoch)``. A pair longer than
    ``max_tokens`` gets a batch of its own and is reported (``oversized``, a warning).

    Distributed: every rank builds the same global list and takes every ``num_replicas``-th
    batch starting at ``rank``, so shards are disjoint. Like ``DistributedSampler``, the list
    is first padded by repeating batches from its start until it divides evenly, so every
    rank gets the same number of batches (some pairs are then seen twice per epoch; ``Batch.ids``
    tells them apart).

    Iteration is a pure function of ``(seed, epoch, rank)``, except that ``start_batch``
    batches are skipped once (mid-epoch resume); ``state_dict`` records the position.
    ``len()`` is always the full per-rank epoch.

    State is two compact length arrays (``sizes`` = the larger side, ``tiebreak`` = the
    sum; uint8/uint16 for usual lengths) and the batch boundaries: about 4 bytes a pair,
    numpy buffers that forked DataLoader workers share instead of copying.
    """

    def __init__(
        self,
        lengths_src: Sequence[int] | np.ndarray,
        lengths_tgt: Sequence[int] | np.ndarray,
        max_tokens: int,
        shuffle: bool = True,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
    ) -> None:
        src, tgt = np.asarray(lengths_src), np.asarray(lengths_tgt)
        if src.ndim != 1 or src.shape != tgt.shape or len(src) == 0:
            raise ValueError(
                "TokenBudgetSampler: need two non-empty 1-D length lists of equal size, "
                f"got shapes {src.shape} and {tgt.shape}"
            )
        if min(int(src.min()), int(tgt.min())) < 0:
            raise ValueError("TokenBudgetSampler: lengths must be >= 0")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"TokenBudgetSampler: rank {rank} not in [0, {num_replicas})")
        self.max_tokens, self.shuffle, self.seed = max_tokens, shuffle, seed
        self.num_replicas, self.rank = num_replicas, rank
        self.epoch, self.start_batch, self._position = 0, 0, 0
        self.sizes = _compact(np.maximum(src, tgt))
        self._tiebreak = _compact(src.astype(np.int64) + tgt)  # similar shapes on both sides within a batch
        # Whatever the tie order, the sorted size sequence is the same: boundaries are fixed.
        self._bounds = pack(np.sort(self.sizes), max_tokens)
        self.oversized = np.flatnonzero(self.sizes > max_tokens)
        if len(self.oversized):
            worst = int(self.sizes[self.oversized].max())
            log.warning(
                "TokenBudgetSampler: %d example(s) exceed max_tokens=%d (longest %d); each sits "
                "alone in its batch (indices %s)",
                len(self.oversized),
                max_tokens,
                worst,
                self.oversized[:10].tolist(),
            )

    @property
    def sampler(self) -> TokenBudgetSampler:
        # Lightning calls ``set_epoch`` on ``dataloader.batch_sampler.sampler`` each epoch.
        return self

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def global_batches(self, epoch: int | None = None) -> list[np.ndarray]:
        """All batches of one epoch, before sharding."""
        epoch = self.epoch if epoch is None else epoch
        if not self.shuffle:
            return np.split(length_order(self.sizes, self._tiebreak), self._bounds)
        return bucket(self.sizes, self._tiebreak, self._bounds, np.random.default_rng([self.seed, epoch]))

    def batches(self, epoch: int | None = None) -> list[np.ndarray]:
        """This rank's batches of one epoch (index arrays)."""
        batches = self.global_batches(epoch)
        pad = -len(batches) % self.num_replicas
        batches = batches + [batches[i % len(batches)] for i in range(pad)]
        return batches[self.rank :: self.num_replicas]

    def __iter__(self) -> Iterator[list[int]]:
        batches = self.batches()
        start, self.start_batch = self.start_batch, 0
        for i in range(start, len(batches)):
            self._position = i + 1
            yield batches[i].tolist()

    def __len__(self) -> int:
        return -(-(len(self._bounds) + 1) // self.num_replicas)

    def state_dict(self) -> dict[str, int]:
        """Epoch and batches handed out so far. With DataLoader workers the sampler runs
        ahead by the prefetch depth, so prefer a count from the training loop then."""
        return {"epoch": self.epoch, "start_batch": self._position, "seed": self.seed}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        self.epoch, self.start_batch = int(state["epoch"]), int(state["start_batch"])
        self.seed = int(state.get("seed", self.seed))


def direction_shares(counts: Sequence[int] | np.ndarray, temperature: float) -> np.ndarray:
    """Each direction's share of an epoch, ``n_d ** (1 / T) / sum_e n_e ** (1 / T)``
    (``n_d``: its pairs): ``T = 1`` proportional to its pairs, ``T -> inf`` uniform."""
    n = np.asarray(counts, dtype=np.float64)
    weights = np.where(n > 0, n / max(n.max(), 1.0), 0.0) ** (1.0 / temperature)  # scaled: no overflow
    return weights / weights.sum()


def direction_counts(counts: Sequence[int] | np.ndarray, temperature: float) -> np.ndarray:
    """Pairs drawn per direction in one epoch: the shares of :func:`direction_shares` of as
    many pairs as there are, rounded by largest remainder so that they sum to that number."""
    total = int(np.sum(counts))
    exact = direction_shares(counts, temperature) * total
    out = np.floor(exact).astype(np.int64)
    out[np.argsort(out - exact, kind="stable")[: total - int(out.sum())]] += 1
    return out


class DirectionSampler(TokenBudgetSampler):
    """:class:`TokenBudgetSampler` over the pairs of several directions: each epoch draws
    every direction's share (:func:`direction_counts` at ``temperature``) from its own pairs,
    without replacement up to all of them (repeating them only when its share is larger),
    from ``(seed, epoch)``; the draw is packed, shuffled, sharded and resumed exactly as the
    parent does (same packing rule, same state), so batches mix directions.

    ``directions (N,)``: the direction index of each pair (the lengths as the parent's).
    ``len()`` is the current epoch's per-rank batch count (the draw sets it).
    """

    def __init__(self, lengths_src, lengths_tgt, directions: np.ndarray, max_tokens: int,
                 temperature: float, shuffle: bool = True, seed: int = 0, num_replicas: int = 1,
                 rank: int = 0) -> None:
        super().__init__(lengths_src, lengths_tgt, max_tokens, shuffle, seed, num_replicas, rank)
        directions = np.asarray(directions)
        if directions.shape != self.sizes.shape:
            raise ValueError(f"DirectionSampler: {directions.shape} directions for {self.sizes.shape} pairs")
        self.temperature = temperature
        self._members = [np.flatnonzero(directions == d) for d in range(int(directions.max()) + 1)]
        self.counts = direction_counts([len(m) for m in self._members], temperature)
        self._epoch_batches: tuple[tuple[int, int], list[np.ndarray]] | None = None

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        """The pairs of one epoch (indices, grouped by direction)."""
        parts = []
        for members, count in zip(self._members, self.counts.tolist(), strict=True):
            whole, rest = divmod(count, len(members)) if len(members) else (0, 0)
            parts += [members] * whole + [rng.choice(members, rest, replace=False)]
        return np.concatenate(parts)

    def global_batches(self, epoch: int | None = None) -> list[np.ndarray]:
        epoch = self.epoch if epoch is None else epoch
        if not self.shuffle:
            return super().global_batches(epoch)
        if self._epoch_batches is None or self._epoch_batches[0] != (self.seed, epoch):
            rng = np.random.default_rng([self.seed, epoch])
            rows = self.draw(rng)
            sizes, tiebreak = self.sizes[rows], self._tiebreak[rows]
            bounds = pack(np.sort(sizes), self.max_tokens)
            self._epoch_batches = ((self.seed, epoch), [rows[b] for b in bucket(sizes, tiebreak, bounds, rng)])
        return self._epoch_batches[1]

    def __len__(self) -> int:
        return -(-len(self.global_batches()) // self.num_replicas)
