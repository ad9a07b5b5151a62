"""Export to Argos Translate (``to_argos``): a ``.argosmodel`` package that argostranslate,
and LibreTranslate through it, install and run offline.

The package is a zip of one folder, named after the file (:func:`package_folder`), holding

* ``model/``: our CTranslate2 export (:func:`seq2seq.export.ctranslate2.to_ctranslate2`;
  its config appends the source EOS, so Argos' ``sp.encode`` pieces go in as they are);
* ``sentencepiece.model``: Argos tokenizes both sides with this one model, so only a
  checkpoint whose source and target tokenizers are the same (joint) model is packaged;
* ``spacy/``: a blank spaCy pipeline of the source language (``spacy.blank(lang)``, no
  download). With ``ARGOS_CHUNK_TYPE=SPACY`` argostranslate loads it and adds spaCy's
  rule-based ``sentencizer``; its default splitter, MiniSBD, downloads a model at the first
  translation instead (the package holds no ``minisbd/`` or ``stanza/`` folder, which it
  would prefer);
* ``metadata.json``: the language pair (``from_code``, ``to_code`` and their names),
  ``package_version``, ``argos_version``, ``type: "translate"`` (what
  ``argostranslate.package.Package`` reads); ``README.md``: where the model came from.

The search Argos runs is not ours: :func:`argos_translate_kwargs` gives the
``translate_batch`` arguments argostranslate 1.11 passes (beam 4, length penalty 0.2, no
per-sentence length limit, unknowns replaced). With ``ARGOS_BEAM_SIZE=1`` it is greedy and
gives ``seq2seq-translate --no-repeat-ngram-size 0``'s output wherever ours stays under
its length limits and emits no ``<unk>``.

The package is written to a temporary file beside the output and renamed over it; an
existing output is replaced only with ``overwrite`` and only when it is an Argos package
(a zip with a ``metadata.json`` in its folder), never the input checkpoint or a
non-regular file (a FIFO is refused without being opened).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from seq2seq.directions import LANGUAGE_NAMES
from seq2seq.export.common import load, model_directions, source_path, tokenizer_states
from seq2seq.files import kind_of, write_atomic

ARGOS_VERSION = "1.11"  # the argostranslate release these packages are tested with
PACKAGE_VERSION = "1.0"
ARGOS_BEAM_SIZE = 4  # argostranslate's default ARGOS_BEAM_SIZE
ARGOS_BATCH_SIZE = 32  # ... and ARGOS_BATCH_SIZE (tokens per CTranslate2 batch)
_CODE = re.compile(r"^[a-z]{2,3}([-_][A-Za-z0-9]{2,4})?$")  # ISO 639, optional region


def argos_translate_kwargs(num_hypotheses: int = 1, beam_size: int = ARGOS_BEAM_SIZE,
                           batch_size: int = ARGOS_BATCH_SIZE) -> dict[str, Any]:
    """The ``translate_batch`` keyword arguments argostranslate 1.11 passes for a text's
    sentences (``apply_packaged_translation``): ``beam_size``, ``batch_size`` are its
    ``ARGOS_BEAM_SIZE`` and ``ARGOS_BATCH_SIZE`` settings. The rest are CTranslate2's
    defaults: at most 256 output tokens, at least 1, no n-gram rule."""
    return dict(replace_unknowns=True, max_batch_size=batch_size, batch_type="tokens",
                beam_size=max(num_hypotheses, beam_size), num_hypotheses=num_hypotheses,
                length_penalty=0.2, return_scores=True)


# ---------------------------------------------------------------- the output file
def is_argos_package(path: str | os.PathLike) -> bool:
    """Whether the regular file ``path`` is an Argos package: a zip holding
    ``FOLDER/metadata.json``. (Call only on a regular file: reading a FIFO blocks.)"""
    try:
        if not zipfile.is_zipfile(path):
            return False
        with zipfile.ZipFile(path) as z:
            return any(re.fullmatch(r"[^/]+/metadata\.json", n) for n in z.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def package_folder(out: Path) -> str:
    """The package's one folder: ``out``'s name without ``.argosmodel``. Argos unpacks it
    under its packages folder as it is, so only a plain folder name: no ``.``, ``..``,
    separator or unprintable character (``...argosmodel`` would give ``../metadata.json``)."""
    top = out.stem or "package"
    if top in (".", "..") or "\\" in top or not top.isprintable():
        raise ValueError(f"--output {str(out)!r}: the package's folder is named after the file "
                         f"(its name without .argosmodel), and {top!r} is not a plain folder "
                         "name; give a name such as de_en.argosmodel")
    return top


def check_output(out: Path, source: Path | None, overwrite: bool) -> None:
    """Refuse, before anything is read or written, an output that is the input checkpoint,
    not a regular file, in a missing folder, or an existing file ``overwrite`` may not
    replace (anything but an Argos package)."""
    if source is not None and kind_of(out) is None and os.path.samefile(out, source):
        raise ValueError(f"output {out} is the input checkpoint; choose another file name")
    kind = kind_of(out)  # stat only: a FIFO is never opened
    if kind not in (None, "missing"):
        raise ValueError(f"output {out} is {kind}, not a file; give the .argosmodel file to "
                         "write (e.g. -o de_en.argosmodel)")
    if not out.parent.is_dir():
        raise ValueError(f"output {out}: folder {out.parent} does not exist")
    if kind is None:
        if not is_argos_package(out):
            raise ValueError(f"output {out} exists and is not an Argos package; --force only "
                             "replaces an earlier .argosmodel: choose another file name")
        if not overwrite:
            raise ValueError(f"output {out} holds an earlier Argos package; "
                             "overwrite/--force replaces it")


# ---------------------------------------------------------------- what can be packaged
def pair_of(ckpt: dict[str, Any]) -> tuple[str, str]:
    """The checkpoint's language pair, or a ValueError naming why Argos cannot hold it:
    a multilingual model, missing language codes, separate tokenizers."""
    directions = model_directions(ckpt)
    if directions is not None:
        raise ValueError(f"argos cannot package a multilingual model ({', '.join(directions.names())}): "
                         "an Argos package translates one language pair; export it with "
                         "--to ctranslate2")
    info = ckpt["seq2seq"]
    src, tgt = info.get("src_lang"), info.get("tgt_lang")
    for side, code in (("src_lang", src), ("tgt_lang", tgt)):
        if not isinstance(code, str) or not _CODE.match(code):
            raise ValueError(f"argos cannot package a checkpoint without language codes "
                             f"({side}={code!r}): Argos finds a package by its pair, e.g. de, en")
    toks = tokenizer_states(ckpt)
    if not toks or bytes(toks["src"]["model"]) != bytes(toks["tgt"]["model"]):
        raise ValueError("argos cannot package a model whose source and target tokenizers are "
                         "different SentencePiece models: an Argos package holds one "
                         "sentencepiece.model for both sides (train with a joint tokenizer)")
    return src, tgt


def metadata(src: str, tgt: str) -> dict[str, Any]:
    """``metadata.json``: what ``argostranslate.package.Package`` reads."""
    return {"package_version": PACKAGE_VERSION, "argos_version": ARGOS_VERSION,
            "type": "translate", "from_code": src, "to_code": tgt,
            "from_name": LANGUAGE_NAMES.get(src, src), "to_name": LANGUAGE_NAMES.get(tgt, tgt),
            "links": []}


def write_spacy(folder: Path, lang: str) -> str:
    """A blank spaCy pipeline of ``lang`` saved in ``folder`` (argostranslate adds the
    rule-based sentencizer when it loads it); spaCy's multi-language ``xx`` where spaCy
    has no ``lang`` or needs extra packages for it (Japanese: sudachipy). Returns the
    language saved."""
    import spacy

    try:
        nlp = spacy.blank(lang)
    except (ImportError, ValueError, KeyError):  # spaCy's E048 / a tokenizer's missing package
        lang, nlp = "xx", spacy.blank("xx")
    nlp.to_disk(folder)
    return lang


def _readme(ckpt_name: str, src: str, tgt: str, spacy_lang: str, quantization: str | None) -> str:
    return (f"# {LANGUAGE_NAMES.get(src, src)} -> {LANGUAGE_NAMES.get(tgt, tgt)}\n\n"
            f"Exported by seq2seq-export from {ckpt_name} ({quantization or 'float32'} weights).\n"
            f"Sentences are split by spaCy ({spacy_lang}, blank pipeline): run with "
            "ARGOS_CHUNK_TYPE=SPACY offline.\n")


# ---------------------------------------------------------------- the package
def _build(folder: Path, ckpt: dict[str, Any], src: str, tgt: str, name: str,
           quantization: str | None) -> None:
    from seq2seq.export.ctranslate2 import to_ctranslate2

    to_ctranslate2(ckpt, folder / "model", quantization)
    (folder / "sentencepiece.model").write_bytes(bytes(tokenizer_states(ckpt)["src"]["model"]))
    spacy_lang = write_spacy(folder / "spacy", src)
    (folder / "metadata.json").write_text(json.dumps(metadata(src, tgt), indent=1) + "\n",
                                          encoding="utf-8")
    (folder / "README.md").write_text(_readme(name, src, tgt, spacy_lang, quantization),
                                      encoding="utf-8")


def _zip_atomically(folder: Path, top: str, out: Path) -> None:
    """``folder`` zipped as ``top/...`` into a temporary file beside ``out``, renamed over it."""
    def write(f) -> None:
        with zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as z:
            for path in sorted(folder.rglob("*")):
                if path.is_file():
                    z.write(path, f"{top}/{path.relative_to(folder).as_posix()}")

    write_atomic(out, write)


def to_argos(ckpt_or_path: Any, out_file: str | os.PathLike, quantization: str | None = None,
             overwrite: bool = False) -> Path:
    """Write the Argos package ``out_file`` (e.g. ``de_en.argosmodel``; its stem names the
    folder inside) for a checkpoint (path or dict). ``quantization``: the CTranslate2
    weights (None: float32). ValueError, before anything is written, for an output that
    may not be written (:func:`package_folder`, :func:`check_output`) or a model Argos cannot hold (:func:`pair_of`,
    and what CTranslate2 cannot represent)."""
    import ctranslate2  # noqa: F401  (missing packages: fail before reading anything)
    import spacy  # noqa: F401

    out = Path(out_file)
    top = package_folder(out)
    source = source_path(ckpt_or_path)
    check_output(out, source, overwrite)
    _, ckpt = load(ckpt_or_path)
    if ckpt is None:
        raise ValueError("argos needs a checkpoint (its tokenizer and language pair), "
                         "not a bare model")
    src, tgt = pair_of(ckpt)
    name = source.name if source is not None else "a checkpoint"
    with tempfile.TemporaryDirectory(prefix="seq2seq-argos-") as tmp:
        folder = Path(tmp) / "package"
        _build(folder, ckpt, src, tgt, name, quantization)
        _zip_atomically(folder, top, out)
    return out
