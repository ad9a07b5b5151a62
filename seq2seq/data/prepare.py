"""Preparing a corpus for training: tokenizers (trained on the training split, cached)
and tokenized, length-filtered splits (cached).

    Dataset{src, tgt} --load_or_train_tokenizers--> TokenizerPair
                      --tokenized_split--> Dataset{id, src, tgt, src_ids, tgt_ids, src_len, tgt_len}

``src_ids``/``tgt_ids`` hold no special tokens (``seq2seq.data.batch.collate`` adds them);
lengths used for filtering count that one added token per side.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path

import datasets
import numpy as np

from seq2seq.config import DataConfig, TokenizerConfig
from seq2seq.data.cache import CACHE_VERSION, atomic_dir, digest, split_fingerprint
from seq2seq.data.sources import describe_split, load_split
from seq2seq.data.tokenizer import Tokenizer, TokenizerPair

log = logging.getLogger(__name__)

_TOKENIZED_FEATURES = datasets.Features(
    {
        "src": datasets.Value("string"),
        "tgt": datasets.Value("string"),
        "src_ids": datasets.Sequence(datasets.Value("int32")),
        "tgt_ids": datasets.Sequence(datasets.Value("int32")),
        "src_len": datasets.Value("int32"),
        "tgt_len": datasets.Value("int32"),
    }
)



def _texts(ds: datasets.Dataset, sides: Sequence[str]) -> Iterator[str]:
    """Stream sentences; with two sides they alternate so any sampling sees both languages."""
    for batch in ds.iter(batch_size=10_000):
        for row in zip(*(batch[s] for s in sides), strict=True):
            yield from row


def train_tokenizers(train: datasets.Dataset, cfg: TokenizerConfig) -> TokenizerPair:
    """One joint model on src+tgt, or one model per side."""
    if cfg.joint:
        tok = Tokenizer.train(_texts(train, ("src", "tgt")), cfg)
        return TokenizerPair(tok, tok)
    return TokenizerPair(
        Tokenizer.train(_texts(train, ("src",)), cfg), Tokenizer.train(_texts(train, ("tgt",)), cfg)
    )


def tokenizer_cache_dir(cfg: DataConfig) -> Path:
    """Where the tokenizer(s) for ``cfg`` live: keyed by training data and tokenizer settings."""
    key = digest(
        {
            "v": CACHE_VERSION,
            "data": split_fingerprint(cfg, cfg.train_split),
            "tokenizer": dataclasses.asdict(cfg.tokenizer),
        }
    )
    return Path(cfg.cache_dir) / "tokenizers" / key[:20]


def load_or_train_tokenizers(
    cfg: DataConfig, train: datasets.Dataset | None = None
) -> TokenizerPair:
    """Cached tokenizers for ``cfg``; trains (on the training split only) when absent."""
    root = tokenizer_cache_dir(cfg)
    names = ("joint",) if cfg.tokenizer.joint else ("src", "tgt")
    if all((root / f"{n}.model").is_file() for n in names):
        toks = [Tokenizer.from_bytes((root / f"{n}.model").read_bytes()) for n in names]
        log.info("tokenizer cache hit: %s", root)
        return TokenizerPair(toks[0], toks[-1])
    if train is None:
        train = load_split(cfg, cfg.train_split)
    pair = train_tokenizers(train, cfg.tokenizer)
    with atomic_dir(root) as tmp:
        for name, tok in zip(names, (pair.src, pair.tgt), strict=False):
            (tmp / f"{name}.model").write_bytes(tok.to_bytes())
        meta = {
            "tokenizer": dataclasses.asdict(cfg.tokenizer),
            "trained_on": describe_split(cfg, cfg.train_split),
        }
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2))
    log.info("trained tokenizer(s) %s -> %s", pair, root)
    return pair


# ---------------------------------------------------------------------------------------
# Tokenization and length filtering (cached)
# ---------------------------------------------------------------------------------------
def _encode_pairs(batch: dict[str, list], tokenizers: TokenizerPair) -> dict[str, list]:
    src_ids = tokenizers.src.encode(batch["src"])
    tgt_ids = tokenizers.tgt.encode(batch["tgt"])
    return {
        "src_ids": src_ids,
        "tgt_ids": tgt_ids,
        "src_len": [len(x) for x in src_ids],
        "tgt_len": [len(y) for y in tgt_ids],
    }


def tokenize_pairs(
    ds: datasets.Dataset,
    tokenizers: TokenizerPair,
    num_proc: int | None = None,
    fingerprint: str | None = None,
) -> datasets.Dataset:
    """Add ``src_ids``/``tgt_ids`` (int32, no specials) and ``src_len``/``tgt_len``."""
    return ds.map(
        _encode_pairs,
        batched=True,
        batch_size=10_000,
        num_proc=num_proc,
        fn_kwargs={"tokenizers": tokenizers},
        features=_TOKENIZED_FEATURES,
        new_fingerprint=fingerprint,  # given, so datasets need not hash the tokenizer
        desc="tokenize",
    )


def column(ds: datasets.Dataset, name: str) -> np.ndarray:
    """A numeric column as one numpy array (shape (N,))."""
    return ds.with_format("numpy", columns=[name])[:][name]


def length_mask(
    src_len: np.ndarray, tgt_len: np.ndarray, max_len: int, max_len_ratio: float | None
) -> np.ndarray:
    """Pairs to keep, shape (N,) bool. ``max_len`` counts the one special token per side."""
    keep = (src_len > 0) & (tgt_len > 0)  # text that normalizes to nothing
    keep &= (src_len + 1 <= max_len) & (tgt_len + 1 <= max_len)
    if max_len_ratio is not None:
        longer, shorter = np.maximum(src_len, tgt_len), np.maximum(np.minimum(src_len, tgt_len), 1)
        keep &= longer <= max_len_ratio * shorter
    return keep


def filter_by_length(
    ds: datasets.Dataset, max_len: int, max_len_ratio: float | None, where: str
) -> datasets.Dataset:
    """Drop pairs too long (or too unbalanced) to train on, logging how many went.

    Also adds ``id``, the row index after filtering (0..N-1).
    """
    keep = length_mask(column(ds, "src_len"), column(ds, "tgt_len"), max_len, max_len_ratio)
    dropped = int((~keep).sum())
    log.info(
        "%s: dropped %d of %d pairs by length (max_len=%d, max_len_ratio=%s)",
        where,
        dropped,
        len(ds),
        max_len,
        max_len_ratio,
    )
    if dropped == len(ds):
        raise ValueError(
            f"{where}: no sentence pairs left after length filtering "
            f"(max_len={max_len}, max_len_ratio={max_len_ratio})"
        )
    # ids assigned before ``select``: adding a column after it would copy the whole table
    ids = np.full(len(ds), -1, dtype=np.int64)
    ids[keep] = np.arange(len(ds) - dropped)
    ds = ds.add_column("id", ids)
    return ds.select(np.flatnonzero(keep)) if dropped else ds


def tokenized_split(
    cfg: DataConfig, split: str, tokenizers: TokenizerPair, *, train: bool
) -> datasets.Dataset:
    """Dataset{id, src, tgt, src_ids, tgt_ids, src_len, tgt_len}, from cache when possible.

    ``id`` is the row index (0..N-1). The ratio filter applies to training data only, so
    validation keeps every pair the model can take (``max_len``).
    """
    ratio = cfg.max_len_ratio if train else None
    key = digest(
        {
            "v": CACHE_VERSION,
            "data": split_fingerprint(cfg, split),
            "tokenizers": [tokenizers.src.fingerprint, tokenizers.tgt.fingerprint],
            "max_len": cfg.max_len,
            "max_len_ratio": ratio,
        }
    )[:20]
    path = Path(cfg.cache_dir) / "datasets" / key
    if not (path / "dataset_info.json").is_file():
        where = describe_split(cfg, split)
        ds = tokenize_pairs(load_split(cfg, split), tokenizers, cfg.num_proc, key)
        ds = filter_by_length(ds, cfg.max_len, ratio, where)
        with atomic_dir(path) as tmp:
            ds.save_to_disk(str(tmp))
        log.info("%s: %d pairs tokenized -> %s", where, len(ds), path)
    return datasets.load_from_disk(str(path))
