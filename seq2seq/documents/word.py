"""Word documents (``python-docx``, ``lxml``), translated with their formatting on the words.

Every paragraph of the body, of tables (nested too), headers and footers is read as one run
of inline markup, as an HTML paragraph is (:mod:`seq2seq.documents.inline`): each text run
(``w:r``: its bold, italic, underline, font, ...) is an element around its words, and so are
a hyperlink (``w:hyperlink``), a simple field (``w:fldSimple``), a smart tag, a tracked
insertion and a complex field (``w:fldChar`` begin to end). The translation's alignment
then carries each of them to the target words their source words went to, by the same rule
as HTML tags: a hyperlink keeps its words inside it, a bold word's translation is bold.

- A text run may be cut where sentences are (Word splits runs freely); text the alignment
  gives to no run goes to a neighbour, and a run whose words all went into other runs is
  dropped (:mod:`seq2seq.documents.runs`, which PowerPoint and OpenDocument share).
- Never translated or changed: a complex field's instruction (``w:instrText``, from its
  begin to its separate mark), runs holding anything but text (pictures, field marks, page
  breaks, footnote references), bookmarks, deleted text and every other element; they
  stay, as points do in HTML, before the target word aligned after them.
- Styles, paragraph properties and everything outside paragraphs are kept; the language
  metadata says the target language when that is known.
"""

from __future__ import annotations

import io
import re
import zipfile
from contextlib import contextmanager

from seq2seq.documents.align import SentenceTranslator
from seq2seq.documents.inline import Splitter
from seq2seq.documents.package import DocumentError, check_package
from seq2seq.documents.runs import Entry, Format, Paragraph

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


def _walk(kids: list, out: list[Entry]) -> None:
    """A paragraph's (or container's) children as entries, in document order."""
    i = 0
    while i < len(kids):
        el, name = kids[i], _name(kids[i])
        ends = _field_ends(kids, i) if _field_char(el) == "begin" else None
        if name in CONTAINERS:
            tag = f"c{len(out)}"
            out.append(Entry("open", [el], tag, box=True))
            _walk(list(el), out)
            out.append(Entry("close", [], tag))
        elif ends:
            tag = f"f{len(out)}"
            out.append(Entry("open", kids[i:ends[0] + 1], tag))
            _walk(kids[ends[0] + 1:ends[1]], out)
            out.append(Entry("close", [kids[ends[1]]], tag))
            i = ends[1]
        elif _is_text_run(el):
            out.append(Entry("run", [el], text=el.text))
        elif name != "pPr":
            out.append(Entry("point", [el]))
        i += 1


def _write(run, text: str) -> None:
    run.text = text  # python-docx's setter: tabs and line breaks as w:tab, w:br


WORD = Format(weight=_weight, write=_write)


def paragraph(p, split: Splitter) -> Paragraph:
    """A ``w:p`` planned (its properties, ``w:pPr``, kept first)."""
    entries: list[Entry] = []
    _walk([c for c in p if _name(c) != "pPr"], entries)
    return Paragraph(p, entries, split, WORD)


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
        plans = [paragraph(p._p, split) for p in _paragraphs(doc)]
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
