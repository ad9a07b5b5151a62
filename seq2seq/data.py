"""Parallel data: loading, tokenizer training, cached tokenization, token-budget batching.

Pipeline (``Seq2SeqDataModule`` runs it; every step is also usable on its own)::

    files / hub  --load_split-->  Dataset{src, tgt}          stripped, empty pairs dropped
                 --load_or_train_tokenizers-->  TokenizerPair (cached by data + settings)
                 --tokenized_split-->  Dataset{id, src, tgt, src_ids, tgt_ids, src_len, tgt_len}
                                       (length-filtered, cached by data + tokenizer + filters)
                 --TokenBudgetSampler + collate-->  Batch

Conventions the model side relies on: ``src_ids``/``tgt_ids`` hold no special tokens; only
``collate`` adds them: ``src = x + [eos]``, ``tgt_in = [bos] + y``, ``tgt_out = y + [eos]``.
Lengths used for batching and filtering count that one added token per side.

Cache layout under ``DataConfig.cache_dir`` (safe to delete; entries are written atomically)::

    tokenizers/<key>/{joint|src|tgt}.model   key = sha256(training data content, tokenizer settings)
    datasets/<key>/                          key = sha256(split content, tokenizer sha256s, filters)
    hf/                                      datasets.load_dataset cache (format="hub")
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import gzip
import hashlib
import json
import logging
import os
import shutil
import zlib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import datasets
import lightning.pytorch as pl
import numpy as np
import torch
from torch.utils.data import DataLoader, Sampler

from seq2seq.batch import Batch, collate, collate_src  # noqa: F401  (re-exported)
from seq2seq.config import DataConfig, TokenizerConfig
from seq2seq.tokenizer import Tokenizer, TokenizerPair

log = logging.getLogger(__name__)

MULTI30K_LANGS: tuple[str, ...] = ("en", "de", "fr")
MULTI30K_SPLITS: tuple[str, ...] = (
    "train",
    "val",
    "test_2016_flickr",
    "test_2017_flickr",
    "test_2017_mscoco",
)
# Bump when a change here alters what the cache holds, so stale entries are not reused.
CACHE_VERSION = 1

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


# ---------------------------------------------------------------------------------------
# Where a split comes from
# ---------------------------------------------------------------------------------------
def resolve_corpus(cfg: DataConfig, split: str) -> tuple[Path, Path]:
    """``(src_path, tgt_path)`` of a named-corpus split: ``{data_dir}/{split}.{lang}.gz``."""
    if cfg.corpus != "multi30k":
        raise ValueError(f"unknown corpus {cfg.corpus!r}; choices: ['multi30k']")
    for name, lang in (("src_lang", cfg.src_lang), ("tgt_lang", cfg.tgt_lang)):
        if lang not in MULTI30K_LANGS:
            raise ValueError(
                f"unknown multi30k language {lang!r} (DataConfig.{name}); "
                f"choices: {list(MULTI30K_LANGS)}"
            )
    if split not in MULTI30K_SPLITS:
        raise ValueError(f"unknown multi30k split {split!r}; choices: {list(MULTI30K_SPLITS)}")
    root = Path(cfg.data_dir)
    return root / f"{split}.{cfg.src_lang}.gz", root / f"{split}.{cfg.tgt_lang}.gz"


def split_files(cfg: DataConfig, split: str) -> list[Path]:
    """Local files holding ``split`` (empty for the hub)."""
    if cfg.corpus is not None:
        return list(resolve_corpus(cfg, split))
    if cfg.format == "hub":
        return []
    roles = {
        cfg.train_split: ("train_src", "train_tgt"),
        cfg.valid_split: ("valid_src", "valid_tgt"),
    }
    if split not in roles:
        raise ValueError(
            f"unknown split {split!r} for explicit files; choices: {list(roles)} "
            "(DataConfig.train_split / valid_split)"
        )
    names = roles[split] if cfg.format == "text" else roles[split][:1]
    return [Path(getattr(cfg, name)) for name in names]


def describe_split(cfg: DataConfig, split: str) -> str:
    """Human-readable origin of a split, used in log lines and errors."""
    files = split_files(cfg, split)
    if files:
        return " + ".join(str(p) for p in files)
    config = f"/{cfg.hub_config}" if cfg.hub_config else ""
    return f"hub:{cfg.hub_name}{config}[{split}]"


# ---------------------------------------------------------------------------------------
# Reading: every local format ends as the same Dataset{src, tgt}
# ---------------------------------------------------------------------------------------
def read_lines(path: str | os.PathLike[str]) -> list[str]:
    """Lines of a UTF-8 text file (gzip when the name ends in ``.gz``), line endings removed.

    Splits on ``\\n`` only, so U+2028 and friends inside a sentence do not shift the
    alignment of parallel files. Raises one-line errors naming the file (and line).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"data file not found: {path}")
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError, zlib.error) as exc:
        raise ValueError(f"{path}: cannot read ({exc})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ValueError(f"{path}:{line}: invalid UTF-8 ({exc.reason})") from None
    lines = text.removeprefix("\ufeff").split("\n")
    if lines[-1] == "":
        lines.pop()  # the final newline ends the last line; it does not start another
    return [line.removesuffix("\r") for line in lines]


def load_text_pair(
    src_path: str | os.PathLike[str], tgt_path: str | os.PathLike[str]
) -> datasets.Dataset:
    """Two line-aligned files -> Dataset{src, tgt} (raw, nothing dropped)."""
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise ValueError(
            f"line count mismatch: {src_path} has {len(src)} lines, {tgt_path} has {len(tgt)}"
        )
    return datasets.Dataset.from_dict({"src": src, "tgt": tgt})


def load_tsv(path: str | os.PathLike[str]) -> datasets.Dataset:
    """``src<TAB>tgt`` per line, no quoting (quotes are text) -> Dataset{src, tgt}."""
    src, tgt = [], []
    rows = csv.reader(read_lines(path), delimiter="\t", quoting=csv.QUOTE_NONE)
    for lineno, row in enumerate(rows, 1):
        row = row or ["", ""]  # csv gives [] for an empty line: an empty pair, dropped later
        if len(row) != 2:
            raise ValueError(f"{path}:{lineno}: expected 2 tab-separated fields, got {len(row)}")
        src.append(row[0])
        tgt.append(row[1])
    return datasets.Dataset.from_dict({"src": src, "tgt": tgt})


def load_jsonl(
    path: str | os.PathLike[str], src_field: str = "src", tgt_field: str = "tgt"
) -> datasets.Dataset:
    """One JSON object per line; fields may be dotted paths (``translation.de``)."""
    src, tgt = [], []
    for lineno, line in enumerate(read_lines(path), 1):
        if not line.strip():
            continue  # blank separator lines hold no record
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{lineno}: invalid JSON ({exc.msg})") from None
        src.append(_json_field(record, src_field, path, lineno))
        tgt.append(_json_field(record, tgt_field, path, lineno))
    return datasets.Dataset.from_dict({"src": src, "tgt": tgt})


def _json_field(record: Any, name: str, path: Any, lineno: int) -> str:
    value = record
    for key in [name] if isinstance(record, dict) and name in record else name.split("."):
        if not isinstance(value, dict) or key not in value:
            raise ValueError(f"{path}:{lineno}: no field {name!r}")
        value = value[key]
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{path}:{lineno}: field {name!r} is {type(value).__name__}, not a string")
    return value


def load_hub(
    name: str,
    config: str | None,
    split: str,
    src_field: str,
    tgt_field: str,
    cache_dir: str | os.PathLike[str] | None = None,
) -> datasets.Dataset:
    """``datasets.load_dataset(name, config, split=split)`` -> Dataset{src, tgt}.

    Nested records are flattened first, so ``src_field="translation.de"`` works for the
    WMT-style ``{"translation": {"de": ..., "en": ...}}`` layout. Needs the hub (or a
    populated ``cache_dir``); not exercised by the offline tests.
    """
    ds = datasets.load_dataset(name, config, split=split, cache_dir=cache_dir)
    return select_pair(ds.flatten(), src_field, tgt_field, f"hub:{name}[{split}]")


def select_pair(
    ds: datasets.Dataset, src_field: str, tgt_field: str, where: str
) -> datasets.Dataset:
    """Keep two columns and name them ``src``/``tgt``."""
    for name in (src_field, tgt_field):
        if name not in ds.column_names:
            raise ValueError(f"{where}: no column {name!r}; columns: {ds.column_names}")
    if src_field == tgt_field:
        raise ValueError(f"{where}: src_field and tgt_field are both {src_field!r}")
    ds = ds.select_columns([src_field, tgt_field])
    # two steps, so swapping names (src_field="tgt", tgt_field="src") cannot collide
    ds = ds.rename_columns({src_field: "__src", tgt_field: "__tgt"})
    return ds.rename_columns({"__src": "src", "__tgt": "tgt"})


def _strip_pairs(batch: dict[str, list]) -> dict[str, list]:
    return {side: [(s or "").strip() for s in batch[side]] for side in ("src", "tgt")}


def _both_nonempty(batch: dict[str, list]) -> list[bool]:
    return [bool(s) and bool(t) for s, t in zip(batch["src"], batch["tgt"], strict=True)]


def clean_pairs(ds: datasets.Dataset, where: str) -> datasets.Dataset:
    """Strip both sides and drop pairs with an empty side, logging how many went."""
    ds = ds.map(_strip_pairs, batched=True, desc="strip")
    kept = ds.filter(_both_nonempty, batched=True, desc="drop empty pairs")
    if len(kept) < len(ds):
        log.warning(
            "%s: dropped %d of %d pairs with an empty side", where, len(ds) - len(kept), len(ds)
        )
    if len(kept) == 0:
        raise ValueError(f"{where}: no sentence pairs left after dropping empty lines")
    return kept


def load_split(cfg: DataConfig, split: str) -> datasets.Dataset:
    """Dataset{src, tgt} of ``split``, stripped, pairs with an empty side dropped.

    One code path for every source once loaded; the local formats give identical examples.
    """
    files = split_files(cfg, split)
    if cfg.format == "hub" and cfg.corpus is None:
        hub_cache = Path(cfg.cache_dir) / "hf"
        raw = load_hub(cfg.hub_name, cfg.hub_config, split, cfg.src_field, cfg.tgt_field, hub_cache)
    elif cfg.format == "tsv":
        raw = load_tsv(files[0])
    elif cfg.format == "jsonl":
        raw = load_jsonl(files[0], cfg.src_field, cfg.tgt_field)
    else:
        raw = load_text_pair(*files)
    return clean_pairs(raw, describe_split(cfg, split))


# ---------------------------------------------------------------------------------------
# Fingerprints and the on-disk cache
# ---------------------------------------------------------------------------------------
def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


@functools.lru_cache(maxsize=64)
def _file_sha256(path: str, size: int, mtime_ns: int) -> str:
    # size and mtime are part of the memo key so an edited file is hashed again
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def file_sha256(path: str | os.PathLike[str]) -> str:
    """Content hash of a file (memoized per size/mtime within the process)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"data file not found: {path}")
    st = path.stat()
    return _file_sha256(str(path.resolve()), st.st_size, st.st_mtime_ns)


def split_fingerprint(cfg: DataConfig, split: str) -> str:
    """Identifies a split's content and how it is read (not where the files live)."""
    files = split_files(cfg, split)
    spec: dict[str, Any] = {"format": cfg.format, "fields": [cfg.src_field, cfg.tgt_field]}
    if files:
        spec["files"] = [file_sha256(p) for p in files]
    else:  # the hub dataset's own fingerprint covers its content and version
        hub_cache = Path(cfg.cache_dir) / "hf"
        ds = datasets.load_dataset(cfg.hub_name, cfg.hub_config, split=split, cache_dir=hub_cache)
        spec["hub"] = [cfg.hub_name, cfg.hub_config, split, ds._fingerprint]
    return _digest(spec)


@contextmanager
def _atomic_dir(final: Path) -> Iterator[Path]:
    """Yield a temp dir that becomes ``final`` on success; a concurrent writer may win."""
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
        os.replace(tmp, final)
    except OSError:
        if not final.is_dir():
            raise
        log.info("cache entry %s was written concurrently; keeping that one", final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------------------
# Tokenizers (training split only, cached)
# ---------------------------------------------------------------------------------------
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
    key = _digest(
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
    with _atomic_dir(root) as tmp:
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
    key = _digest(
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
        with _atomic_dir(path) as tmp:
            ds.save_to_disk(str(tmp))
        log.info("%s: %d pairs tokenized -> %s", where, len(ds), path)
    return datasets.load_from_disk(str(path))


# ---------------------------------------------------------------------------------------
# Batches
# ---------------------------------------------------------------------------------------
def _pack(sizes: np.ndarray, max_tokens: int) -> list[int]:
    """Greedy batch boundaries over ascending ``sizes``: cost = count x largest size."""
    bounds, start = [], 0
    for i, size in enumerate(sizes.tolist()):
        if i > start and (i - start + 1) * size > max_tokens:
            bounds.append(i)
            start = i
    return bounds


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
        src = np.asarray(lengths_src, dtype=np.int64)
        tgt = np.asarray(lengths_tgt, dtype=np.int64)
        if src.ndim != 1 or src.shape != tgt.shape or len(src) == 0:
            raise ValueError(
                "TokenBudgetSampler: need two non-empty 1-D length lists of equal size, "
                f"got shapes {src.shape} and {tgt.shape}"
            )
        if not 0 <= rank < num_replicas:
            raise ValueError(f"TokenBudgetSampler: rank {rank} not in [0, {num_replicas})")
        self.max_tokens, self.shuffle, self.seed = max_tokens, shuffle, seed
        self.num_replicas, self.rank = num_replicas, rank
        self.epoch, self.start_batch, self._position = 0, 0, 0
        self.sizes = np.maximum(src, tgt)
        self._tiebreak = src + tgt  # similar shapes on both sides within a batch
        self._order = np.lexsort((self._tiebreak, self.sizes))
        # Whatever the tie order, the sorted size sequence is the same: boundaries are fixed.
        self._bounds = _pack(self.sizes[self._order], max_tokens)
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
            return np.split(self._order, self._bounds)
        rng = np.random.default_rng([self.seed, epoch])
        order = np.lexsort((rng.permutation(len(self.sizes)), self._tiebreak, self.sizes))
        batches = np.split(order, self._bounds)
        return [batches[i] for i in rng.permutation(len(batches))]

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


# ---------------------------------------------------------------------------------------
# Lightning
# ---------------------------------------------------------------------------------------
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

    def use_tokenizers(self, tokenizers: TokenizerPair) -> None:
        """Use these (e.g. from a checkpoint) instead of the cached/trained ones."""
        self.tokenizers = tokenizers

    # -- Lightning hooks ------------------------------------------------------------------
    def prepare_data(self) -> None:
        """Train/cache the tokenizers and the tokenized splits (rank 0 under Lightning)."""
        cfg = self.config
        tokenizers = self.tokenizers or load_or_train_tokenizers(cfg)
        tokenized_split(cfg, cfg.train_split, tokenizers, train=True)
        tokenized_split(cfg, cfg.valid_split, tokenizers, train=False)

    def setup(self, stage: str | None = None) -> None:
        """Load what ``prepare_data`` cached (building it if it is missing)."""
        cfg = self.config
        if self.tokenizers is None:
            self.tokenizers = load_or_train_tokenizers(cfg)
        if stage in (None, "fit") and self.train_dataset is None:
            self.train_dataset = tokenized_split(cfg, cfg.train_split, self.tokenizers, train=True)
        if stage in (None, "fit", "validate") and self.val_dataset is None:
            self.val_dataset = tokenized_split(cfg, cfg.valid_split, self.tokenizers, train=False)
            self.val_src_texts = list(self.val_dataset["src"])
            self.val_ref_texts = list(self.val_dataset["tgt"])

    @property
    def src_vocab_size(self) -> int:
        return self._tokenizers().src.vocab_size

    @property
    def tgt_vocab_size(self) -> int:
        return self._tokenizers().tgt.vocab_size

    def train_dataloader(self) -> DataLoader:
        loader = self._loader(self.train_dataset, shuffle=True)
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

    def _loader(self, ds: datasets.Dataset | None, shuffle: bool) -> DataLoader:
        if ds is None:
            raise RuntimeError("Seq2SeqDataModule: call setup() before asking for a dataloader")
        rank, world = self._rank()
        sampler = TokenBudgetSampler(
            column(ds, "src_len") + 1,  # + eos
            column(ds, "tgt_len") + 1,  # + bos (tgt_in) / eos (tgt_out)
            self.config.max_tokens,
            shuffle=shuffle,
            seed=self.config.seed,
            num_replicas=world,
            rank=rank,
        )
        tok = self._tokenizers().tgt
        return DataLoader(
            ds.select_columns(["id", "src_ids", "tgt_ids"]),
            batch_sampler=sampler,
            collate_fn=partial(collate, pad_id=tok.pad_id, bos_id=tok.bos_id, eos_id=tok.eos_id),
            num_workers=self.config.num_workers,
            persistent_workers=self.config.num_workers > 0,
            pin_memory=torch.cuda.is_available(),
        )
