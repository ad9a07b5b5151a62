"""EPUB books (.epub, 2 and 3): every XHTML content document the package's manifest names
translated as HTML is (:mod:`seq2seq.documents.html`: inline elements follow their words,
``lang``/``xml:lang`` relabelled), and the book's title and its EPUB 2 table of contents
(``toc.ncx``) as plain texts; all of it in one ``translate`` call.

The package is checked as every zip of XML parts is (:mod:`seq2seq.documents.package`); a
``<!DOCTYPE>`` is allowed (XHTML 1.1 content has one), entities declared in it are not. The
XHTML stays well-formed: tags are kept byte for byte, text is escaped, and a named character
reference XML does not know (``&eacute;`` in a translation) is written as a number. The
``mimetype`` entry stays first and stored. With a target language, the OPF's
``dc:language`` and the labels in the source language say the target's.
"""

from __future__ import annotations

import html.entities
import posixpath
import re
from urllib.parse import unquote

from seq2seq.documents.align import SentenceTranslator
from seq2seq.documents.formats import decode_text
from seq2seq.documents.html import Page
from seq2seq.documents.inline import Splitter
from seq2seq.documents.package import (
    DocumentError,
    check_package,
    in_source,
    open_zip,
    read_part,
    rebuild,
    serialize,
)
from seq2seq.documents.slots import Texts, one_batch

OPF = "{http://www.idpf.org/2007/opf}"
NCX = "{http://www.daisy.org/z3986/2005/ncx/}"
DC = "{http://purl.org/dc/elements/1.1/}"
CONTAINER = "{urn:oasis:names:tc:opendocument:xmlns:container}"
XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"
WHAT, MIMETYPE = "an EPUB (.epub) book", "application/epub+zip"
XML_PARTS = (".xml", ".opf", ".ncx", ".xhtml", ".xht", ".html", ".htm")
_REFERENCE = re.compile(r"&([A-Za-z][A-Za-z0-9]*);")
_XML_NAMED = {"amp", "lt", "gt", "quot", "apos"}


def xml_references(text: str) -> str:
    """HTML's named character references as XML can read them: a number, or the text."""
    def one(m):
        if m.group(1) in _XML_NAMED:
            return m.group()
        code = html.entities.name2codepoint.get(m.group(1))
        return f"&#{code};" if code else f"&amp;{m.group(1)};"
    return _REFERENCE.sub(one, text)


def _package(data: bytes, name: str, trees: dict) -> tuple[str, list[str], str | None]:
    """The OPF's zip name, the XHTML documents its manifest names, its NCX if any."""
    with open_zip(data, name, ".epub") as z:
        found = read_part(z, "mimetype", name, ".epub").decode("ascii", "replace").strip()
    if found != MIMETYPE:
        raise DocumentError(f"{name}: not {WHAT} (its mimetype is {found[:80]!r})")
    container = trees.get("META-INF/container.xml")
    root = container.getroot().find(f"{CONTAINER}rootfiles/{CONTAINER}rootfile") \
        if container is not None else None
    opf = root.get("full-path") if root is not None else None
    if opf not in trees:
        raise DocumentError(f"{name}: not {WHAT} (no package document: META-INF/container.xml "
                            f"names {opf!r})")
    base, docs, ncx = posixpath.dirname(opf), [], None
    for item in trees[opf].getroot().iter(f"{OPF}item"):
        part = posixpath.normpath(posixpath.join(base, unquote(item.get("href", ""))))
        kind = item.get("media-type", "")
        if kind in ("application/xhtml+xml", "application/x-dtbncx+xml") and part not in trees:
            raise DocumentError(f"{name}: not {WHAT} (its manifest names {part}, "
                                "which it does not hold)")
        if kind == "application/xhtml+xml":
            docs.append(part)
        elif kind == "application/x-dtbncx+xml":
            ncx = part
    return opf, docs, ncx


def _titles(trees: dict, opf: str, ncx: str | None) -> list:
    titles = list(trees[opf].getroot().iter(f"{DC}title"))
    if ncx:
        titles += [t for t in trees[ncx].getroot().iter(f"{NCX}text")]
    return titles


def _relabel(trees: dict, parts: list[str], source_lang: str | None, target_lang: str) -> None:
    for el in trees[parts[0]].getroot().iter(f"{DC}language"):
        el.text = target_lang
    for part in parts:
        for el in trees[part].getroot().iter():
            if in_source(el.get(XML_LANG), source_lang):
                el.set(XML_LANG, target_lang)


def translate_epub(data: bytes, name: str, translate: SentenceTranslator, split: Splitter,
                   lang: str | None = None, target_lang: str | None = None) -> bytes:
    """The book translated, every content document and title in one ``translate`` call."""
    trees = check_package(data, name, WHAT, ".epub", XML_PARTS, doctype=True)
    opf, docs, ncx = _package(data, name, trees)
    with open_zip(data, name, ".epub") as z:
        pages = [Page(decode_text(read_part(z, d, name, ".epub"), f"{name}: {d}"), split, lang,
                      target_lang) for d in docs]
    titles = _titles(trees, opf, ncx)
    done = one_batch([*pages, Texts(titles, split)], translate)
    changed = {d: xml_references(text).encode() for d, text in zip(docs, done)}
    meta = [opf, *([ncx] if ncx else [])]
    if target_lang:
        _relabel(trees, meta, lang, target_lang)
    return rebuild(data, {**changed, **{p: serialize(trees[p]) for p in meta}})
