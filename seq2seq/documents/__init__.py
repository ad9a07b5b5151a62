"""Documents in, documents out: ``.txt``, ``.html``/``.htm``, ``.docx``, ``.srt``, ``.odt``,
``.odp``, ``.pptx`` and ``.epub`` translated a sentence at a time with their structure kept
(lines, markup, formatting runs, subtitle timing). Used by ``seq2seq-translate --input FILE`` and the server's
``/translate_file``; every format makes one ``translate`` call for all its sentences."""

from __future__ import annotations

import os
from pathlib import Path

from seq2seq.documents.align import Aligned, SentenceTranslator, sentence_translator
from seq2seq.documents.epub import translate_epub
from seq2seq.documents.formats import (
    DocumentError,
    OptionError,
    decode_text,
    encode_like,
    translate_srt,
    translate_txt,
)
from seq2seq.documents.html import translate_html
from seq2seq.documents.inline import Splitter, sentence_splitter
from seq2seq.documents.odf import translate_odp, translate_odt
from seq2seq.documents.slides import translate_pptx
from seq2seq.documents.word import translate_docx
from seq2seq.extras import install_hint

__all__ = ["Aligned", "DocumentError", "SUFFIXES", "SentenceTranslator", "output_path",
           "sentence_translator", "translate_document", "translate_html"]

SUFFIXES = (".txt", ".html", ".htm", ".docx", ".srt", ".odt", ".odp", ".pptx", ".epub")
NEEDS = {".docx": ("docx", "python-docx"), ".srt": ("srt", "srt"), ".odt": ("lxml", "lxml"),
         ".odp": ("lxml", "lxml"), ".pptx": ("lxml", "lxml"), ".epub": ("lxml", "lxml")}


def suffix(filename: str) -> str:
    return os.path.splitext(filename)[1].lower()


def _html(data: bytes, name: str, translate: SentenceTranslator, split: Splitter,
          lang: str | None = None, target_lang: str | None = None) -> bytes:
    return encode_like(data, translate_html(decode_text(data, name), translate, split, lang, target_lang))


FORMATS = {".txt": translate_txt, ".html": _html, ".htm": _html, ".docx": translate_docx,
           ".srt": translate_srt, ".odt": translate_odt, ".odp": translate_odp,
           ".pptx": translate_pptx, ".epub": translate_epub}
LABELLED = {".html", ".htm", ".odt", ".odp", ".pptx", ".epub"}  # relabel the source's labels


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
                                f"{install_hint('documents')}") from None
    return kind


def translate_document(data: bytes, filename: str, translate: SentenceTranslator,
                       lang: str | None = None, split: Splitter | None = None,
                       target_lang: str | None = None) -> bytes:
    """``data``, a document named ``filename`` (its extension says its format), translated
    by ``translate`` from ``lang``; sentences cut by ``split`` (default: the segmenter in
    ``lang``). With ``target_lang``, what says the document's language says it (HTML's
    ``lang`` attributes in ``lang``, or in any language if None; a document's metadata);
    plain text and subtitles say none."""
    kind = check_format(filename)
    args = (data, os.path.basename(filename), translate, split or sentence_splitter(lang))
    if kind in LABELLED:
        return FORMATS[kind](*args, lang, target_lang)
    return FORMATS[kind](*args, target_lang) if kind == ".docx" else FORMATS[kind](*args)


def output_path(path: str | os.PathLike, target: str | None) -> Path:
    """Where ``seq2seq-translate --input name.docx`` writes: ``name.<target>.docx`` beside
    it (``name.translated.docx`` when the model does not say its target language)."""
    p = Path(path)
    return p.with_name(f"{p.stem}.{target or 'translated'}{p.suffix}")


DOCUMENT_ONLY = SUFFIXES[1:]  # .txt stays line by line on stdout


def is_document(path: str | None, output: str | None) -> bool:
    """``--input FILE`` is translated as a document (written to a file): every format but
    text always, ``.txt`` when ``--output`` is given."""
    return bool(path) and (suffix(path) in DOCUMENT_ONLY or (output is not None and suffix(path) == ".txt"))


def plan_output(path: str, output: str | None, target: str | None, force: bool) -> Path:
    """The file to write: ``--output`` or ``name.<target>.ext`` beside the input; an existing
    file only with ``force``, never the input itself; a one-line error otherwise."""
    from seq2seq.files import kind_of

    if (kind := kind_of(path)) == "missing":
        raise OptionError("{input} not found: {path}", path=path)
    if kind is not None:
        raise OptionError("{input} {path}: is {kind}, not a regular file", path=path, kind=kind)
    check_format(path)
    out = Path(output) if output else output_path(path, target)
    if output and suffix(output) != suffix(path):
        raise OptionError("{output} {path}: must have the input's extension {ext}",
                          path=output, ext=suffix(path))
    what = kind_of(out)
    if what not in ("missing", None):
        raise OptionError("{output} {path}: is {what}; give a file name", path=out, what=what)
    if what is None and os.path.samefile(out, path):
        raise OptionError("{output} {path}: is the input; choose another name", path=out)
    if what is None and not force:
        raise OptionError("{output} {path}: exists; add {force} to replace it", path=out)
    return out


def translate_file(path: str, out: Path, translate: SentenceTranslator, lang: str | None,
                   target_lang: str | None = None) -> None:
    """The document at ``path`` translated from ``lang`` into ``out`` (written whole, then
    renamed: an interrupted run leaves no half file), labelled ``target_lang``."""
    from seq2seq.files import write_atomic

    data = Path(path).read_bytes()
    done = translate_document(data, path, translate, lang, target_lang=target_lang)
    write_atomic(out, lambda f: f.write(done))
