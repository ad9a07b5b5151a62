"""Word documents (``python-docx``, ``lxml``), translated with their formatting on the words.

Every paragraph of the body, of tables (nested too), headers and footers is read as one run
of inline markup, as an HTML paragraph is (:mod:`seq2seq.documents.inline`): each text run
(``w:r``: its bold, italic, underline, font, ...) is an element around its words, and so are
a hyperlink (``w:hyperlink``), a simple field (``w:fldSimple``), a smart tag, a tracked
insertion and a complex field (``w:fldChar`` begin to end). The translation's alignment
then carries each of them to the target words their source words went to, by the same rule
as HTML tags: a hyperlink keeps its words inside it, a bold word's translation is bold.

- A text run may be cut where sentences are (Word splits runs freely), so a run never joins
  two sentences into one unit; a hyperlink or field across a sentence boundary does, as an
  HTML element does. The pieces of one run that stay together come back as one run.
- Text the alignment gives to no run (spaces between runs, a word aligned nowhere) goes to
  a neighbour: the run before takes as many spaces as its source text ended with, the
  next run the rest. A run whose words all went into other runs is dropped, not left empty.
- Never translated or changed: a complex field's instruction (``w:instrText``, from its
  begin to its separate mark), runs holding anything but text (pictures, field marks, page
  breaks, footnote references), bookmarks, deleted text and every other element; they
  stay, as points do in HTML, before the target word aligned after them.
- Styles, paragraph properties and everything outside paragraphs are kept; the language
  metadata says the target language when that is known.
"""

from __future__ import annotations

import copy
import io
import re
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass, field

from seq2seq.documents.align import Aligned, SentenceTranslator
from seq2seq.documents.inline import Run, Splitter, units
from seq2seq.documents.package import DocumentError, check_package

MAX_UNPACKED = 64 * 2**20  # bytes a .docx may unpack to
W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
CONTAINERS = frozenset({"hyperlink", "fldSimple", "smartTag", "ins"})  # runs inside, kept together
TEXTUAL = frozenset({"rPr", "t", "tab", "br", "cr", "noBreakHyphen", "softHyphen", "ptab",
                     "lastRenderedPageBreak"})  # what a run may hold and still be rewritten


def _name(el) -> str:
    return el.tag[len(W):] if isinstance(el.tag, str) and el.tag.startswith(W) else ""


def _is_text_run(r) -> bool:
    """A ``w:r`` of text only (a page or column break is not text: python-docx drops it)."""
    return _name(r) == "r" and all(
        _name(c) in TEXTUAL and (_name(c) != "br" or c.get(W + "type", "textWrapping") == "textWrapping")
        for c in r)


def _weight(run) -> int:
    """How much formatting a run carries: its run properties."""
    props = run.find(W + "rPr")
    return 0 if props is None else len(props)


def _field_char(el) -> str | None:
    mark = el.find(W + "fldChar") if _name(el) == "r" else None
    return None if mark is None else mark.get(W + "fldCharType")


def _field_ends(kids: list, i: int) -> tuple[int, int] | None:
    """The separate and end marks of the complex field begun at ``kids[i]`` (nested fields
    skipped), or None when this paragraph level does not hold both."""
    depth, sep = 0, None
    for j in range(i + 1, len(kids)):
        mark = _field_char(kids[j])
        if mark == "begin":
            depth += 1
        elif mark == "end" and depth:
            depth -= 1
        elif mark == "end":
            return (sep, j) if sep is not None else None
        elif mark == "separate" and not depth:
            sep = j
    return None


@dataclass
class _Entry:
    kind: str  # "run", "open", "close", "point"
    els: list  # the XML elements it stands for (a field's open: begin mark to separate mark)
    tag: str = ""  # pairs an open with its close
    box: bool = False  # an open whose element holds its runs (not a field's marks)
    text: str = ""


def _walk(kids: list, out: list[_Entry]) -> None:
    """A paragraph's (or container's) children as entries, in document order."""
    i = 0
    while i < len(kids):
        el, name = kids[i], _name(kids[i])
        ends = _field_ends(kids, i) if _field_char(el) == "begin" else None
        if name in CONTAINERS:
            tag = f"c{len(out)}"
            out.append(_Entry("open", [el], tag, box=True))
            _walk(list(el), out)
            out.append(_Entry("close", [], tag))
        elif ends:
            tag = f"f{len(out)}"
            out.append(_Entry("open", kids[i:ends[0] + 1], tag))
            _walk(kids[ends[0] + 1:ends[1]], out)
            out.append(_Entry("close", [kids[ends[1]]], tag))
            i = ends[1]
        elif _is_text_run(el):
            out.append(_Entry("run", [el], text=el.text))
        elif name != "pPr":
            out.append(_Entry("point", [el]))
        i += 1


@dataclass
class _Item:  # what inline.Run reads
    kind: str
    tag: str = ""
    text: str = ""
    raw: str = ""


def _cut(text: str, lo: int, edges: list[int]) -> list[str]:
    """``text`` (at offset ``lo``) cut at the ``edges`` inside it."""
    cuts = [0, *(x - lo for x in edges if lo < x < lo + len(text)), len(text)]
    return [text[a:b] for a, b in zip(cuts, cuts[1:]) if a < b] or [text]


class Paragraph:
    """A ``w:p`` planned: ``sentences`` to translate, then :meth:`render` rebuilds it."""

    def __init__(self, p, split: Splitter):
        self.p = p
        entries: list[_Entry] = []
        _walk([c for c in p if _name(c) != "pPr"], entries)
        text = "".join(e.text for e in entries)
        spans = self._units(entries, text, split)
        edges = sorted({x for u in spans for x in u})
        self.items: list[_Item] = []
        self.entries: list[tuple[_Entry, str]] = []  # per item: its entry, a run piece's text
        at = 0
        for e in entries:
            if e.kind != "run":
                self._add(_Item(e.kind, e.tag), e)
                continue
            for piece in _cut(e.text, at, edges):
                tag = f"r{len(self.items)}"
                self._add(_Item("open", tag), e, piece)
                self._add(_Item("text", text=piece), e, piece)
                self._add(_Item("close", tag), e, piece)
            at += len(e.text)
        self.run = Run(self.items, lambda _: spans)
        self.sentences = self.run.sentences if text.strip() else []

    def _add(self, item: _Item, entry: _Entry, piece: str = "") -> None:
        self.items.append(item)
        self.entries.append((entry, piece))

    @staticmethod
    def _units(entries: list[_Entry], text: str, split: Splitter) -> list[tuple[int, int]]:
        """The sentence units: a container or field across a sentence boundary joins them."""
        ranges, opened, at = [], {}, 0
        for e in entries:
            if e.kind == "open":
                opened[e.tag] = at
            elif e.kind == "close":
                a, b = opened[e.tag], at
                while a < b and text[a].isspace():
                    a += 1
                while b > a and text[b - 1].isspace():
                    b -= 1
                if a < b:
                    ranges.append((a, b))
            at += len(e.text)
        return [tuple(u) for u in units(text, split(text), ranges)] if text.strip() else []

    def render(self, translations: list[Aligned]) -> None:
        """The paragraph's content rebuilt in target order from :meth:`Run.events`."""
        if not self.sentences:
            return
        fallback = min((e.els[0] for e, _ in self.entries if e.kind == "run"), key=_weight)
        for child in [c for c in self.p if _name(c) != "pPr"]:
            self.p.remove(child)
        levels = [_Level(self.p, fallback)]
        current = None  # the run being written
        for t in self.run.events(translations):
            item = None if isinstance(t, str) else self.items[t]
            if item is None or item.kind == "text":
                text = t if item is None else item.text
                if current is not None:
                    current.texts.append(text)
                else:
                    levels[-1].pending += text
                continue
            entry, piece = self.entries[t]
            if entry.kind == "run":
                current = levels[-1].start_run(entry.els[0], piece) if item.kind == "open" else None
            else:
                _structure(levels, item.kind, entry, fallback)
        levels[0].flush()
        for written in levels[0].written:
            written.finish()


@dataclass
class _Written:
    """A run of the output: a copy of its source run, with the texts given to it."""

    source: object  # the source run (pieces of one run in a row are written as one)
    el: object
    was: str | None  # the source run's text (None: a run made for loose text)
    tail_spaces: int = 0  # spaces its last source piece ended with (loose spaces it takes)
    texts: list[str] = field(default_factory=list)

    def finish(self) -> None:
        text = "".join(self.texts)
        if not text and self.was:  # its words all went into other runs
            self.el.getparent().remove(self.el)
        elif text != self.was:
            self.el.text = text


@dataclass
class _Level:
    """Where output goes: a paragraph, a container's copy, or a field's result."""

    parent: object
    fallback: object  # the run copied for loose text with no run beside it
    last: _Written | None = None
    pending: str = ""  # text given to no run yet
    written: list[_Written] = field(default_factory=list)  # shared by a paragraph's levels

    def start_run(self, source, piece: str) -> _Written:
        if self.last is not None and self.pending:
            self._share(_weight(self.last.source) <= _weight(source))
        if self.last is None or self.last.source is not source:
            self._new(source, source.text)
        self.last.tail_spaces = len(piece) - len(piece.rstrip())
        self.last.texts.append(self.pending)
        self.pending = ""
        return self.last

    def _share(self, words_before: bool) -> None:
        """The run before takes its part of the loose text: the words in it when it is the
        plainer of the two (what no run claimed wears the least formatting), then as many
        spaces as its source text ended with; the next run takes the rest."""
        body = len(self.pending.rstrip())
        k = 0
        if self.pending[:body].strip() and words_before:
            k = body
        stop = k + self.last.tail_spaces
        while k < min(stop, len(self.pending)) and self.pending[k].isspace():
            k += 1
        self.last.texts.append(self.pending[:k])
        self.pending = self.pending[k:]

    def _new(self, source, was: str | None) -> None:
        self.last = _Written(source, copy.deepcopy(source), was)
        self.parent.append(self.last.el)
        self.written.append(self.last)

    def flush(self) -> None:
        if self.pending and self.last is None:
            self._new(self.fallback, None)
        if self.pending:
            self.last.texts.append(self.pending)
        self.pending = ""

    def put(self, els: list) -> None:
        """Elements never changed, after what is written so far: the run before takes its
        part of the loose text (:meth:`_share`), the rest waits for the run after them."""
        if self.last is not None and self.pending:
            self._share(True)  # words no run claimed: to the run before
        for el in els:
            self.parent.append(el)
        self.last = None


def _structure(levels: list[_Level], kind: str, entry: _Entry, fallback) -> None:
    """A container or field opened or closed, or a point put, at the innermost level."""
    level = levels[-1]
    if kind == "point":
        level.put(entry.els)
    elif kind == "open":
        shell = None
        if entry.box:  # a copy with its attributes; its runs come back as written
            shell = copy.copy(entry.els[0])
            for child in list(shell):
                shell.remove(child)
        level.put([shell] if entry.box else entry.els)
        inner = _Level(shell if entry.box else level.parent, fallback, written=level.written)
        inner.pending, level.pending = level.pending, ""  # the spaces its first run began with
        levels.append(inner)
    else:
        inner = levels.pop()
        inner.flush()
        levels[-1].put(entry.els)
        levels[-1].last = inner.last  # the spaces its last run ended with come after it


def _paragraphs(doc):
    """Every paragraph once: the body's, then tables' cells (nested tables too; a merged
    cell once), then headers' and footers'."""
    seen = set()  # lxml elements: a merged cell is the same element in several places

    def walk(container):
        for p in container.paragraphs:
            if p._p not in seen:
                seen.add(p._p)
                yield p
        for table in getattr(container, "tables", []):
            for row in table.rows:
                for cell in row.cells:
                    yield from walk(cell)
    yield from walk(doc)
    for section in doc.sections:
        for part in (section.header, section.footer):
            if not part.is_linked_to_previous:
                yield from walk(part)


# What python-docx raises on a package it cannot read (a part missing, a relationship to
# nowhere, an element where another belongs), as it reads or as the document is walked.
_UNREADABLE = (KeyError, ValueError, AttributeError, IndexError, TypeError, SyntaxError,
               RecursionError, zipfile.BadZipFile)  # lxml's XMLSyntaxError is a SyntaxError


@contextmanager
def _refused_as_docx(name: str):
    from docx.opc.exceptions import PackageNotFoundError

    try:
        yield
    except (PackageNotFoundError, *_UNREADABLE) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        if isinstance(e, (AttributeError, TypeError, IndexError)):  # about Python objects
            reason = "its parts are not laid out as Word writes them"
        if isinstance(e, RecursionError):
            reason = "its paragraphs nest links or fields deeper than Word does"
        kind = re.search(r"content type is '([^']*)'", reason)
        if kind:  # python-docx names the file by its Python object: say what it holds instead
            reason = f"its main part is {kind.group(1)}"
        raise DocumentError(f"{name}: not a Word (.docx) document ({reason})") from None


def _check_package(data: bytes, name: str) -> None:
    """A zip of at most ``MAX_UNPACKED`` bytes whose XML parts parse and declare no DTD
    (Word writes none; a DTD's entities are how billion laughs and external files get in,
    and python-docx leaves them unexpanded, dropping the text after them)."""
    check_package(data, name, "a Word (.docx) document", ".docx", (".xml", ".rels"))


def _label_language(doc, target_lang: str) -> None:
    """The document's language (core properties' ``dc:language``) set to ``target_lang``;
    a package without core properties is left without (python-docx would invent a title)."""
    from docx.opc.constants import RELATIONSHIP_TYPE

    try:
        doc.part.package.part_related_by(RELATIONSHIP_TYPE.CORE_PROPERTIES)
    except KeyError:
        return
    doc.core_properties.language = target_lang


def translate_docx(data: bytes, name: str, translate: SentenceTranslator, split: Splitter,
                   target_lang: str | None = None) -> bytes:
    """The Word document translated, every paragraph's formatting on its words; its
    language metadata ``target_lang`` when that is given."""
    import docx

    _check_package(data, name)
    with _refused_as_docx(name):
        doc = docx.Document(io.BytesIO(data))
        plans = [Paragraph(p._p, split) for p in _paragraphs(doc)]
    sentences = [s for p in plans for s in p.sentences]
    done = iter(translate(sentences) if sentences else [])
    with _refused_as_docx(name):
        for p in plans:
            p.render([next(done) for _ in p.sentences])
        if target_lang:
            _label_language(doc, target_lang)
        out = io.BytesIO()
        doc.save(out)
    return out.getvalue()
