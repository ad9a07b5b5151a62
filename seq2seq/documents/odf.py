"""OpenDocument text (.odt) and presentations (.odp), read with lxml from the package's
``content.xml`` (and ``styles.xml``'s page headers and footers).

Every ``text:p`` and ``text:h`` is a paragraph: in text frames, tables, lists, notes,
slides and speaker notes alike, read as inline markup by the rule Word's paragraphs follow
(:mod:`seq2seq.documents.runs`): ``text:span`` and ``text:a`` are elements around their
words, carried by the alignment (a link keeps its words, a bold word's translation is
bold), and the text outside them is written where it falls. ``text:s`` (spaces),
``text:tab`` and ``text:line-break`` are text, written back as the paragraph spelled them
(:class:`_Spelling`); anything else (fields, bookmarks, frames, notes) is a point, kept
untranslated, and the paragraphs inside it are translated on their own. Comments (``office:annotation``) and
tracked deletions are never translated. With a target language, the document's
``dc:language`` says it, and styles in the source language (``fo:language``) are set to it.
"""

from __future__ import annotations

import re

from seq2seq.documents.align import SentenceTranslator
from seq2seq.documents.inline import Splitter
from seq2seq.documents.package import (
    DocumentError,
    check_package,
    in_source,
    open_zip,
    rebuild,
    serialize,
)
from seq2seq.documents.runs import Entry, Format, Loose, Paragraph
from seq2seq.documents.slots import one_batch

NS = {"text": "urn:oasis:names:tc:opendocument:xmlns:text:1.0",
      "office": "urn:oasis:names:tc:opendocument:xmlns:office:1.0",
      "style": "urn:oasis:names:tc:opendocument:xmlns:style:1.0",
      "fo": "urn:oasis:names:tc:opendocument:xmlns:xsl-fo-compatible:1.0",
      "dc": "http://purl.org/dc/elements/1.1/"}
T, OF, ST, FO = (f"{{{NS[k]}}}" for k in ("text", "office", "style", "fo"))
PARAGRAPHS = {T + "p", T + "h"}
CONTAINERS = {T + "span", T + "a"}
SPACE, TAB, BREAK = T + "s", T + "tab", T + "line-break"
NEVER = {OF + "annotation", T + "tracked-changes"}
MAX_SPACES = 1000  # what one text:s may stand for (text:c="1000000000" is not a gigabyte)
KINDS = {".odt": ("application/vnd.oasis.opendocument.text", "an OpenDocument text (.odt) document"),
         ".odp": ("application/vnd.oasis.opendocument.presentation",
                  "an OpenDocument presentation (.odp) document")}
_SEPARATORS = re.compile(r"( +|\t|\n)")  # what the writer spells as elements (or may)
_CHARACTER_DATA = re.compile(r"[\t\n\r]")  # white space in ODF's text, not its tabs or breaks


def paragraphs(roots) -> list:
    """Every paragraph under ``roots``, in document order, comments left out; a loop with
    its own stack (nesting as deep as a document has)."""
    out, todo = [], list(reversed(roots))
    while todo:
        el = todo.pop()
        if el.tag in NEVER or not isinstance(el.tag, str):
            continue
        if el.tag in PARAGRAPHS:
            out.append(el)
        todo.extend(reversed(el))
    return out


def _spaces(el) -> int:
    count = el.get(T + "c", "1")
    return min(int(count), MAX_SPACES) if count.isdigit() else 1


class _Spelling:
    """Spaces as OpenDocument spells them: character data collapses a run of spaces to one
    (and one at the start of a paragraph to none), so every space after a space is a
    ``text:s``. A paragraph writes a run of spaces after a word as LibreOffice does (a space,
    then ``text:s`` for the rest) unless its source spelled one whole (``text:s`` right
    after a word); a tab and a line break are their elements. ``space``: whether the last
    character was a space (at a paragraph's start it counts as one)."""

    def __init__(self):
        self.space, self.whole = True, False

    def read(self, kind: str, text: str = "") -> None:
        """What came next: "text", a ``text:s``, a tab or a line break, an element with
        "content" (a field, a frame) or an "empty" one (a bookmark: no character)."""
        if kind == "text" and text:
            self.space = text.endswith(" ")
        elif kind == SPACE:
            self.whole |= not self.space
            self.space = True
        elif kind in (TAB, BREAK, "content"):
            self.space = False


class _Writer(Loose):
    """Writes a paragraph's text outside runs in its :class:`_Spelling`."""

    def __init__(self, whole: bool):
        super().__init__()
        self.spelling = _Spelling()
        self.spelling.whole = whole

    def text(self, parent, text: str) -> None:
        for piece in _SEPARATORS.split(text):
            if piece in ("\t", "\n"):
                self.element(parent, parent.makeelement(TAB if piece == "\t" else BREAK))
            elif piece.startswith(" "):
                literal = not self.spelling.space and (len(piece) == 1 or not self.spelling.whole)
                super().text(parent, " " * literal)
                if len(piece) > literal:
                    point = parent.makeelement(SPACE)
                    if len(piece) - literal > 1:
                        point.set(T + "c", str(len(piece) - literal))
                    self.element(parent, point)
                self.spelling.space = True
            elif piece:
                super().text(parent, piece)
                self.spelling.read("text", piece)

    def element(self, parent, el) -> None:
        super().element(parent, el)
        self.spelling.read(el.tag if el.tag in (TAB, BREAK) else
                           "content" if len(el) or el.text else "empty")


def _entries(paragraph) -> tuple[list[Entry], bool]:
    """A paragraph's content as entries (spans and links around their text, anything else a
    point; spaces, tabs and line breaks are text) and whether it spells a run of spaces
    whole. A loop with its own stack: spans nest as deep as a document has."""
    out: list[Entry] = []
    spelling = _Spelling()

    def text(t: str | None) -> None:
        if t:
            t = _CHARACTER_DATA.sub(" ", t)
            out.append(Entry("text", [], text=t))
            spelling.read("text", t)

    text(paragraph.text)
    todo = [(paragraph, iter(paragraph))]
    while todo:
        parent, children = todo[-1]
        child = next(children, None)
        if child is None:
            todo.pop()
            if todo:
                out.append(Entry("close", [], f"c{id(parent)}"))
                text(parent.tail)
            continue
        if child.tag in CONTAINERS:
            out.append(Entry("open", [child], f"c{id(child)}", box=True))
            text(child.text)
            todo.append((child, iter(child)))
            continue
        if child.tag in (SPACE, TAB, BREAK):
            t = " " * _spaces(child) if child.tag == SPACE else "\t" if child.tag == TAB else "\n"
            out.append(Entry("text", [child], text=t))
            spelling.read(child.tag)
        else:  # kept as it is
            out.append(Entry("point", [child]))
            spelling.read("content" if len(child) or child.text else "empty")
        text(child.tail)
    return out, spelling.whole


def paragraph(p, split: Splitter) -> Paragraph:
    entries, whole = _entries(p)
    return Paragraph(p, entries, split, Format(loose=lambda: _Writer(whole)))


def _headers_and_footers(styles) -> list:
    return [el for el in styles.iter(f"{ST}header", f"{ST}footer", f"{ST}header-left",
                                     f"{ST}footer-left", f"{ST}header-first", f"{ST}footer-first")]


def _relabel(trees: dict, source_lang: str | None, target_lang: str) -> None:
    """``dc:language`` says ``target_lang``; ``fo:language`` in the source language too
    (``fo:country`` the target's region, or none)."""
    region = target_lang.replace("_", "-").split("-")[1:2]
    for part in ("content.xml", "styles.xml"):
        for props in trees[part].iter(f"{ST}text-properties") if part in trees else ():
            if in_source(props.get(FO + "language"), source_lang):
                props.set(FO + "language", target_lang.replace("_", "-").split("-")[0])
                if region:
                    props.set(FO + "country", region[0].upper())
                elif FO + "country" in props.attrib:
                    del props.attrib[FO + "country"]
    meta = trees.get("meta.xml")
    info = meta.find(f"{OF}meta") if meta is not None else None
    if info is not None:
        language = info.find(f"{{{NS['dc']}}}language")
        if language is None:
            language = info.makeelement(f"{{{NS['dc']}}}language")
            info.append(language)
        language.text = target_lang


def translate_odf(data: bytes, name: str, translate: SentenceTranslator, split: Splitter,
                  lang: str | None = None, target_lang: str | None = None, kind: str = ".odt") -> bytes:
    """The OpenDocument file translated run by run, in one ``translate`` call."""
    mimetype, what = KINDS[kind]
    trees = check_package(data, name, what, kind, (".xml",))
    with open_zip(data, name, kind) as z:
        found = z.read("mimetype").decode("ascii", "replace").strip() \
            if "mimetype" in z.namelist() else mimetype
    if found != mimetype:
        raise DocumentError(f"{name}: not {what} (it is {found[:80]!r})")
    if "content.xml" not in trees:
        raise DocumentError(f"{name}: not {what} (no content.xml in it)")
    body = trees["content.xml"].getroot().find(f"{OF}body")
    roots = [body] if body is not None else []
    if "styles.xml" in trees:
        roots += _headers_and_footers(trees["styles.xml"].getroot())
    one_batch([paragraph(p, split) for p in paragraphs(roots)], translate)
    if target_lang:
        _relabel(trees, lang, target_lang)
    parts = ("content.xml", "styles.xml", "meta.xml")
    return rebuild(data, {p: serialize(trees[p]) for p in parts if p in trees})


def translate_odt(*args) -> bytes:
    return translate_odf(*args, kind=".odt")


def translate_odp(*args) -> bytes:
    return translate_odf(*args, kind=".odp")
