"""PowerPoint presentations (.pptx), read with lxml from the package's slide and notes parts
(the parts ``[Content_Types].xml`` names as slides and notes slides).

Every DrawingML paragraph (``a:p``) of a slide is translated: in text boxes, placeholders,
tables, grouped shapes, and the speaker notes. Each run (``a:r``: bold, colour, a link's
``a:hlinkClick``) is an element around its words, carried by the alignment as Word's runs
are (:mod:`seq2seq.documents.runs`): a bold word's translation is bold, a link keeps its
words. A line break (``a:br``) ends every sentence there (each line is cut into sentences
on its own, as in a list); fields (``a:fld``: the slide number, a date) stay as they are. Slide masters and layouts (their prompt texts),
charts and SmartArt are not translated. With a target language, runs labelled in the source
language (``lang="de-DE"``) and the core properties' ``dc:language`` say the target's.
"""

from __future__ import annotations

from seq2seq.documents.align import SentenceTranslator
from seq2seq.documents.inline import Splitter
from seq2seq.documents.package import DocumentError, check_package, in_source, rebuild, serialize
from seq2seq.documents.runs import Entry, Format, Paragraph
from seq2seq.documents.slots import one_batch

A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
TYPES = "{http://schemas.openxmlformats.org/package/2006/content-types}"
DC = "{http://purl.org/dc/elements/1.1/}"
PML = "application/vnd.openxmlformats-officedocument.presentationml."
MAIN = {PML + k + ".main+xml" for k in ("presentation", "slideshow", "template",
                                        "presentation.macroEnabled")}
TRANSLATED = {PML + "slide+xml", PML + "notesSlide+xml"}
WHAT = "a PowerPoint (.pptx) presentation"


def _parts(types) -> tuple[list[str], set[str]]:
    """The slide and notes parts (zip names) and every content type the package declares."""
    parts, kinds = [], set()
    for override in types.getroot().iter(f"{TYPES}Override"):
        kind = override.get("ContentType", "")
        kinds.add(kind)
        if kind in TRANSLATED:
            parts.append(override.get("PartName", "").lstrip("/"))
    return parts, kinds


# Attributes of a run's properties that say nothing of how it looks (its language, spell
# check state): not counted as formatting.
BOOKKEEPING = frozenset({"lang", "altLang", "dirty", "err", "noProof", "smtClean", "smtId", "bmk"})


def _weight(run) -> int:
    """How much formatting a run carries: its properties' children (a link's
    ``a:hlinkClick``, a colour) and attributes (``b``, ``sz``), bookkeeping left out."""
    props = run.find(A + "rPr")
    return 0 if props is None else len(props) + len(set(props.attrib) - BOOKKEEPING)


def _write(run, text: str) -> None:
    run.find(A + "t").text = text


SLIDES = Format(weight=_weight, write=_write)


def paragraph(p, split: Splitter) -> Paragraph:
    """An ``a:p`` planned: its runs of text (``a:r``) carried by the alignment, a line break
    (``a:br``) ending a line, anything else (a field, ``a:endParaRPr``) kept as a point."""
    entries = []
    for child in p:
        if child.tag == A + "pPr":
            continue
        if child.tag == A + "r" and child.find(A + "t") is not None \
                and all(c.tag in (A + "rPr", A + "t") for c in child):
            entries.append(Entry("run", [child], text=child.find(A + "t").text or ""))
        else:
            entries.append(Entry("point", [child], brk=child.tag == A + "br"))
    return Paragraph(p, entries, split, SLIDES)


def _relabel(trees: dict, parts: list[str], source_lang: str | None, target_lang: str) -> None:
    for part in parts:
        for props in trees[part].getroot().iter(A + "rPr", A + "endParaRPr"):
            if in_source(props.get("lang"), source_lang):
                props.set("lang", target_lang)
    core = trees.get("docProps/core.xml")
    language = core.getroot().find(DC + "language") if core is not None else None
    if language is not None:
        language.text = target_lang


def translate_pptx(data: bytes, name: str, translate: SentenceTranslator, split: Splitter,
                   lang: str | None = None, target_lang: str | None = None) -> bytes:
    """The presentation translated run by run, in one ``translate`` call."""
    trees = check_package(data, name, WHAT, ".pptx", (".xml", ".rels"))
    if "[Content_Types].xml" not in trees:
        raise DocumentError(f"{name}: not {WHAT} (no [Content_Types].xml in it)")
    parts, kinds = _parts(trees["[Content_Types].xml"])
    if not kinds & MAIN:
        main = sorted(k for k in kinds if k.endswith(".main+xml"))
        raise DocumentError(f"{name}: not {WHAT} (its main part is "
                            f"{main[0] if main else 'missing'})")
    missing = [p for p in parts if p not in trees]
    if missing:
        raise DocumentError(f"{name}: not {WHAT} (no {missing[0]} in it)")
    one_batch([paragraph(p, split) for part in parts for p in trees[part].getroot().iter(A + "p")],
              translate)
    if target_lang:
        _relabel(trees, parts, lang, target_lang)
    changed = [*parts, "docProps/core.xml"] if target_lang else parts
    return rebuild(data, {p: serialize(trees[p]) for p in changed if p in trees})
