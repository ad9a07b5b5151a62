"""Import Hugging Face MarianMT models (OPUS-MT's ``Helsinki-NLP/opus-mt-*``) as our
self-contained checkpoints: :func:`import_marian`.

* :mod:`seq2seq.hf_import.folder`: every file checked before anything is built.
* :mod:`seq2seq.hf_import.marian`: the config and the weights.
* :mod:`seq2seq.hf_import.vocab`: ``vocab.json`` + ``source.spm``/``target.spm`` as our
  SentencePiece tokenizers (ids = the model's ids).

The source is a local folder (the OPUS-MT layout: ``config.json``, ``model.safetensors``
or ``pytorch_model.bin``, ``source.spm``, ``target.spm``, ``vocab.json``) or a hub name,
downloaded with ``huggingface_hub`` (needs internet). The imported model is checked
against the HF one on a small batch before anything is written; the output is never one of
the folder's files, nor anything but a regular file (:func:`seq2seq.files.check_output`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import torch

from seq2seq.directions import DirectionError, check_language
from seq2seq.files import check_output
from seq2seq.hf_import.folder import NEEDED, OPTIONAL, WEIGHTS, MarianFolder, check_folder

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


def languages(folder: MarianFolder, name: str, src: str | None,
              tgt: str | None) -> tuple[str | None, str | None]:
    """The language pair: ``src``/``tgt`` (the command's options) where given, else
    ``tokenizer_config.json``'s, else those of an ``opus-mt-SRC-TGT`` name; each one that
    is given must be a language code (:func:`seq2seq.directions.check_language`)."""
    config = folder.tokenizer_config
    where = str(folder.path / "tokenizer_config.json")
    match = re.search(r"opus-mt-([a-z]{2,3})-([a-z]{2,3})$", name.rstrip("/"))
    guessed = match.groups() if match else (None, None)
    pair = []
    for given, field, option, guess in ((src, "source_lang", "--src-lang", guessed[0]),
                                        (tgt, "target_lang", "--tgt-lang", guessed[1])):
        try:
            if given is not None:
                pair.append(check_language(given, option))
            elif config.get(field):
                pair.append(check_language(config[field], f"{where}: {field}"))
            else:
                pair.append(guess)
        except DirectionError as e:
            raise ValueError(str(e) + ("" if given is not None else f"; give {option}")) from None
    return pair[0], pair[1]


def input_files(folder: Path) -> list[Path]:
    """The files of ``folder`` the import reads: what its output must never replace."""
    return [folder / name for name in (*NEEDED, *OPTIONAL, *WEIGHTS)]


def import_marian(source: str | os.PathLike, output: str | os.PathLike,
                  src_lang: str | None = None, tgt_lang: str | None = None,
                  overwrite: bool = False) -> dict[str, Any]:
    """Convert ``source`` (folder or hub name) into our checkpoint ``output`` (written
    atomically; an existing file needs ``overwrite``). Returns the checkpoint dict."""
    from seq2seq.checkpoint import PREFIX, check, load_checkpoint, metadata, seal
    from seq2seq.files import save_atomic
    from seq2seq.hf_import.folder import load_weights
    from seq2seq.hf_import.marian import (
        check_state,
        hf_config,
        marian_model,
        model_config,
        to_seq2seq,
    )
    from seq2seq.hf_import.vocab import marian_tokenizers

    if not Path(source).is_dir():  # a hub name: before the download, and again after it
        check_output(output, [], overwrite, "output")
    folder = resolve(source)
    check_output(output, input_files(folder), overwrite, "output")
    checked = check_folder(folder)
    src_lang, tgt_lang = languages(checked, str(source), src_lang, tgt_lang)
    where = str(folder / "config.json")
    config = hf_config(checked.config, where)
    arch = model_config(config, where)
    state = load_weights(checked.weights_path)
    check_state(config, state, str(checked.weights_path))
    specials = _specials(checked, arch, where)
    tokenizers = marian_tokenizers(folder, (arch.src_vocab_size, arch.tgt_vocab_size),
                                   specials, checked.separate_vocabs)
    marian = marian_model(config, state)  # only now is anything allocated
    model = to_seq2seq(marian)
    check_equal(marian, model)
    ckpt = seal({"seq2seq": metadata(arch, tokenizers, src_lang, tgt_lang),
                 "state_dict": {PREFIX + k: v for k, v in model.state_dict().items()}})
    check(ckpt, f"{folder}: the imported model")  # what every load checks, before writing
    save_atomic(ckpt, output)
    return load_checkpoint(output)


def _specials(folder: MarianFolder, arch, where: str) -> dict[str, int]:
    """The special ids (``config.json``'s, and ``vocab.json``'s unknown token): the unknown
    token and EOS each an id of their own (the decoder's start may be the pad)."""
    specials = {"unk": _unk_id(folder), "eos": arch.eos_id, "pad": arch.pad_id, "bos": arch.bos_id}
    fields = {"eos": "eos_token_id", "pad": "pad_token_id", "bos": "decoder_start_token_id"}
    for role, field in fields.items():
        if specials[role] == specials["unk"]:
            raise ValueError(f"{where}: {field}={specials[role]} is the id of vocab.json's "
                             "unknown token")
        if role != "eos" and specials[role] == specials["eos"]:
            raise ValueError(f"{where}: {field}={specials[role]} is also eos_token_id")
    return specials


def _unk_id(folder: MarianFolder) -> int:
    from seq2seq.hf_import.folder import read_json

    unk = folder.tokenizer_config.get("unk_token") or "<unk>"
    unk = unk.get("content", "<unk>") if isinstance(unk, dict) else unk
    vocab = read_json(folder.path / "vocab.json")
    if not isinstance(vocab.get(unk), int) or isinstance(vocab[unk], bool):
        raise ValueError(f"{folder.path / 'vocab.json'}: has no unknown token {unk!r}")
    return vocab[unk]


@torch.no_grad()
def check_equal(marian, model, atol: float = 1e-3) -> None:
    """Refuse an import whose logits differ from HF's on a small random batch. A large or
    deep model's float32 rounding alone can pass ``atol`` (summation order differs), so a
    float32 miss is judged again in float64, where the same maths agrees to ~1e-10."""
    arch = model.arch
    g = torch.Generator().manual_seed(0)
    src = torch.randint(0, arch.src_vocab_size, (2, 7), generator=g)
    src[src == arch.pad_id] = arch.eos_id
    src[1, 5:] = arch.pad_id
    tgt = torch.randint(0, arch.tgt_vocab_size, (2, 5), generator=g)
    tgt[:, 0] = arch.bos_id

    def difference() -> float:
        theirs = marian(input_ids=src, attention_mask=src.ne(arch.pad_id),
                        decoder_input_ids=tgt).logits
        return (theirs - model(src, tgt).to(theirs.dtype)).abs().max().item()

    diff = difference()
    if not diff <= atol:  # (NaN fails too)
        marian.double(), model.double()
        try:
            diff64 = difference()
        finally:
            marian.float(), model.float()
        if not diff64 <= 1e-6:
            raise RuntimeError(f"imported model differs from the Hugging Face one (max logit "
                               f"difference {diff:.3g}, {diff64:.3g} in float64); please "
                               f"report this model")
