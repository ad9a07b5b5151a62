"""What both exporters share: the model to export, the output folder, the vocabularies.

* :func:`load` accepts a ``Seq2Seq``, a checkpoint dict or a checkpoint path.
* :func:`prepare_dir` creates the output folder and marks it (:data:`MARKER`). With
  ``overwrite`` it replaces a previous export, and only that: a marked folder holding
  nothing but the files the target writes; it refuses a folder holding the input
  checkpoint or anything else (a ``--force`` typo must not delete a user's data).
* Vocabularies are token strings, index = our id: the checkpoint's SentencePiece pieces
  (:func:`pieces_from_state`), or placeholders (:func:`default_vocabulary`) for a bare
  ``Seq2Seq`` (a checkpoint without tokenizers is refused); :func:`fit_vocabulary` pads them to the model's vocabulary size.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from seq2seq.config import ModelConfig
from seq2seq.model import Seq2Seq
from seq2seq.specials import UNK_ID


# ---------------------------------------------------------------- the model
def load(ckpt_or_model: Any) -> tuple[Seq2Seq, dict[str, Any] | None]:
    """A model in eval mode and the checkpoint dict (None when given a bare model)."""
    from seq2seq.checkpoint import build_model, check, load_checkpoint

    if isinstance(ckpt_or_model, Seq2Seq):
        return ckpt_or_model.eval(), None
    if isinstance(ckpt_or_model, (str, os.PathLike)):
        ckpt_or_model = load_checkpoint(ckpt_or_model)  # verified: tokenizers, weights, checksum
    elif isinstance(ckpt_or_model, dict):
        check(ckpt_or_model, "checkpoint")
    if isinstance(ckpt_or_model, dict):
        return build_model(ckpt_or_model), ckpt_or_model
    raise TypeError(
        f"expected a Seq2Seq, a checkpoint dict or a checkpoint path, got {type(ckpt_or_model).__name__}"
    )


def source_path(ckpt_or_model: Any) -> Path | None:
    """The checkpoint file an export reads, when it reads one (the folder must keep it)."""
    return Path(ckpt_or_model) if isinstance(ckpt_or_model, (str, os.PathLike)) else None


def refuse(fmt: str, problems: list[str]) -> None:
    """One ValueError naming every option ``fmt`` cannot represent."""
    if problems:
        raise ValueError(f"{fmt} cannot represent " + "; ".join(problems))


# ---------------------------------------------------------------- the output folder
MARKER = ".seq2seq-export"  # written into every export folder: what --force may replace


def prepare_dir(
    out_dir: str | os.PathLike,
    overwrite: bool,
    fmt: str,
    is_product: Callable[[str], bool],
    source: Path | None = None,
) -> Path:
    """The output folder, created and empty of earlier ``fmt`` export files, with the
    :data:`MARKER` file that says an ``fmt`` export lives there.

    A non-empty folder needs ``overwrite``, and even then it must be a previous ``fmt``
    export (it has the marker) holding nothing but plain files for which ``is_product(name)``
    holds: only those are deleted. A folder that holds ``source`` (the input checkpoint), a
    subfolder, a link, any other file, or no marker is refused, untouched."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"output {out} exists and is not a directory")
    entries = sorted(out.iterdir()) if out.is_dir() else []
    if entries:
        _check_replaceable(out, entries, overwrite, fmt, is_product, source)
        for p in entries:
            p.unlink()
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / MARKER).write_text(json.dumps({"format": fmt}) + "\n", encoding="utf-8")
    except OSError as e:
        raise ValueError(f"output directory {out}: cannot write there ({e.strerror})") from None
    return out


def _check_replaceable(out: Path, entries: list[Path], overwrite: bool, fmt: str,
                       is_product: Callable[[str], bool], source: Path | None) -> None:
    # What --force could never replace is refused first, so the hint to use it is only
    # given where it would work.
    if source is not None and source.resolve().is_relative_to(out.resolve()):
        raise ValueError(
            f"output directory {out} holds the input checkpoint {source}; "
            "choose another output folder"
        )
    foreign = [p for p in entries if p.is_symlink() or not p.is_file()
               or not (is_product(p.name) or p.name == MARKER)]
    if foreign:
        raise ValueError(
            f"output directory {out} holds {foreign[0].name!r}, which is not a {fmt} export "
            "file; overwrite/--force only replaces a previous export"
        )
    try:
        written = json.loads((out / MARKER).read_text(encoding="utf-8")).get("format")
    except (OSError, ValueError, AttributeError):
        written = None
    if written != fmt:
        raise ValueError(
            f"output directory {out} is not a {fmt} export written by seq2seq-export (no "
            f"{MARKER} marker for it); overwrite/--force only replaces such a folder: "
            "choose another output folder"
        )
    if not overwrite:
        raise ValueError(f"output directory {out} holds an earlier {fmt} export; "
                         "overwrite/--force replaces it")


# ---------------------------------------------------------------- vocabularies
def pieces_from_state(state: dict[str, Any]) -> list[str]:
    """The SentencePiece pieces (index = id) of a tokenizer state ``{"model": bytes, ...}``."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_proto=bytes(state["model"]))
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())]


def default_vocabulary(size: int, arch: ModelConfig) -> list[str]:
    """Placeholder token strings for a model without tokenizers: ``<pad> <unk> <s> </s>``
    at their ids and ``<id{i}>`` elsewhere, so ``tokens = [vocab[i] for i in ids]``."""
    vocab = [f"<id{i}>" for i in range(size)]
    names = {UNK_ID: "<unk>", arch.pad_id: "<pad>", arch.bos_id: "<s>", arch.eos_id: "</s>"}
    for i, name in names.items():
        if i < size:
            vocab[i] = name
    return vocab


def fit_vocabulary(pieces: Sequence[str], size: int, side: str) -> list[str]:
    """Pieces of exactly ``size`` unique strings (extra model rows get ``<extra{i}>``)."""
    pieces = list(pieces)
    if len(pieces) > size:
        raise ValueError(
            f"{side} tokenizer has {len(pieces)} pieces but model.{side}_vocab_size={size}"
        )
    taken = set(pieces)
    for i in range(len(pieces), size):
        name = f"<extra{i}>"
        while name in taken:
            name = f"<{name}>"
        pieces.append(name)
        taken.add(name)
    seen: dict[str, int] = {}
    for i, p in enumerate(pieces):
        if p in seen:
            raise ValueError(
                f"{side} vocabulary has the piece {p!r} twice (ids {seen[p]} and {i}); "
                "token strings must be unique"
            )
        seen[p] = i
    return pieces


def vocabularies(
    model: Seq2Seq, ckpt: dict[str, Any] | None = None
) -> tuple[list[str], list[str]]:
    """Source and target token strings (index = id): the checkpoint's SentencePiece pieces,
    or :func:`default_vocabulary` when there is no checkpoint or it has no tokenizers."""
    arch = model.arch
    toks = tokenizer_states(ckpt)
    if toks:
        src = fit_vocabulary(pieces_from_state(toks["src"]), arch.src_vocab_size, "src")
        tgt = fit_vocabulary(pieces_from_state(toks["tgt"]), arch.tgt_vocab_size, "tgt")
    else:
        src = default_vocabulary(arch.src_vocab_size, arch)
        tgt = default_vocabulary(arch.tgt_vocab_size, arch)
    return src, tgt


def unk_token(vocab: Sequence[str]) -> str:
    """The unknown token's string: ``<unk>`` (our tokenizers' and Marian's), else the piece
    at our UNK id."""
    return "<unk>" if "<unk>" in vocab or UNK_ID >= len(vocab) else vocab[UNK_ID]


def tokenizer_states(ckpt: dict[str, Any] | None) -> dict[str, Any] | None:
    """The checkpoint's ``{"src": state, "tgt": state}`` tokenizers, if it has any."""
    return (ckpt or {}).get("seq2seq", {}).get("tokenizers")


# ---------------------------------------------------------------- multilingual models
def model_directions(ckpt: dict[str, Any] | None):
    """A checkpoint's :class:`~seq2seq.directions.Directions` (None: one direction, no tag)."""
    from seq2seq.directions import directions_of

    return None if ckpt is None else directions_of(ckpt["seq2seq"])


def refuse_multilingual(fmt: str, ckpt: dict[str, Any] | None) -> None:
    """HF's Marian and Pegasus exports hold one direction: their tokenizers cannot put our
    target-language tag (a SentencePiece control piece, never produced from text) on the
    source, and ``generate`` starts every output from one fixed decoder start token."""
    d = model_directions(ckpt)
    if d is not None:
        raise ValueError(f"{fmt} cannot represent a multilingual model ({', '.join(d.names())}): "
                         "its tokenizer cannot add the target-language tag; export it with "
                         "--to ctranslate2")
