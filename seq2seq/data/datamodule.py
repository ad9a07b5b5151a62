"""``Seq2SeqDataModule``: the Lightning face of the data pipeline."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import datasets
import lightning.pytorch as pl
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from torch.utils.data import DataLoader

from seq2seq.config import DataConfig
from seq2seq.data.batch import Ragged, collate
from seq2seq.data.multi import (
    DirectionRows,
    direction_batch,
    direction_rows,
    multi_tokenizers,
    tag_ids,
    tokenized_lines,
)
from seq2seq.data.prepare import (
    column,
    draw_seed,
    encode_pairs,
    load_or_train_tokenizers,
    tokenized_split,
)
from seq2seq.data.sampler import DirectionSampler, TokenBudgetSampler
from seq2seq.data.tokenizer import TokenizerPair


@dataclass(frozen=True)
class SubwordSampling:
    """Subword regularization of training batches: segmentations sampled at ``alpha``.
    A sampled side longer than ``max_len`` (with its special token) keeps its best ids."""

    tokenizers: TokenizerPair
    alpha: float
    seed: int
    max_len: int

    def batch_seed(self, indices: Sequence[int]) -> int:
        """A pure function of the run's seed and the batch's rows in their order, so a
        resumed run draws what it would have drawn; a pair's draw changes with its batch
        (batches are re-formed every epoch: ties in length are broken at random)."""
        return draw_seed(self.seed, *indices)

    def encode(self, rows: pa.Table, indices: Sequence[int]) -> tuple[list, list]:
        seed = self.batch_seed(indices)
        enc = encode_pairs({"src": rows["src"].to_pylist(), "tgt": rows["tgt"].to_pylist()},
                           self.tokenizers, with_text=False, alpha=self.alpha, seed=seed)
        sides = []
        for side in ("src_ids", "tgt_ids"):
            best = rows[side].to_pylist()
            sides.append([b if len(a) >= self.max_len else a for a, b in zip(enc[side], best, strict=True)])
        return sides[0], sides[1]


class IndexedPairs(torch.utils.data.Dataset):
    """The token ids of a memory-mapped split for the DataLoader, as Arrow columns: a batch
    of rows is one gather, handed to ``collate`` as flat arrays (``Ragged``) with the row
    indices as ``id``. Only Arrow file references are held (and pickled to spawned
    workers), so workers read the shared page cache and copy nothing. With ``sampling``
    the batch's text is re-segmented instead (``SubwordSampling``)."""

    def __init__(self, ds: datasets.Dataset, sampling: SubwordSampling | None = None) -> None:
        text = ["src", "tgt"] if sampling is not None else []
        self.ds = ds.select_columns(["src_ids", "tgt_ids", *text]).with_format("arrow")
        self.sampling = sampling

    def __len__(self) -> int:
        return len(self.ds)

    def __getitems__(self, indices: Sequence[int]) -> dict[str, Any]:
        rows = self.ds[list(indices)]  # pa.Table
        ids = np.asarray(indices, dtype=np.int64)
        if self.sampling is not None:
            src, tgt = self.sampling.encode(rows, indices)
            return {"src_ids": src, "tgt_ids": tgt, "id": ids}
        return {"src_ids": _ragged(rows["src_ids"]), "tgt_ids": _ragged(rows["tgt_ids"]), "id": ids}

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.__getitems__([index])  # a batch of one


class DirectionPairs(torch.utils.data.Dataset):
    """The pairs of several directions (``DirectionRows``) over one tokenized line dataset
    for the DataLoader: a batch is one gather of its lines, each pair with its direction's
    target-language tag id (``tags``, one per direction) for ``collate``."""

    def __init__(self, ds: datasets.Dataset, rows: DirectionRows, tags: np.ndarray,
                 sampling: SubwordSampling | None = None) -> None:
        langs = list(dict.fromkeys(lang for pair in rows.pairs for lang in pair))
        text = langs if sampling is not None else []
        self.ds = ds.select_columns([f"{lang}_ids" for lang in langs] + text).with_format("arrow")
        self.rows, self.tags, self.sampling = rows, tags, sampling

    def __len__(self) -> int:
        return len(self.rows.lines)

    def __getitems__(self, indices: Sequence[int]) -> dict[str, Any]:
        idx = np.asarray(indices, dtype=np.int64)
        table = self.ds[self.rows.lines[idx].tolist()]  # pa.Table
        return direction_batch(table, self.rows, idx, self.tags, self.sampling)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.__getitems__([index])


def _ragged(column: pa.ChunkedArray) -> Ragged:
    lists = column.combine_chunks()
    return Ragged(lists.flatten().to_numpy(), pc.list_value_length(lists).to_numpy())


class Seq2SeqDataModule(pl.LightningDataModule):
    """Tokenizers, cached tokenized splits and token-budget loaders for one ``DataConfig``.

    Give the Trainer ``use_distributed_sampler=False``: the loaders shard by rank
    themselves, and Lightning must not replace the batch sampler. Before building the
    model, ``prepare_data(); setup("fit")`` gives ``src_vocab_size``/``tgt_vocab_size``
    (both are cache hits when Lightning calls them again).
    """

    def __init__(self, data: DataConfig | None = None) -> None:
        super().__init__()
        self.config = data if data is not None else DataConfig()
        self.tokenizers: TokenizerPair | None = None
        self.train_dataset: datasets.Dataset | None = None
        self.val_dataset: datasets.Dataset | None = None
        self.val_src_texts: list[str] = []
        self.val_ref_texts: list[str] = []
        # several directions (DataConfig.directions): their pairs, and per direction name
        # ("en-de") the validation sources and references
        self.directions = self.config.model_directions
        self.rows: dict[str, DirectionRows] = {}
        self.val_sets: dict[str, tuple[list[str], list[str]]] = {}

    def use_tokenizers(self, tokenizers: TokenizerPair) -> None:
        """Use these (e.g. from a checkpoint) instead of the cached/trained ones."""
        self.tokenizers = tokenizers

    # -- Lightning hooks ------------------------------------------------------------------
    def prepare_data(self) -> None:
        """Train/cache the tokenizers and the tokenized splits (local rank 0 under Lightning)."""
        cfg = self.config
        if self.directions is not None:
            tok = (self.tokenizers or multi_tokenizers(cfg, self.directions)).src
            tokenized_lines(cfg, cfg.train_split, tok, self.directions.languages, cfg.subword_alpha > 0)
            tokenized_lines(cfg, cfg.valid_split, tok, self.directions.languages, True)
            return
        tokenizers = self.tokenizers or load_or_train_tokenizers(cfg)
        if not cfg.streaming:  # a streamed training split is tokenized as it is read
            tokenized_split(cfg, cfg.train_split, tokenizers, train=True)
        tokenized_split(cfg, cfg.valid_split, tokenizers, train=False)

    def setup(self, stage: str | None = None) -> None:
        """Load what ``prepare_data`` cached (building it if it is missing)."""
        cfg = self.config
        if self.directions is not None:
            self._setup_directions(stage)
            return
        if self.tokenizers is None:
            self.tokenizers = load_or_train_tokenizers(cfg)
        if stage in (None, "fit") and self.train_dataset is None and not cfg.streaming:
            self.train_dataset = tokenized_split(cfg, cfg.train_split, self.tokenizers, train=True)
        if stage in (None, "fit", "validate") and self.val_dataset is None:
            self.val_dataset = tokenized_split(cfg, cfg.valid_split, self.tokenizers, train=False)
            self.val_src_texts = list(self.val_dataset["src"])
            self.val_ref_texts = list(self.val_dataset["tgt"])

    def _setup_directions(self, stage: str | None) -> None:
        """One tokenized line dataset per split; each direction's pairs are rows of it."""
        cfg, langs = self.config, self.directions.languages
        if self.tokenizers is None:
            self.tokenizers = multi_tokenizers(cfg, self.directions)
        tok = self.tokenizers.src
        if stage in (None, "fit") and self.train_dataset is None:
            self.train_dataset = tokenized_lines(cfg, cfg.train_split, tok, langs, cfg.subword_alpha > 0)
            self.rows["train"] = direction_rows(self.train_dataset, self.directions, cfg.max_len,
                                                cfg.max_len_ratio, f"multi30k {cfg.train_split}")
        if stage in (None, "fit", "validate") and self.val_dataset is None:
            self.val_dataset = tokenized_lines(cfg, cfg.valid_split, tok, langs, True)
            rows = self.rows["val"] = direction_rows(self.val_dataset, self.directions, cfg.max_len,
                                                     None, f"multi30k {cfg.valid_split}")
            for d, name in enumerate(self.directions.names()):
                a, b = self.directions.pairs[d]
                lines = self.val_dataset.select(rows.of(d))
                self.val_sets[name] = (list(lines[a]), list(lines[b]))

    @property
    def src_vocab_size(self) -> int:
        return self._tokenizers().src.vocab_size

    @property
    def tgt_vocab_size(self) -> int:
        return self._tokenizers().tgt.vocab_size

    def train_dataloader(self) -> DataLoader:
        if self.config.streaming:
            return self._stream_loader()
        cfg = self.config
        sampling = None
        if cfg.subword_alpha > 0:
            sampling = SubwordSampling(self._tokenizers(), cfg.subword_alpha, cfg.seed, cfg.max_len)
        loader = self._loader(self.train_dataset, shuffle=True, sampling=sampling)
        epoch = self.trainer.current_epoch if self.trainer is not None else 0
        loader.batch_sampler.set_epoch(epoch)
        return loader

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_dataset, shuffle=False)

    # -- helpers --------------------------------------------------------------------------
    def _tokenizers(self) -> TokenizerPair:
        if self.tokenizers is None:
            raise RuntimeError("Seq2SeqDataModule: call prepare_data() and setup() first")
        return self.tokenizers

    def _rank(self) -> tuple[int, int]:
        if self.trainer is None:
            return 0, 1
        return self.trainer.global_rank, self.trainer.world_size

    def _loader(self, ds: datasets.Dataset | None, shuffle: bool,
                sampling: SubwordSampling | None = None) -> DataLoader:
        if ds is None:
            raise RuntimeError("Seq2SeqDataModule: call setup() before asking for a dataloader")
        rank, world = self._rank()
        cfg, tok = self.config, self._tokenizers().tgt
        if self.directions is None:
            dataset = IndexedPairs(ds, sampling)
            lengths = column(ds, "src_len") + 1, column(ds, "tgt_len") + 1  # + eos, + bos/eos
        else:
            rows = self.rows["train" if shuffle else "val"]
            dataset = DirectionPairs(ds, rows, tag_ids(self._tokenizers(), self.directions), sampling)
            lengths = rows.src_len + 1, rows.tgt_len + 1  # a source tag is in src_len
        if self.directions is not None and shuffle:
            sampler = DirectionSampler(*lengths, self.rows["train"].direction, cfg.max_tokens,
                                       cfg.direction_temperature, True, cfg.seed, world, rank)
        else:
            sampler = TokenBudgetSampler(*lengths, cfg.max_tokens, shuffle=shuffle, seed=cfg.seed,
                                         num_replicas=world, rank=rank)
        tag_position = None if self.directions is None else self.directions.tag_position
        return DataLoader(
            dataset,
            batch_sampler=sampler,
            collate_fn=partial(collate, pad_id=tok.pad_id, bos_id=tok.bos_id, eos_id=tok.eos_id,
                               tag_position=tag_position),
            num_workers=self.config.num_workers,
            persistent_workers=self.config.num_workers > 0,
            pin_memory=torch.cuda.is_available(),
        )

    def _stream_loader(self) -> DataLoader:
        from seq2seq.data.stream import StreamingBatches  # only streamed corpora need it

        rank, world = self._rank()
        # on resume the loops' progress is restored before this runs: skip what was consumed
        done = 0 if self.trainer is None else self.trainer.fit_loop.epoch_loop.batch_progress.current.ready
        stream = StreamingBatches(self.config, self._tokenizers(), rank, world, start_batch=done)
        return DataLoader(stream, batch_size=None, num_workers=self.config.num_workers,
                          persistent_workers=self.config.num_workers > 0)
