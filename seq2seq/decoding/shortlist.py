"""Building the vocabulary shortlist's lexical table (``seq2seq-shortlist``), stored in the
checkpoint's ``shortlist`` entry; decoding over it is ``model/inference/shortlist.py``'s.

The table holds, for each source piece, the ``K`` target pieces most associated with it in
a parallel corpus (sentence co-occurrence, Dice or ``p(t | s)``), and the ``N`` most frequent
target pieces with every special id.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from seq2seq.config import ShortlistConfig
from seq2seq.fields import FieldError, FieldWarning
from seq2seq.specials import PAD_ID


def pair_matrix(ids: Sequence[Sequence[int]], vocab: int) -> Tensor:
    """Sparse ``(n, vocab)`` float64 0/1 matrix: which ids occur in each of ``n`` sentences."""
    lengths = torch.tensor([len(s) for s in ids], dtype=torch.long)
    cols = torch.tensor([i for s in ids for i in s], dtype=torch.long)
    rows = torch.repeat_interleave(torch.arange(len(ids)), lengths)
    m = torch.sparse_coo_tensor(torch.stack((rows, cols)), torch.ones(cols.numel(),
                                dtype=torch.float64), (len(ids), vocab),
                                check_invariants=False).coalesce()
    return torch.sparse_coo_tensor(m.indices(), m.values().clamp(max=1.0), m.shape,
                                   check_invariants=False).coalesce()


def build_table(src_ids: Sequence[Sequence[int]], tgt_ids: Sequence[Sequence[int]],
                src_vocab: int, tgt_vocab: int, cfg: ShortlistConfig,
                filler: int = PAD_ID, specials: Iterable[int] = ()) -> tuple[Tensor, Tensor]:
    """The table ``(src_vocab, K)`` and the frequent ids ``(N',)`` of a corpus of id lists.

    ``c(s, t)``: sentences holding both, ``c(s)``, ``c(t)``: sentences holding each (sparse
    matrix products, no loop over tokens). Row ``s``: the ``K`` ids of highest score, ties
    by lower id, then ``filler`` where fewer than ``K`` co-occur (``K`` at most ``tgt_vocab``:
    a row holds at most every target id). Frequent: the ``N`` ids of most occurrences (ties by
    lower id), then ``specials``."""
    a = pair_matrix(src_ids, src_vocab)  # (n, V_src)
    b = pair_matrix(tgt_ids, tgt_vocab)  # (n, V_tgt)
    with warnings.catch_warnings():  # "sparse CSR support is in beta": used internally
        warnings.simplefilter("ignore")
        joint = torch.sparse.mm(a.t().coalesce(), b).coalesce()  # (V_src, V_tgt): c(s, t)
    (s, t), c = joint.indices(), joint.values()
    c_src = torch.sparse.sum(a, 0).to_dense()  # (V_src,)
    c_tgt = torch.sparse.sum(b, 0).to_dense()  # (V_tgt,)
    score = 2 * c / (c_src[s] + c_tgt[t]) if cfg.score == "dice" else c / c_src[s]
    # order by (row, -score, id): stable sorts from the last key to the first
    order = torch.argsort(t, stable=True)
    order = order[torch.argsort(-score[order], stable=True)]
    order = order[torch.argsort(s[order], stable=True)]
    s, t = s[order], t[order]
    starts = torch.searchsorted(s, s, side="left")
    rank = torch.arange(s.numel()) - starts  # position within its row
    k = min(cfg.per_source, tgt_vocab)
    keep = rank < k
    table = torch.full((src_vocab, k), filler, dtype=id_type(tgt_vocab))
    table[s[keep], rank[keep]] = t[keep].to(table.dtype)
    counts = torch.bincount(torch.tensor([i for x in tgt_ids for i in x], dtype=torch.long),
                            minlength=tgt_vocab)
    top = torch.argsort(-counts, stable=True)[: cfg.frequent]
    top = top[counts[top] > 0]
    frequent = torch.unique(torch.cat((top, torch.tensor(sorted(set(specials)), dtype=torch.long))))
    return table, frequent.to(id_type(tgt_vocab))


def id_type(vocab: int) -> torch.dtype:
    """The smallest integer type that holds the ids of ``vocab`` (int16 up to 32,767)."""
    return torch.int16 if vocab <= torch.iinfo(torch.int16).max + 1 else torch.int32


def specials_of(arch, tgt_tokenizer, tags: Iterable[str] = ()) -> set[int]:
    """Pad, unk, bos, eos and those of the language-tag pieces the target vocabulary has."""
    ids = {arch.pad_id, arch.bos_id, arch.eos_id, tgt_tokenizer.unk_id}
    for tag in tags:
        try:
            ids.add(tgt_tokenizer.piece_id(tag))
        except KeyError:  # tags on the source side only (a separate source vocabulary)
            pass
    return ids


# ---------------------------------------------------------------- a checkpoint's table
def default_files(pair: tuple[str | None, str | None], cfg: ShortlistConfig,
                  where: str = "checkpoint") -> tuple[Path, Path]:
    """The shipped Multi30k ``cfg.split`` files of the model's direction (source, target)."""
    from seq2seq.config import DataConfig
    from seq2seq.data.sources import multi30k_files  # datasets: slow to import

    src, tgt = pair
    if src is None or tgt is None:
        raise FieldError("{where}: does not record one language pair (a multilingual model?), "
                         "so the default Multi30k files are unknown; give {source} and {target}",
                         where=where)
    try:
        a, b = multi30k_files(DataConfig(src_lang=src, tgt_lang=tgt), cfg.split,
                              [(src, "src_lang"), (tgt, "tgt_lang")])
    except ValueError as e:  # a language Multi30k lacks
        raise FieldError("{where} translates {pair}: {e}; give {source} and {target}",
                         where=where, pair=f"{src}-{tgt}", e=e) from None
    return a, b


def shortlist_entry(ckpt: dict[str, Any], cfg: ShortlistConfig | None = None,
                    files: tuple[Path, Path] | None = None,
                    where: str = "checkpoint") -> dict[str, Any]:
    """The ``shortlist`` entry of a loaded checkpoint, built from ``files`` (line-aligned
    source and target text; default :func:`default_files`) with its tokenizers."""
    from seq2seq.checkpoint import config_of
    from seq2seq.data.sources import read_lines
    from seq2seq.data.tokenizer import TokenizerPair
    from seq2seq.directions import directions_of

    cfg = cfg or ShortlistConfig()
    meta = ckpt["seq2seq"]
    arch, tokenizers = config_of(meta, where), TokenizerPair.from_state(meta["tokenizers"])
    if cfg.per_source > arch.tgt_vocab_size:  # more columns would hold only filler
        warnings.warn(FieldWarning("{per_source} {k} is more than the model's {n} target "
                                   "pieces: capped at {n}", k=cfg.per_source,
                                   n=arch.tgt_vocab_size), stacklevel=2)
        cfg = replace(cfg, per_source=arch.tgt_vocab_size)
    paths = files or default_files((meta.get("src_lang"), meta.get("tgt_lang")), cfg, where)
    src, tgt = (read_lines(p) for p in paths)
    if len(src) != len(tgt):
        raise FieldError("{source} {a} has {m} lines but {target} {b} {n}: give line-aligned "
                         "files", a=paths[0], m=len(src), b=paths[1], n=len(tgt))
    src, tgt = (lines[: cfg.limit] if cfg.limit else lines for lines in (src, tgt))
    if not src:
        raise FieldError("{source} {path}: no lines to count pieces in", path=paths[0])
    directions = directions_of(meta, where)
    specials = specials_of(arch, tokenizers.tgt, directions.tags if directions else ())
    table, frequent = build_table(tokenizers.src.encode(src), tokenizers.tgt.encode(tgt),
                                  arch.src_vocab_size, arch.tgt_vocab_size, cfg,
                                  arch.pad_id, specials)
    return {"table": table, "frequent": frequent, "per_source": cfg.per_source,
            "frequent_n": cfg.frequent, "score": cfg.score, "pairs": len(src),
            "data": cfg.split if files is None else f"{paths[0].name} {paths[1].name}"}


def shortlist_file(path: str | os.PathLike, out: str | os.PathLike,
                   cfg: ShortlistConfig | None = None,
                   files: tuple[Path, Path] | None = None) -> dict[str, Any]:
    """Build the table of the checkpoint at ``path`` and write the checkpoint with it, under
    the checksum, atomically to ``out`` (keeping the permission bits of a file it replaces);
    everything else is written back as loaded (the weights bit for bit). Returns the entry."""
    from seq2seq.checkpoint import load_checkpoint, seal
    from seq2seq.files import save_atomic

    ckpt = load_checkpoint(path)
    entry = shortlist_entry(ckpt, cfg, files, f"checkpoint {path}")
    ckpt["seq2seq"]["shortlist"] = entry
    target = Path(out)
    mode = target.stat().st_mode & 0o7777 if target.exists() else None
    save_atomic(seal(ckpt), target, mode)
    return entry
