"""Where parallel text comes from: every source is read as a stream of ``(src, tgt)`` batches.

Named corpora (``multi30k``: ``{data_dir}/{split}.{lang}.gz``), line-aligned text files,
TSV (no quoting) and JSONL (dotted field paths), each given per side as one file, a list
of files or a glob (plain or gzip, shards paired in sorted order), and hub datasets
(prepared, or streamed). :func:`pair_batches` strips both sides and drops pairs with an
empty side; :func:`write_pairs` stores the stream as an Arrow file, memory-mapped on load.
Nothing here holds more than one batch of sentences.
"""

from __future__ import annotations

import csv
import gzip
import itertools
import json
import logging
import os
import zlib
from collections.abc import Iterable, Iterator, Sequence
from glob import glob
from pathlib import Path
from typing import Any

import datasets
from datasets.arrow_writer import ArrowWriter
from datasets.distributed import split_dataset_by_node

from seq2seq.config import DataConfig
from seq2seq.files import check_regular_file
from seq2seq.shipped import multi30k_dir

log = logging.getLogger(__name__)

MULTI30K_LANGS: tuple[str, ...] = ("en", "de", "fr", "cs")
MULTI30K_SPLITS: tuple[str, ...] = (
    "train",
    "val",
    "test_2016_flickr",
    "test_2017_flickr",
    "test_2017_mscoco",
)
# Languages shipped for some splits only (Czech: WMT16's multimodal task, no 2017 tests).
MULTI30K_PARTIAL: dict[str, tuple[str, ...]] = {"cs": ("train", "val", "test_2016_flickr")}
BATCH = 10_000  # pairs per batch on the way to Arrow
_CHUNK = 1 << 20  # bytes read at a time
PAIR_FEATURES = datasets.Features({"src": datasets.Value("string"), "tgt": datasets.Value("string")})
Pairs = tuple[list[str], list[str]]


def resolve_corpus(cfg: DataConfig, split: str) -> tuple[Path, Path]:
    """``(src_path, tgt_path)`` of a named-corpus split: ``{data_dir}/{split}.{lang}.gz``; the
    shipped copy (:mod:`seq2seq.shipped`, found from any folder) when ``data_dir`` is None."""
    src, tgt = multi30k_files(cfg, split, [(cfg.src_lang, "src_lang"), (cfg.tgt_lang, "tgt_lang")])
    return src, tgt


def multi30k_files(cfg: DataConfig, split: str, langs: Sequence[tuple[str, str]]) -> list[Path]:
    """The ``{split}.{lang}.gz`` file of each ``(lang, option naming it)``, checked against
    what Multi30k has."""
    if cfg.corpus != "multi30k":
        raise ValueError(f"unknown corpus {cfg.corpus!r}; choices: ['multi30k']")
    if split not in MULTI30K_SPLITS:
        raise ValueError(f"unknown multi30k split {split!r}; choices: {list(MULTI30K_SPLITS)}")
    for lang, option in langs:
        if lang not in MULTI30K_LANGS:
            raise ValueError(f"unknown multi30k language {lang!r} (DataConfig.{option}); "
                             f"choices: {list(MULTI30K_LANGS)}")
        if split not in MULTI30K_PARTIAL.get(lang, MULTI30K_SPLITS):
            raise ValueError(f"multi30k has no {lang!r} text for split {split!r} (DataConfig.{option}); "
                             f"{lang}: {list(MULTI30K_PARTIAL[lang])}")
    names = [f"{split}.{lang}.gz" for lang, _ in langs]
    root = Path(cfg.data_dir) if cfg.data_dir is not None else multi30k_dir(names)
    return [root / name for name in names]


def expand_files(spec: str | os.PathLike[str] | Sequence[str], option: str) -> list[Path]:
    """A path, a glob or a list of either -> files, each glob in sorted order.

    A glob that matches nothing is an error naming ``option``; a plain path is returned
    as given (reading it reports a missing file).
    """
    patterns = [spec] if isinstance(spec, str | os.PathLike) else list(spec)
    if not patterns:
        raise ValueError(f"DataConfig.{option}: empty list of files")
    files: list[Path] = []
    for pattern in map(str, patterns):
        if any(c in pattern for c in "*?["):
            found = sorted(glob(os.path.expanduser(pattern)))
            if not found:
                raise FileNotFoundError(f"DataConfig.{option}: no file matches {pattern!r}")
            files += map(Path, found)
        else:
            files.append(Path(os.path.expanduser(pattern)))
    return files


def side_files(cfg: DataConfig, split: str) -> tuple[list[Path], list[Path]]:
    """Local files of ``split``, per side (text) or all in ``src`` (tsv/jsonl); hub: none."""
    if cfg.corpus is not None:
        src, tgt = resolve_corpus(cfg, split)
        return [src], [tgt]
    if cfg.format == "hub":
        return [], []
    roles = {
        cfg.train_split: ("train_src", "train_tgt"),
        cfg.valid_split: ("valid_src", "valid_tgt"),
    }
    if split not in roles:
        raise ValueError(
            f"unknown split {split!r} for explicit files; choices: {list(roles)} "
            "(DataConfig.train_split / valid_split)"
        )
    src_opt, tgt_opt = roles[split]
    src = expand_files(getattr(cfg, src_opt), src_opt)
    if cfg.format != "text":
        return src, []
    tgt = expand_files(getattr(cfg, tgt_opt), tgt_opt)
    if len(src) != len(tgt):
        raise ValueError(
            f"DataConfig.{src_opt} gives {len(src)} file(s) but {tgt_opt} gives {len(tgt)}; "
            "shards are paired in sorted order, so give the same number per side"
        )
    return src, tgt


def split_files(cfg: DataConfig, split: str) -> list[Path]:
    """Every local file holding ``split`` (empty for the hub)."""
    src, tgt = side_files(cfg, split)
    return src + tgt


def describe_split(cfg: DataConfig, split: str) -> str:
    """Human-readable origin of a split, used in log lines and errors."""
    files = split_files(cfg, split)
    if len(files) > 4:
        return f"{files[0]} .. {files[-1]} ({len(files)} files)"
    if files:
        return " + ".join(str(p) for p in files)
    config = f"/{cfg.hub_config}" if cfg.hub_config else ""
    return f"hub:{cfg.hub_name}{config}[{split}]"


# ---------------------------------------------------------------------------------------
# Reading local files: line streams, never a whole file in memory
# ---------------------------------------------------------------------------------------
def _chunks(path: Path) -> Iterator[bytes]:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                yield chunk
    except (OSError, EOFError, zlib.error) as exc:
        raise ValueError(f"{path}: cannot read ({exc})") from None


def _decode(block: bytes, path: Path, lines_before: int) -> list[str]:
    """Lines of ``block`` (which ends with a newline), ``\\r\\n`` endings removed."""
    try:
        text = block.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = lines_before + block.count(b"\n", 0, exc.start) + 1
        raise ValueError(f"{path}:{line}: invalid UTF-8 ({exc.reason})") from None
    if lines_before == 0:
        text = text.removeprefix("\ufeff")
    return text.replace("\r\n", "\n").split("\n")[:-1]


def iter_line_blocks(path: str | os.PathLike[str]) -> Iterator[list[str]]:
    """Lines of a UTF-8 text file (gzip when the name ends in ``.gz``), a block at a time.

    Splits on ``\\n`` only, so U+2028 and friends inside a sentence do not shift the
    alignment of parallel files. Raises one-line errors naming the file (and line).
    """
    path = Path(path)
    check_regular_file(path, "data file")  # a folder, FIFO or device is named as such
    rest, lines_before = b"", 0
    for chunk in _chunks(path):
        data = rest + chunk
        cut = data.rfind(b"\n") + 1
        rest = data[cut:]
        if cut:
            yield _decode(data[:cut], path, lines_before)
            lines_before += data.count(b"\n", 0, cut)
    if rest:  # a last line without a final newline
        yield _decode(rest + b"\n", path, lines_before)


def iter_lines(path: str | os.PathLike[str]) -> Iterator[str]:
    """Lines of a text file, one at a time (see :func:`iter_line_blocks`)."""
    return itertools.chain.from_iterable(iter_line_blocks(path))


def read_lines(path: str | os.PathLike[str]) -> list[str]:
    """All lines of a (small) text file: test sets, ``--input`` files."""
    return list(iter_lines(path))


def _count(it: Iterator[Any]) -> int:
    return sum(1 for _ in it)


def text_pairs(src_path: Path, tgt_path: Path) -> Iterator[tuple[str, str]]:
    """Two line-aligned files -> pairs (raw, nothing dropped); unequal lengths are an error."""
    src_it, tgt_it, n = iter_lines(src_path), iter_lines(tgt_path), 0
    for s in src_it:
        t = next(tgt_it, None)
        if t is None:
            n_src, n_tgt = n + 1 + _count(src_it), n
            break
        n += 1
        yield s, t
    else:
        n_src, n_tgt = n, n + _count(tgt_it)
    if n_src != n_tgt:
        raise ValueError(
            f"line count mismatch: {src_path} has {n_src} lines, {tgt_path} has {n_tgt}"
        )


def tsv_pairs(path: Path) -> Iterator[tuple[str, str]]:
    """``src<TAB>tgt`` per line, no quoting (quotes are text)."""
    rows = csv.reader(iter_lines(path), delimiter="\t", quoting=csv.QUOTE_NONE)
    for lineno, row in enumerate(rows, 1):
        row = row or ["", ""]  # csv gives [] for an empty line: an empty pair, dropped later
        if len(row) != 2:
            raise ValueError(f"{path}:{lineno}: expected 2 tab-separated fields, got {len(row)}")
        yield row[0], row[1]


def jsonl_pairs(path: Path, src_field: str = "src", tgt_field: str = "tgt") -> Iterator[tuple[str, str]]:
    """One JSON object per line; fields may be dotted paths (``translation.de``)."""
    for lineno, line in enumerate(iter_lines(path), 1):
        if not line.strip():
            continue  # blank separator lines hold no record
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{lineno}: invalid JSON ({exc.msg})") from None
        yield field(record, src_field, f"{path}:{lineno}"), field(record, tgt_field, f"{path}:{lineno}")


def field(record: Any, name: str, where: str) -> str:
    """``record[name]``, or a dotted path into nested records; None reads as empty."""
    value = record
    for key in [name] if isinstance(record, dict) and name in record else name.split("."):
        if not isinstance(value, dict) or key not in value:
            raise ValueError(f"{where}: no field {name!r}")
        value = value[key]
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{where}: field {name!r} is {type(value).__name__}, not a string")
    return value


# ---------------------------------------------------------------------------------------
# The hub: prepared (load_dataset, then stored like any source) or streamed
# ---------------------------------------------------------------------------------------
def load_hub(cfg: DataConfig, split: str, cache_dir: str | os.PathLike[str] | None = None):
    """``datasets.load_dataset(hub_name, hub_config, split=split)``; an ``IterableDataset``
    when ``cfg.streaming``. Needs the hub (or a populated ``cache_dir``)."""
    return datasets.load_dataset(
        cfg.hub_name, cfg.hub_config, split=split, cache_dir=cache_dir, streaming=cfg.streaming
    )


def records_to_pairs(ds: datasets.Dataset | datasets.IterableDataset, cfg: DataConfig, where: str) -> Iterator[tuple[str, str]]:
    """Records of a hub split -> pairs; ``src_field="translation.de"`` reaches into the
    WMT-style ``{"translation": {"de": ..., "en": ...}}`` layout."""
    src_field, tgt_field = cfg.src_field, cfg.tgt_field
    if src_field == tgt_field:
        raise ValueError(f"{where}: src_field and tgt_field are both {src_field!r}")
    if isinstance(ds, datasets.IterableDataset):  # streamed: one record at a time
        for i, record in enumerate(ds):
            yield field(record, src_field, f"{where} row {i}"), field(record, tgt_field, f"{where} row {i}")
        return
    ds = ds.flatten()  # prepared: whole columns, a batch at a time
    for name in (src_field, tgt_field):
        if name not in ds.column_names:
            raise ValueError(f"{where}: no column {name!r}; columns: {ds.column_names}")
    for batch in ds.select_columns([src_field, tgt_field]).iter(BATCH):
        yield from zip([s or "" for s in batch[src_field]], [t or "" for t in batch[tgt_field]], strict=True)


def raw_pairs(cfg: DataConfig, split: str, hub_cache: Path | None = None) -> Iterator[tuple[str, str]]:
    """Every pair of ``split`` as read, shards in order, nothing dropped yet."""
    if cfg.format == "hub" and cfg.corpus is None:
        return records_to_pairs(load_hub(cfg, split, hub_cache), cfg, describe_split(cfg, split))
    src, tgt = side_files(cfg, split)
    if cfg.format == "tsv":
        return itertools.chain.from_iterable(map(tsv_pairs, src))
    if cfg.format == "jsonl":
        return itertools.chain.from_iterable(
            jsonl_pairs(p, cfg.src_field, cfg.tgt_field) for p in src
        )
    return itertools.chain.from_iterable(map(text_pairs, src, tgt))


# Records shuffled by ``datasets`` before our buffer (which shuffles once more within
# each length); the shard order is shuffled per epoch as well.
RECORD_SHUFFLE = 10_000


def hub_pair_stream(
    cfg: DataConfig, seed: int, epoch: int = 0, part: int = 0, parts: int = 1
) -> Iterator[Pairs]:
    """Cleaned pair batches of this part (rank x worker) of the shuffled training stream."""
    ds = load_hub(cfg, cfg.train_split)
    if not isinstance(ds, datasets.IterableDataset):
        raise ValueError(f"hub:{cfg.hub_name}: expected a streamed dataset (DataConfig.streaming)")
    if parts > 1:
        ds = split_dataset_by_node(ds, rank=part, world_size=parts)
    ds = ds.shuffle(seed=seed, buffer_size=RECORD_SHUFFLE)
    ds.set_epoch(epoch)
    where = f"{describe_split(cfg, cfg.train_split)} (streamed, part {part} of {parts})"
    return clean(records_to_pairs(ds, cfg, where), where, cfg.shuffle_buffer)


# ---------------------------------------------------------------------------------------
# Cleaning and storing
# ---------------------------------------------------------------------------------------
def clean(pairs: Iterable[tuple[str, str]], where: str, batch_size: int = BATCH) -> Iterator[Pairs]:
    """Batches of stripped pairs, those with an empty side dropped (logged once at the end)."""
    it, seen, kept = iter(pairs), 0, 0
    while batch := list(itertools.islice(it, batch_size)):
        stripped = [(s.strip(), t.strip()) for s, t in batch]
        keep = [(s, t) for s, t in stripped if s and t]
        seen, kept = seen + len(batch), kept + len(keep)
        if keep:
            src, tgt = zip(*keep, strict=True)
            yield list(src), list(tgt)
    if kept < seen:
        log.warning("%s: dropped %d of %d pairs with an empty side", where, seen - kept, seen)
    if kept == 0:
        raise ValueError(f"{where}: no sentence pairs left after dropping empty lines")


def pair_batches(cfg: DataConfig, split: str, hub_cache: Path | None = None) -> Iterator[Pairs]:
    """``split`` as batches of stripped, non-empty pairs: one code path for every source."""
    return clean(raw_pairs(cfg, split, hub_cache), describe_split(cfg, split))


def write_pairs(batches: Iterable[Pairs], path: str | os.PathLike[str]) -> int:
    """Store pair batches as one Arrow file ``{src, tgt}``; returns the number of pairs."""
    with ArrowWriter(features=PAIR_FEATURES, path=str(path)) as writer:
        for src, tgt in batches:
            writer.write_batch({"src": src, "tgt": tgt})
        n, _ = writer.finalize()
    return n
