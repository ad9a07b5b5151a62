"""Import Hugging Face MarianMT models (OPUS-MT's ``Helsinki-NLP/opus-mt-*``) as our
self-contained checkpoints: :func:`import_marian`.

* :mod:`seq2seq.hf_import.marian`: the config and the weights.
* :mod:`seq2seq.hf_import.vocab`: ``vocab.json`` + ``source.spm``/``target.spm`` as our
  SentencePiece tokenizers (ids = the model's ids).

The source is a local folder (the OPUS-MT layout: ``config.json``, ``model.safetensors``
or ``pytorch_model.bin``, ``source.spm``, ``target.spm``, ``vocab.json``) or a hub name,
downloaded with ``huggingface_hub`` (needs internet). The imported model is checked
against the HF one on a small batch before anything is written.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import torch

# What an OPUS-MT repository holds that the import reads (weights: one of the two).
NEEDED = ("config.json", "source.spm", "target.spm", "vocab.json")
OPTIONAL = ("target_vocab.json", "tokenizer_config.json", "generation_config.json")
WEIGHTS = ("model.safetensors", "pytorch_model.bin")
_HUB_NAME = re.compile(r"[\w.-]+/[\w.-]+")


def resolve(source: str | os.PathLike) -> Path:
    """A local MarianMT folder for ``source`` (a folder, or a hub name to download)."""
    path = Path(source)
    if path.is_dir():
        return path
    if path.exists():
        raise ValueError(f"{path} is a file; give a MarianMT folder or a hub name")
    if not _HUB_NAME.fullmatch(str(source)):
        raise ValueError(f"{source}: no such folder (and not a hub name like "
                         "Helsinki-NLP/opus-mt-de-en)")
    return _download(str(source))


def _download(name: str) -> Path:
    try:
        from huggingface_hub import HfApi, snapshot_download

        files = set(HfApi().list_repo_files(name))
        weights = next((w for w in WEIGHTS if w in files), None)
        if weights is None:
            raise ValueError(f"hub model {name} has none of {list(WEIGHTS)}")
        wanted = [f for f in (*NEEDED, *OPTIONAL, weights) if f in files]
        return Path(snapshot_download(name, allow_patterns=wanted))
    except ValueError:
        raise
    except Exception as e:  # offline, unknown repository, gated, ...
        reason = " ".join(str(e).split())[:200]
        raise ValueError(f"cannot download {name} from the Hugging Face Hub ({type(e).__name__}: "
                         f"{reason}); download the folder elsewhere and give its path") from None


def languages(folder: Path, name: str) -> tuple[str | None, str | None]:
    """``tokenizer_config.json``'s source/target languages, else those of an
    ``opus-mt-SRC-TGT`` name."""
    try:
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = {}
    src, tgt = config.get("source_lang"), config.get("target_lang")
    match = re.search(r"opus-mt-([A-Za-z]+)-([A-Za-z]+)$", name.rstrip("/"))
    if match and not (src and tgt):
        src, tgt = match.groups()
    return src or None, tgt or None


def load_marian(folder: Path):
    """``MarianMTModel.from_pretrained(folder)`` in fp32, eval mode; one-line errors."""
    missing = [f for f in NEEDED if not (folder / f).is_file()]
    if missing:
        raise ValueError(f"{folder} is not a MarianMT folder: {missing[0]} is missing")
    if not any((folder / w).is_file() for w in WEIGHTS):
        raise ValueError(f"{folder}: no weights ({' or '.join(WEIGHTS)})")
    from transformers import AutoConfig, MarianMTModel

    from seq2seq.hf_import.marian import model_config

    config = AutoConfig.from_pretrained(folder)
    model_config(config, str(folder / "config.json"))  # refuse before loading weights
    return MarianMTModel.from_pretrained(folder, dtype=torch.float32).eval()


def import_marian(source: str | os.PathLike, output: str | os.PathLike,
                  src_lang: str | None = None, tgt_lang: str | None = None,
                  overwrite: bool = False) -> dict[str, Any]:
    """Convert ``source`` (folder or hub name) into our checkpoint ``output`` (written
    atomically; an existing file needs ``overwrite``). Returns the checkpoint dict."""
    from seq2seq.checkpoint import load_checkpoint, save_model
    from seq2seq.hf_import.marian import to_seq2seq
    from seq2seq.hf_import.vocab import marian_tokenizers

    output = Path(output)
    if output.is_dir() or (output.exists() and not overwrite):
        raise ValueError(f"output {output} exists; choose another file"
                         + ("" if output.is_dir() else " or replace it with --force"))
    folder = resolve(source)
    guessed = languages(folder, str(source))
    src_lang, tgt_lang = src_lang or guessed[0], tgt_lang or guessed[1]
    marian = load_marian(folder)
    model = to_seq2seq(marian)
    arch = model.arch
    specials = {"unk": _unk_id(folder), "eos": arch.eos_id, "pad": arch.pad_id, "bos": arch.bos_id}
    separate = _separate_vocabs(folder)
    tokenizers = marian_tokenizers(folder, (arch.src_vocab_size, arch.tgt_vocab_size),
                                   specials, separate)
    check_equal(marian, model)
    save_model(output, model, tokenizers, src_lang, tgt_lang)
    return load_checkpoint(output)


def _tokenizer_config(folder: Path) -> dict[str, Any]:
    try:
        return json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _separate_vocabs(folder: Path) -> bool:
    return bool(_tokenizer_config(folder).get("separate_vocabs", False))


def _unk_id(folder: Path) -> int:
    unk = _tokenizer_config(folder).get("unk_token", "<unk>")
    unk = unk.get("content", "<unk>") if isinstance(unk, dict) else unk
    vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    if unk not in vocab:
        raise ValueError(f"{folder / 'vocab.json'}: has no unknown token {unk!r}")
    return vocab[unk]


@torch.no_grad()
def check_equal(marian, model, atol: float = 1e-3) -> None:
    """Refuse an import whose logits differ from HF's on a small random batch."""
    arch = model.arch
    g = torch.Generator().manual_seed(0)
    src = torch.randint(0, arch.src_vocab_size, (2, 7), generator=g)
    src[src == arch.pad_id] = arch.eos_id
    src[1, 5:] = arch.pad_id
    tgt = torch.randint(0, arch.tgt_vocab_size, (2, 5), generator=g)
    tgt[:, 0] = arch.bos_id
    theirs = marian(input_ids=src, attention_mask=src.ne(arch.pad_id), decoder_input_ids=tgt).logits
    diff = (theirs - model(src, tgt)).abs().max().item()
    if not diff <= atol:
        raise RuntimeError(f"imported model differs from the Hugging Face one (max logit "
                           f"difference {diff:.3g}); please report this model")
