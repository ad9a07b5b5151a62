"""Where parallel text comes from: every source ends as the same ``Dataset{src, tgt}``.

Named corpora (``multi30k``: ``{data_dir}/{split}.{lang}.gz``), line-aligned text files
(plain or gzip), TSV (no quoting), JSONL (dotted field paths) and hub datasets all go
through :func:`load_split`, which strips both sides and drops pairs with an empty side.
"""

from __future__ import annotations

import csv
import gzip
import json
import logging
import os
import zlib
from pathlib import Path
from typing import Any

import datasets

from seq2seq.config import DataConfig

log = logging.getLogger(__name__)

MULTI30K_LANGS: tuple[str, ...] = ("en", "de", "fr")
MULTI30K_SPLITS: tuple[str, ...] = (
    "train",
    "val",
    "test_2016_flickr",
    "test_2017_flickr",
    "test_2017_mscoco",
)


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
