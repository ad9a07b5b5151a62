"""PowerPoint presentations (.pptx), read with lxml from the package's slide and notes parts
(the parts ``[Content_Types].xml`` names as slides and notes slides).

Every DrawingML paragraph (``a:p``) of a slide is translated: in text boxes, placeholders,
tables, grouped shapes, and the speaker notes. A paragraph's runs (``a:r``: bold, colour,
a link's ``a:hlinkClick``) follow their words through the alignment; a line break
(``a:br``) ends a text (each line translated on its own, as in a list); fields (``a:fld``:
the slide number, a date) stay as they are. Slide masters and layouts (their prompt texts),
charts and SmartArt are not translated. With a target language, runs labelled in the source
language (``lang="de-DE"``) and the core properties' ``dc:language`` say the target's.
"""

from __future__ import annotations

from seq2seq.documents.align import SentenceTranslator
from seq2seq.documents.inline import Splitter
from seq2seq.documents.package import DocumentError, check_package, in_source, rebuild, serialize
from seq2seq.documents.slots import Paragraphs, Slot, one_batch

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


def lines(paragraph) -> list[list[Slot]]:
    """A paragraph's texts: its runs, a new text after each line break."""
    out: list[list[Slot]] = [[]]
    for child in paragraph:
        if child.tag == A + "br":
            out.append([])
        elif child.tag == A + "r" and (t := child.find(A + "t")) is not None:
            out[-1].append(Slot(t.text or "", lambda new, t=t: setattr(t, "text", new)))
    return out


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
    texts = [line for part in parts for p in trees[part].getroot().iter(A + "p")
             for line in lines(p)]
    one_batch([Paragraphs(texts, split)], translate)
    if target_lang:
        _relabel(trees, parts, lang, target_lang)
    changed = [*parts, "docProps/core.xml"] if target_lang else parts
    return rebuild(data, {p: serialize(trees[p]) for p in changed if p in trees})
