"""Several translation directions from one corpus whose languages are line-aligned files
(Multi30k: ``{split}.{lang}.gz``), every step cached as in ``seq2seq.data.prepare``:

    files --load_lines--> Dataset{en, de, fr}                line i of every language aligned
          --multi_tokenizers--> one joint model on a balanced sample, the tags <2xx> reserved
          --tokenized_lines--> Dataset{en_ids, en_len, de_ids, ...} (+ the text when needed)
          --direction_rows--> the pairs of every direction, length-filtered: (direction, line)

Each language is tokenized once; a direction's pairs are two of its columns on the same
lines, so no text or ids are copied per direction.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
from datasets.arrow_writer import ArrowWriter

from seq2seq.config import DataConfig, TokenizerConfig
from seq2seq.data.cache import CACHE_VERSION, atomic_dir, cache_root, digest, file_sha256
from seq2seq.data.prepare import cached_tokenizers, column, length_mask, load_arrow
from seq2seq.data.sources import BATCH, iter_lines, multi30k_files
from seq2seq.data.tokenizer import Tokenizer, TokenizerPair
from seq2seq.directions import Directions, tag_piece

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------
# Aligned lines, one column per language
# ---------------------------------------------------------------------------------------
def _files(cfg: DataConfig, split: str, langs: Sequence[str]) -> list[Path]:
    return multi30k_files(cfg, split, [(lang, "directions") for lang in langs])


def lines_key(cfg: DataConfig, split: str, langs: Sequence[str]) -> str:
    """Identifies the content of ``split`` in ``langs`` (not where the files live)."""
    memo = cache_root(cfg) / "file-hashes"
    return digest({"v": CACHE_VERSION, "langs": list(langs),
                   "files": [file_sha256(p, memo) for p in _files(cfg, split, langs)]})[:20]


def _write_lines(files: Sequence[Path], langs: Sequence[str], path: Path) -> int:
    features = datasets.Features({lang: datasets.Value("string") for lang in langs})
    streams = zip(*map(iter_lines, files), strict=True)
    try:
        with ArrowWriter(features=features, path=str(path)) as writer:
            while rows := list(itertools.islice(streams, BATCH)):
                writer.write_batch({lang: [r[i].strip() for r in rows] for i, lang in enumerate(langs)})
            n, _ = writer.finalize()
    except ValueError as e:
        if "zip()" not in str(e):
            raise
        raise ValueError(f"line count mismatch among {', '.join(map(str, files))}") from None
    return n


def load_lines(cfg: DataConfig, split: str, langs: Sequence[str]) -> datasets.Dataset:
    """Dataset{lang: text} of ``split``, stripped; empty lines stay (the length filter drops
    the pairs they are in), so line i is line i of every file."""
    path = cache_root(cfg) / "pairs" / lines_key(cfg, split, langs)
    if not (path / "lines.arrow").is_file():
        with atomic_dir(path) as tmp:
            n = _write_lines(_files(cfg, split, langs), langs, tmp / "lines.arrow")
        log.info("multi30k %s %s: %d lines -> %s", split, "/".join(langs), n, path)
    return load_arrow(path, "lines.arrow")


# ---------------------------------------------------------------------------------------
# One joint tokenizer, trained on the same number of sentences of every language
# ---------------------------------------------------------------------------------------
def balanced_sample(lines: datasets.Dataset, langs: Sequence[str], cfg: TokenizerConfig) -> Iterator[str]:
    """``min(lines, input_sentence_size // languages)`` sentences of every language, each
    language's lines drawn with ``cfg.seed`` (all of them when they fit), interleaved."""
    per_lang = min(len(lines), cfg.input_sentence_size // len(langs))
    rng = np.random.default_rng(cfg.seed)
    texts = [lines.select(np.sort(rng.choice(len(lines), per_lang, replace=False)))[lang] for lang in langs]
    return (text for group in zip(*texts, strict=True) for text in group if text)


def _train(cfg: DataConfig, directions: Directions) -> TokenizerPair:
    lines = load_lines(cfg, cfg.train_split, directions.languages)
    tok = Tokenizer.train(balanced_sample(lines, directions.languages, cfg.tokenizer), cfg.tokenizer,
                          reserved=directions.tags)
    return TokenizerPair(tok, tok)


def multi_tokenizers(cfg: DataConfig, directions: Directions) -> TokenizerPair:
    """The joint tokenizer of a multilingual run, cached under a key of the training text,
    the tokenizer settings and the directions (another direction list: another tokenizer)."""
    key = digest({"v": CACHE_VERSION, "lines": lines_key(cfg, cfg.train_split, directions.languages),
                  "tokenizer": asdict(cfg.tokenizer), "directions": directions.to_state()})[:20]
    meta = {"tokenizer": asdict(cfg.tokenizer), "directions": directions.to_state(),
            "trained_on": f"multi30k {cfg.train_split}, balanced over {list(directions.languages)}"}
    return cached_tokenizers(cache_root(cfg) / "tokenizers" / key, ("joint",), meta, _train, cfg, directions)


def tag_ids(tokenizers: TokenizerPair, directions: Directions) -> np.ndarray:
    """(directions,) the id of each direction's target-language tag."""
    tok = tokenizers.src if directions.tag_position == "source" else tokenizers.tgt
    try:
        return np.array([tok.piece_id(tag_piece(b)) for _, b in directions.pairs], dtype=np.int64)
    except KeyError as e:
        raise ValueError(f"the tokenizer has no tag piece {e.args[0]} for DataConfig.directions "
                         f"{directions.names()} (a tokenizer trained for other directions?)") from None


# ---------------------------------------------------------------------------------------
# Token ids, once per language, and the pairs of every direction
# ---------------------------------------------------------------------------------------
def _encode(batch: dict[str, list], tokenizer: Tokenizer, langs: Sequence[str], with_text: bool) -> dict:
    out: dict[str, list | np.ndarray] = {}
    for lang in langs:
        ids = tokenizer.encode(batch[lang])
        out |= {lang: batch[lang]} if with_text else {}
        out |= {f"{lang}_ids": ids, f"{lang}_len": np.fromiter(map(len, ids), np.int32, len(ids))}
    return out


def tokenized_lines(cfg: DataConfig, split: str, tokenizer: Tokenizer, langs: Sequence[str],
                    with_text: bool) -> datasets.Dataset:
    """Dataset{<lang>_ids, <lang>_len (no specials), and <lang> text with ``with_text``}."""
    key = digest({"v": CACHE_VERSION, "lines": lines_key(cfg, split, langs),
                  "tokenizer": tokenizer.fingerprint, "text": with_text})[:20]
    path = cache_root(cfg) / "datasets" / key
    if not (path / "meta.json").is_file():
        lines = load_lines(cfg, split, langs)
        ids = datasets.Sequence(datasets.Value("uint16" if tokenizer.vocab_size <= 1 << 16 else "int32"))
        features = {**({lang: datasets.Value("string") for lang in langs} if with_text else {}),
                    **{f"{lang}_{c}": ids if c == "ids" else datasets.Value("int32")
                       for lang in langs for c in ("ids", "len")}}
        with atomic_dir(path) as tmp:
            lines.map(_encode, batched=True, batch_size=BATCH, num_proc=cfg.num_proc,
                      fn_kwargs={"tokenizer": tokenizer, "langs": list(langs), "with_text": with_text},
                      features=datasets.Features(features), remove_columns=lines.column_names,
                      cache_file_name=str(tmp / "tokens.arrow"), desc="tokenize",
                      new_fingerprint=key)
            (tmp / "meta.json").write_text(json.dumps({"split": split, "lines": len(lines)}))
    return load_arrow(path, "tokens*.arrow")


@dataclass(frozen=True)
class DirectionRows:
    """The pairs of every direction as rows of a line dataset: pair k is line ``lines[k]``
    read in direction ``direction[k]`` (an index into ``pairs``); lengths without specials."""

    pairs: tuple[tuple[str, str], ...]
    lines: np.ndarray  # (N,)
    direction: np.ndarray  # (N,)
    src_len: np.ndarray  # (N,)
    tgt_len: np.ndarray  # (N,)

    def counts(self) -> np.ndarray:
        return np.bincount(self.direction, minlength=len(self.pairs))

    def of(self, d: int) -> np.ndarray:
        """The lines of direction ``d``."""
        return self.lines[self.direction == d]


def direction_rows(ds: datasets.Dataset, directions: Directions, max_len: int,
                   max_len_ratio: float | None, where: str) -> DirectionRows:
    """Every direction's pairs kept by ``length_mask`` (a source tag takes one position)."""
    extra = int(directions.tag_position == "source")
    lens = {lang: column(ds, f"{lang}_len").astype(np.int64) for lang in directions.languages}
    parts = []
    for d, (a, b) in enumerate(directions.pairs):
        kept = np.flatnonzero(length_mask(lens[a], lens[b], max_len - extra, max_len_ratio))
        log.info("%s %s-%s: dropped %d of %d pairs by length (max_len=%d, max_len_ratio=%s)",
                 where, a, b, len(ds) - len(kept), len(ds), max_len, max_len_ratio)
        if len(kept) == 0:
            raise ValueError(f"{where} {a}-{b}: no sentence pairs left after length filtering "
                             f"(max_len={max_len}, max_len_ratio={max_len_ratio})")
        parts.append((kept, np.full(len(kept), d), lens[a][kept] + extra, lens[b][kept]))
    lines, direction, src_len, tgt_len = (np.concatenate(p) for p in zip(*parts, strict=True))
    return DirectionRows(directions.pairs, lines, direction, src_len, tgt_len)


def direction_batch(table: pa.Table, rows: DirectionRows, indices: np.ndarray, tags: np.ndarray,
                    sampling=None) -> dict:
    """The pairs ``indices`` of ``rows`` for ``collate``, a direction at a time (their order
    in the batch is free: ``id`` tells them apart): ``table`` holds their lines, in order.
    With ``sampling`` (``SubwordSampling``) the text is re-segmented."""
    dirs = rows.direction[indices]
    order = np.argsort(dirs, kind="stable")
    src: list = []
    tgt: list = []
    for d in np.unique(dirs).tolist():
        (a, b), at = rows.pairs[d], order[dirs[order] == d]
        part = table.take(at)
        if sampling is not None:
            sides = pa.table({"src": part[a], "tgt": part[b], "src_ids": part[f"{a}_ids"],
                              "tgt_ids": part[f"{b}_ids"]})
            s, t = sampling.encode(sides, indices[at].tolist())
        else:
            s, t = part[f"{a}_ids"].to_pylist(), part[f"{b}_ids"].to_pylist()
        src += s
        tgt += t
    return {"src_ids": src, "tgt_ids": tgt, "id": indices[order], "tag": tags[dirs[order]]}
