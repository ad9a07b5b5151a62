"""A hub corpus read as a stream (``DataConfig.streaming``): never stored, never whole in memory.

The training split is read with ``datasets.load_dataset(..., streaming=True)``, split by
rank (and DataLoader worker), its shards and records shuffled per epoch; pairs are cleaned,
tokenized and length-filtered ``shuffle_buffer`` at a time, and each buffer is cut into
token-budget batches by the same rule as :class:`TokenBudgetSampler` (sort by length with
random ties, :func:`pack`, shuffle the batch order). Memory is one buffer.

The stream repeats epochs without end (every rank always has a next batch, so DDP ranks
never wait on one that ran dry): bound training with ``trainer.max_steps``.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

import numpy as np
import torch

from seq2seq.config import DataConfig
from seq2seq.data import sources
from seq2seq.data.batch import Batch, collate, pack
from seq2seq.data.prepare import draw_seed, encode_pairs
from seq2seq.data.sampler import bucket
from seq2seq.data.tokenizer import TokenizerPair


class StreamingBatches(torch.utils.data.IterableDataset):
    """Token-budget ``Batch``es from a streamed corpus, endless (epoch after epoch).

    ``part``/``parts`` split the stream (ranks x DataLoader workers share it out);
    iteration is a pure function of ``(seed, part)``, so skipping ``start_batch`` batches
    resumes exactly where a run stopped (by reading the stream up to there again).
    """

    def __init__(self, cfg: DataConfig, tokenizers: TokenizerPair, rank: int = 0,
                 world_size: int = 1, start_batch: int = 0) -> None:
        super().__init__()
        self.cfg, self.tokenizers = cfg, tokenizers
        self.rank, self.world_size, self.start_batch = rank, world_size, start_batch
        tok = tokenizers.tgt
        self._collate = partial(collate, pad_id=tok.pad_id, bos_id=tok.bos_id, eos_id=tok.eos_id)

    def __iter__(self) -> Iterator[Batch]:
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        # the DataLoader takes batches from its workers in turn: skip this worker's share
        skip = max(0, -(-(self.start_batch - worker) // workers))
        part, parts = self.rank * workers + worker, self.world_size * workers
        for i, batch in enumerate(self._endless(part, parts)):
            if i >= skip:
                yield batch

    def _endless(self, part: int, parts: int) -> Iterator[Batch]:
        epoch = 0
        while True:
            n = 0
            for n, batch in enumerate(self.epoch_batches(epoch, part, parts), 1):  # noqa: B007
                yield batch
            if n == 0:
                raise ValueError(f"hub:{self.cfg.hub_name}: the stream gave no batch in epoch {epoch}")
            epoch += 1

    def epoch_batches(self, epoch: int, part: int = 0, parts: int = 1) -> Iterator[Batch]:
        cfg, n_before = self.cfg, 0
        for chunk, (src, tgt) in enumerate(sources.hub_pair_stream(cfg, cfg.seed, epoch, part, parts)):
            # sampled segmentations (subword_alpha) are drawn before packing: batches fit them
            enc = encode_pairs({"src": src, "tgt": tgt}, self.tokenizers, cfg.max_len, cfg.max_len_ratio, False,
                               alpha=cfg.subword_alpha, seed=draw_seed(cfg.seed, epoch, part, chunk))
            src_len, tgt_len = enc["src_len"] + 1, enc["tgt_len"] + 1  # + the added special token
            sizes = np.maximum(src_len, tgt_len)
            if len(sizes) == 0:
                continue
            rng = np.random.default_rng([cfg.seed, epoch, part, chunk])
            for rows in bucket(sizes, src_len + tgt_len, pack(np.sort(sizes), cfg.max_tokens), rng):
                yield self._collate([
                    {"src_ids": enc["src_ids"][i], "tgt_ids": enc["tgt_ids"][i], "id": n_before + i}
                    for i in rows.tolist()
                ])
            n_before += len(sizes)
