"""Preparing a corpus for training, every step cached on disk as memory-mapped Arrow:
the cleaned pairs of a split, the tokenizers (trained on a seeded sample of the training
split) and the tokenized, length-filtered splits.

    sources --load_split--> Dataset{src, tgt}
            --load_or_train_tokenizers--> TokenizerPair
            --tokenized_split--> Dataset{src_ids, tgt_ids, src_len, tgt_len} (+ src, tgt: validation)

``src_ids``/``tgt_ids`` hold no special tokens (``seq2seq.data.batch.collate`` adds them);
lengths used for filtering count that one added token per side. Memory stays bounded by a
batch: text is streamed into Arrow, ``datasets.map`` tokenizes into Arrow shards
(``num_proc`` workers), and what comes back is memory-mapped.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import multiprocessing
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import datasets
import numpy as np

from seq2seq.config import DataConfig, TokenizerConfig
from seq2seq.data import sources
from seq2seq.data.cache import CACHE_VERSION, atomic_dir, cache_root, digest, split_fingerprint
from seq2seq.data.sources import describe_split
from seq2seq.data.tokenizer import Tokenizer, TokenizerPair

log = logging.getLogger(__name__)
T = TypeVar("T")

def tokenized_features(tokenizers: TokenizerPair, max_len: int | None, with_text: bool) -> datasets.Features:
    """Token ids as uint16 when the vocabulary allows (half the disk and the memory-mapped
    pages of int32), lengths as uint16 below 65,536; the text only where it is asked for."""
    def smallest(limit: int | None) -> str:
        return "uint16" if limit is not None and limit <= 1 << 16 else "int32"

    vocab = max(tokenizers.src.vocab_size, tokenizers.tgt.vocab_size)
    ids = datasets.Sequence(datasets.Value(smallest(vocab)))
    length = datasets.Value(smallest(max_len + 1 if max_len else None))  # room for the +1 of the special
    text = {"src": datasets.Value("string"), "tgt": datasets.Value("string")} if with_text else {}
    return datasets.Features({**text, "src_ids": ids, "tgt_ids": ids, "src_len": length, "tgt_len": length})


def load_arrow(path: Path, pattern: str) -> datasets.Dataset:
    """The Arrow files of one cache entry, memory-mapped, in name order."""
    files = sorted(path.glob(pattern))
    parts = [datasets.Dataset.from_file(str(f)) for f in files]
    return parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)


def load_split(cfg: DataConfig, split: str) -> datasets.Dataset:
    """Dataset{src, tgt} of ``split``, stripped, pairs with an empty side dropped; stored
    once under ``pairs/`` in the cache and memory-mapped (any corpus size)."""
    key = digest({"v": CACHE_VERSION, "data": split_fingerprint(cfg, split)})[:20]
    path = cache_root(cfg) / "pairs" / key
    if not (path / "pairs.arrow").is_file():
        with atomic_dir(path) as tmp:
            n = sources.write_pairs(sources.pair_batches(cfg, split, cache_root(cfg) / "hf"), tmp / "pairs.arrow")
        log.info("%s: %d pairs -> %s", describe_split(cfg, split), n, path)
    return load_arrow(path, "pairs.arrow")


# ---------------------------------------------------------------------------------------
# Tokenizers (trained on a seeded sample, cached)
# ---------------------------------------------------------------------------------------
def _interleave(batches: Iterable[dict[str, list]], sides: Sequence[str]) -> Iterator[str]:
    """Stream sentences; with two sides they alternate so any sampling sees both languages."""
    for batch in batches:
        for row in zip(*(batch[s] for s in sides), strict=True):
            yield from row


def tokenizer_texts(train: datasets.Dataset, sides: Sequence[str], cfg: TokenizerConfig) -> Iterator[str]:
    """The sentences the tokenizer learns from: all of them when they number at most
    ``cfg.input_sentence_size``, else those of a sample of pairs drawn with ``cfg.seed``
    (in corpus order), so SentencePiece sees exactly what we chose on every machine."""
    n = len(train)
    if n * len(sides) > cfg.input_sentence_size:
        rows = np.random.default_rng(cfg.seed).choice(n, cfg.input_sentence_size // len(sides), replace=False)
        train = train.select(np.sort(rows))
        log.info("tokenizer: trained on %d of %d pairs (seed %d)", len(train), n, cfg.seed)
    return _interleave(train.select_columns(list(sides)).iter(batch_size=10_000), sides)


def train_tokenizers(train: datasets.Dataset, cfg: TokenizerConfig) -> TokenizerPair:
    """One joint model on src+tgt, or one model per side."""
    if cfg.joint:
        tok = Tokenizer.train(tokenizer_texts(train, ("src", "tgt"), cfg), cfg)
        return TokenizerPair(tok, tok)
    return TokenizerPair(
        Tokenizer.train(tokenizer_texts(train, ("src",), cfg), cfg),
        Tokenizer.train(tokenizer_texts(train, ("tgt",), cfg), cfg),
    )


def train_tokenizers_on_stream(pairs: Iterable[sources.Pairs], cfg: TokenizerConfig) -> TokenizerPair:
    """The first ``input_sentence_size`` sentences of a (shuffled) stream of pair batches."""
    def texts(sides: Sequence[str]) -> Iterator[str]:
        batches = ({"src": s, "tgt": t} for s, t in pairs)
        return itertools.islice(_interleave(batches, sides), cfg.input_sentence_size)

    if not cfg.joint:
        raise ValueError("TokenizerConfig.joint must be true with a streamed corpus (one pass)")
    tok = Tokenizer.train(texts(("src", "tgt")), cfg)
    return TokenizerPair(tok, tok)


def tokenizer_cache_dir(cfg: DataConfig) -> Path:
    """Where the tokenizer(s) for ``cfg`` live: keyed by training data and tokenizer settings."""
    key = digest(
        {
            "v": CACHE_VERSION,
            "data": split_fingerprint(cfg, cfg.train_split),
            "tokenizer": dataclasses.asdict(cfg.tokenizer),
        }
    )
    return cache_root(cfg) / "tokenizers" / key[:20]


def _train_for(cfg: DataConfig, train: datasets.Dataset | None) -> TokenizerPair:
    if cfg.streaming:
        return train_tokenizers_on_stream(sources.hub_pair_stream(cfg, seed=cfg.tokenizer.seed), cfg.tokenizer)
    return train_tokenizers(train if train is not None else load_split(cfg, cfg.train_split), cfg.tokenizer)


def in_child_process(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a forked child process (in this one where fork is unavailable).

    The SentencePiece trainer holds its whole sample (~0.3 KB a sentence: ~600 MB for 2M);
    run in a child, that memory goes back to the system when it exits instead of staying
    in the training process's heap.
    """
    if "fork" not in multiprocessing.get_all_start_methods():
        return fn(*args)
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
        return pool.submit(fn, *args).result()


def load_or_train_tokenizers(
    cfg: DataConfig, train: datasets.Dataset | None = None
) -> TokenizerPair:
    """Cached tokenizers for ``cfg``; trains (on the training split only) when absent."""
    names = ("joint",) if cfg.tokenizer.joint else ("src", "tgt")
    meta = {"tokenizer": dataclasses.asdict(cfg.tokenizer), "trained_on": describe_split(cfg, cfg.train_split)}
    return cached_tokenizers(tokenizer_cache_dir(cfg), names, meta, _train_for, cfg, train)


def cached_tokenizers(root: Path, names: Sequence[str], meta: dict[str, Any],
                      train: Callable[..., TokenizerPair], *args: Any) -> TokenizerPair:
    """The tokenizer(s) ``names`` (``joint``, or ``src`` and ``tgt``) stored in ``root``; when
    absent, ``train(*args)`` in a child process, stored there with ``meta``."""
    if all((root / f"{n}.model").is_file() for n in names):
        toks = [Tokenizer.from_bytes((root / f"{n}.model").read_bytes()) for n in names]
        log.info("tokenizer cache hit: %s", root)
        return TokenizerPair(toks[0], toks[-1])
    pair = in_child_process(train, *args)
    with atomic_dir(root) as tmp:
        for name, tok in zip(names, (pair.src, pair.tgt), strict=False):
            (tmp / f"{name}.model").write_bytes(tok.to_bytes())
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2))
    log.info("trained tokenizer(s) %s -> %s", pair, root)
    return pair


# ---------------------------------------------------------------------------------------
# Tokenization and length filtering (cached)
# ---------------------------------------------------------------------------------------
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


def draw_seed(*key: int) -> int:
    """The sampling seed (``Tokenizer.encode``, 31 bits) of a key of integers: the same key
    always draws the same segmentations, so resumed runs repeat them."""
    return int(np.random.SeedSequence(list(key)).generate_state(1)[0]) >> 1


def encode_pairs(
    batch: dict[str, list],
    tokenizers: TokenizerPair,
    max_len: int | None = None,
    max_len_ratio: float | None = None,
    with_text: bool = True,
    alpha: float = 0.0,
    seed: int = 0,
) -> dict[str, list]:
    """Token ids and lengths of a batch of pairs; with ``max_len``, only the pairs kept by
    :func:`length_mask` (in order), so filtering costs no second pass. ``alpha > 0``:
    sampled segmentations (``Tokenizer.encode``), from ``seed`` (source) and ``seed + 1``."""
    src_ids = tokenizers.src.encode(batch["src"], alpha, seed)
    tgt_ids = tokenizers.tgt.encode(batch["tgt"], alpha, seed + 1)
    src_len = np.fromiter(map(len, src_ids), np.int32, len(src_ids))
    tgt_len = np.fromiter(map(len, tgt_ids), np.int32, len(tgt_ids))
    out = {"src": batch["src"], "tgt": batch["tgt"]} if with_text else {}
    out |= {"src_ids": src_ids, "tgt_ids": tgt_ids}
    if max_len is not None:
        keep = length_mask(src_len, tgt_len, max_len, max_len_ratio)
        if not keep.all():
            rows = np.flatnonzero(keep).tolist()
            out = {name: [values[i] for i in rows] for name, values in out.items()}
            src_len, tgt_len = src_len[keep], tgt_len[keep]
    return {**out, "src_len": src_len, "tgt_len": tgt_len}


def tokenize_pairs(
    ds: datasets.Dataset,
    tokenizers: TokenizerPair,
    num_proc: int | None = None,
    cache_file: Path | None = None,
    max_len: int | None = None,
    max_len_ratio: float | None = None,
    with_text: bool = True,
) -> datasets.Dataset:
    """Add ``src_ids``/``tgt_ids`` (no specials) and ``src_len``/``tgt_len``, written to
    ``cache_file`` (one shard per worker) or kept in memory; length-filtered with
    ``max_len``; ``with_text=False`` leaves the text out (training reads only ids)."""
    return ds.map(
        encode_pairs,
        batched=True,
        batch_size=10_000,
        num_proc=num_proc,
        fn_kwargs={"tokenizers": tokenizers, "max_len": max_len, "max_len_ratio": max_len_ratio,
                   "with_text": with_text},
        features=tokenized_features(tokenizers, max_len, with_text),
        remove_columns=ds.column_names,  # rows may be dropped: every column is rewritten
        cache_file_name=str(cache_file) if cache_file else None,
        keep_in_memory=cache_file is None,
        new_fingerprint=digest([ds._fingerprint, tokenizers.src.fingerprint, tokenizers.tgt.fingerprint,
                                max_len, max_len_ratio, with_text])[:16],  # datasets need not hash the tokenizer
        desc="tokenize",
    )


def column(ds: datasets.Dataset, name: str) -> np.ndarray:
    """A numeric column as one numpy array (shape (N,)), read from the memory map."""
    return ds.data.column(name).to_numpy()


def tokenized_split(
    cfg: DataConfig, split: str, tokenizers: TokenizerPair, *, train: bool
) -> datasets.Dataset:
    """Dataset{src_ids, tgt_ids, src_len, tgt_len}, plus the text ``src``/``tgt`` for
    validation (``train=False``) and for sampled training segmentations
    (``subword_alpha > 0``), from cache when possible.

    The ratio filter applies to training data only, so validation keeps every pair the
    model can take (``max_len``). Row order is the corpus order minus the dropped pairs.
    """
    ratio = cfg.max_len_ratio if train else None
    with_text = not train or cfg.subword_alpha > 0
    key = digest(
        {
            "v": CACHE_VERSION,
            "data": split_fingerprint(cfg, split),
            "tokenizers": [tokenizers.src.fingerprint, tokenizers.tgt.fingerprint],
            "max_len": cfg.max_len,
            "max_len_ratio": ratio,
            **({"text": True} if train and with_text else {}),  # old cache keys stay valid
        }
    )[:20]
    path = cache_root(cfg) / "datasets" / key
    if not (path / "meta.json").is_file():
        where, pairs = describe_split(cfg, split), load_split(cfg, split)
        with atomic_dir(path) as tmp:
            ds = tokenize_pairs(pairs, tokenizers, cfg.num_proc, tmp / "tokens.arrow", cfg.max_len, ratio,
                                with_text=with_text)
            _report_length_filter(where, len(pairs), len(ds), cfg.max_len, ratio)
            (tmp / "meta.json").write_text(json.dumps({"split": where, "pairs": len(ds)}))
        log.info("%s: %d pairs tokenized -> %s", where, len(ds), path)
    return load_arrow(path, "tokens*.arrow")


def _report_length_filter(where: str, n_in: int, n_out: int, max_len: int, ratio: float | None) -> None:
    log.info("%s: dropped %d of %d pairs by length (max_len=%d, max_len_ratio=%s)",
             where, n_in - n_out, n_in, max_len, ratio)
    if n_out == 0:
        raise ValueError(
            f"{where}: no sentence pairs left after length filtering "
            f"(max_len={max_len}, max_len_ratio={ratio})"
        )
