"""Documents in, documents out: ``.txt``, ``.html``/``.htm``, ``.docx`` and ``.srt``
translated a sentence at a time with their structure kept (lines, markup, formatting
runs, subtitle timing). Used by ``seq2seq-translate --input FILE`` and the server's
``/translate_file``; every format makes one ``translate`` call for all its sentences."""

from __future__ import annotations

import os
from pathlib import Path

from seq2seq.documents.align import Aligned, SentenceTranslator, sentence_translator
from seq2seq.documents.formats import (
    DocumentError,
    decode_text,
    translate_docx,
    translate_srt,
    translate_txt,
)
from seq2seq.documents.html import translate_html
from seq2seq.documents.inline import Splitter, sentence_splitter

__all__ = ["Aligned", "DocumentError", "SUFFIXES", "SentenceTranslator", "output_path",
           "sentence_translator", "translate_document", "translate_html"]

SUFFIXES = (".txt", ".html", ".htm", ".docx", ".srt")
NEEDS = {".docx": ("docx", "python-docx"), ".srt": ("srt", "srt")}


def suffix(filename: str) -> str:
    return os.path.splitext(filename)[1].lower()


def _html(data: bytes, name: str, translate: SentenceTranslator, split: Splitter) -> bytes:
    return translate_html(decode_text(data, name), translate, split).encode()


FORMATS = {".txt": translate_txt, ".html": _html, ".htm": _html, ".docx": translate_docx,
           ".srt": translate_srt}


def check_format(filename: str) -> str:
    """The file's format by its extension; a one-line error for any other, or when the
    library that reads it is missing."""
    kind = suffix(filename)
    if kind not in FORMATS:
        raise DocumentError(f"{filename}: unsupported document type {kind or '(no extension)'!r}; "
                            f"documents are {', '.join(SUFFIXES)}")
    if kind in NEEDS:
        module, package = NEEDS[kind]
        try:
            __import__(module)
        except ImportError:
            raise DocumentError(f"{filename}: {kind} documents need {package}: "
                                "pip install 'seq2seq[documents]'") from None
    return kind


def translate_document(data: bytes, filename: str, translate: SentenceTranslator,
                       lang: str | None = None, split: Splitter | None = None) -> bytes:
    """``data``, a document named ``filename`` (its extension says its format), translated
    by ``translate``; sentences cut by ``split`` (default: the segmenter in ``lang``)."""
    kind = check_format(filename)
    return FORMATS[kind](data, os.path.basename(filename), translate,
                         split or sentence_splitter(lang))


def output_path(path: str | os.PathLike, target: str | None) -> Path:
    """Where ``seq2seq-translate --input name.docx`` writes: ``name.<target>.docx`` beside
    it (``name.translated.docx`` when the model does not say its target language)."""
    p = Path(path)
    return p.with_name(f"{p.stem}.{target or 'translated'}{p.suffix}")
