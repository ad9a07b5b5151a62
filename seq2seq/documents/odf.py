"""OpenDocument text (.odt) and presentations (.odp), read with lxml from the package's
``content.xml`` (and ``styles.xml``'s page headers and footers).

Every ``text:p`` and ``text:h`` is a paragraph: in text frames, tables, lists, notes,
slides and speaker notes alike. Inside one, ``text:span`` and ``text:a`` hold runs (their
formatting and links follow their words through the alignment); ``text:s`` (spaces),
``text:tab`` and ``text:line-break`` are part of a run's text and written back as such;
anything else (fields, bookmarks, frames, notes) stays where it is, untranslated, and the
paragraphs inside it are translated on their own. Comments (``office:annotation``) and
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
from seq2seq.documents.slots import Paragraphs, Slot, one_batch

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
_SEPARATORS = re.compile(r"( {2,}|\t|\n)")
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


def _point_text(el) -> str:
    if el.tag == SPACE:
        count = el.get(T + "c", "1")
        return " " * (min(int(count), MAX_SPACES) if count.isdigit() else 1)
    return "\t" if el.tag == TAB else "\n"


class _Run:
    """Text in one element after ``anchor`` (its ``.text``, or a child's ``.tail``), with the
    spaces, tabs and line breaks that follow it there."""

    def __init__(self, parent, anchor):
        self.parent, self.anchor, self.points = parent, anchor, []

    def text(self) -> str:
        first = (self.anchor.tail if self.anchor is not None else self.parent.text) or ""
        return _CHARACTER_DATA.sub(" ", first) + "".join(
            _point_text(p) + _CHARACTER_DATA.sub(" ", p.tail or "") for p in self.points)

    def write(self, new: str) -> None:
        for p in self.points:
            self.parent.remove(p)  # its tail goes with it
        pieces = _SEPARATORS.split(new)
        if self.anchor is None:
            self.parent.text = pieces[0]
        else:
            self.anchor.tail = pieces[0]
        last = self.anchor
        for sep, after in zip(pieces[1::2], pieces[2::2]):
            point = self.parent.makeelement(TAB if sep == "\t" else BREAK if sep == "\n" else SPACE)
            if sep.startswith(" "):
                point.set(T + "c", str(len(sep)))
            point.tail = after
            if last is None:
                self.parent.insert(0, point)
            else:
                last.addnext(point)
            last = point


def runs(paragraph) -> list[Slot]:
    """A paragraph's runs in order: descends into spans and links, not into anything else."""
    found = [_Run(paragraph, None)]
    todo = [(paragraph, iter(paragraph))]
    while todo:
        parent, children = todo[-1]
        child = next(children, None)
        if child is None:
            todo.pop()
            if todo:
                found.append(_Run(todo[-1][0], parent))  # the text after a span
            continue
        if child.tag in (SPACE, TAB, BREAK) and found[-1].parent is parent:
            found[-1].points.append(child)
        elif child.tag in CONTAINERS:
            found.append(_Run(child, None))
            todo.append((child, iter(child)))
        else:  # kept as it is; the text after it is a run of its own
            found.append(_Run(parent, child))
    return [Slot(r.text(), r.write) for r in found]


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
    one_batch([Paragraphs([runs(p) for p in paragraphs(roots)], split)], translate)
    if target_lang:
        _relabel(trees, lang, target_lang)
    parts = ("content.xml", "styles.xml", "meta.xml")
    return rebuild(data, {p: serialize(trees[p]) for p in parts if p in trees})


def translate_odt(*args) -> bytes:
    return translate_odf(*args, kind=".odt")


def translate_odp(*args) -> bytes:
    return translate_odf(*args, kind=".odp")
