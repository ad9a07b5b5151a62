"""Content fingerprints and atomic cache entries for the data pipeline.

Cache layout under :func:`cache_root` (safe to delete; entries are written atomically)::

    file-hashes/<key>                        sha256 of a data file, key = (path, size, mtime)
    pairs/<key>/pairs.arrow                  key = sha256(split content, how it is read)
    tokenizers/<key>/{joint|src|tgt}.model   key = sha256(training data content, tokenizer settings)
    datasets/<key>/tokens*.arrow             key = sha256(split content, tokenizer sha256s, filters)
    hf/                                      datasets.load_dataset cache (format="hub")

Arrow files are memory-mapped when loaded: their pages are shared by every process that
reads them (DataLoader workers, DDP ranks on one machine) and cost no heap.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from seq2seq.config import DataConfig
from seq2seq.data.sources import load_hub, side_files
from seq2seq.files import check_regular_file, write_atomic
from seq2seq.machine import cache_home

log = logging.getLogger(__name__)

# Bump when a change here alters what the cache holds, so stale entries are not reused.
CACHE_VERSION = 3


def cache_root(cfg: DataConfig) -> Path:
    """``DataConfig.cache_dir`` when set; else ``$SEQ2SEQ_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/seq2seq``, else ``~/.cache/seq2seq``: never the working directory."""
    if cfg.cache_dir is not None:
        return Path(cfg.cache_dir).expanduser()
    return cache_home()


def digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


@functools.lru_cache(maxsize=64)
def _file_sha256(path: str, size: int, mtime_ns: int) -> str:
    # size and mtime are part of the memo key so an edited file is hashed again
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def file_sha256(path: str | os.PathLike[str], memo: Path | None = None) -> str:
    """Content hash of a file, memoized per (path, size, mtime) within the process and,
    with ``memo``, in that folder across runs: a warm start does not re-read GBs of text."""
    path = Path(path)
    check_regular_file(path, "data file")  # a folder, FIFO or device is named as such
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    entry = memo / digest(key)[:32] if memo is not None else None
    if entry is not None and entry.is_file():
        return entry.read_text()
    sha = _file_sha256(*key)
    if entry is not None:
        write_atomic(entry, lambda f: f.write(sha.encode()))
    return sha


def split_fingerprint(cfg: DataConfig, split: str) -> str:
    """Identifies a split's content and how it is read (not where the files live)."""
    src, tgt = side_files(cfg, split)
    spec: dict[str, Any] = {"format": cfg.format, "fields": [cfg.src_field, cfg.tgt_field]}
    if src:
        memo = cache_root(cfg) / "file-hashes"
        spec["files"] = [[file_sha256(p, memo) for p in side] for side in (src, tgt)]
    elif cfg.streaming:  # a stream has no fingerprint short of reading it: its name stands in
        spec["hub"] = [cfg.hub_name, cfg.hub_config, split, "streaming"]
    else:  # the hub dataset's own fingerprint covers its content and version
        ds = load_hub(cfg, split, cache_root(cfg) / "hf")
        spec["hub"] = [cfg.hub_name, cfg.hub_config, split, ds._fingerprint]
    return digest(spec)


@contextmanager
def atomic_dir(final: Path) -> Iterator[Path]:
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
