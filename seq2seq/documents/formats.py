"""Plain text, subtitles and Word documents, translated with their structure kept.

Each format gathers every sentence of the document first and makes one ``translate`` call
(one batch), then writes the translations back where the sentences were:

- ``.txt``: line by line (one output line per input line, blank lines kept), each line cut
  into sentences, the spaces between them kept.
- ``.srt`` (the ``srt`` package): numbering and timing kept; a subtitle's lines are one text
  (a sentence may run over a line break), its translation wrapped back onto as many lines;
  tags around a whole subtitle (``<i>...</i>``) stay around it.
- ``.docx`` (``python-docx``): every paragraph of the body, of tables (nested too), headers
  and footers; a paragraph's runs (bold, italic, a hyperlink's runs, ...) are carried to
  the target words by the alignment, like inline tags; styles and everything else kept but
  the language metadata, which says the target language when that is known.
"""

from __future__ import annotations

import io
import re
import zipfile
from contextlib import contextmanager

from seq2seq.documents.align import Aligned, SentenceTranslator, project_range
from seq2seq.documents.inline import Splitter, units
from seq2seq.documents.package import DocumentError, check_package
from seq2seq.text.segment import spacer


def plan_texts(texts: list[str], split: Splitter) -> list[list[tuple[int, int]]]:
    """The sentence units of each text (what is not language left between them)."""
    return [units(t, split(t), []) if t.strip() else [] for t in texts]


def _translate_units(texts, plans, translate: SentenceTranslator) -> list[list[Aligned]]:
    sentences = [t[s:e] for t, plan in zip(texts, plans) for s, e in plan]
    done = iter(translate(sentences) if sentences else [])
    return [[next(done) for _ in plan] for plan in plans]


def translate_texts(texts: list[str], translate: SentenceTranslator, split: Splitter) -> list[str]:
    """Each text with its sentences translated and the text between them kept."""
    plans = plan_texts(texts, split)
    out = []
    for text, plan, done in zip(texts, plans, _translate_units(texts, plans, translate)):
        parts, cursor = [], 0
        for k, ((s, e), al) in enumerate(zip(plan, done)):
            touch = k and s == cursor  # no gap: a space between them, maybe (spacer)
            parts += [spacer(text[plan[k - 1][0]:s], text[s:e], parts[-1], al.text) if touch
                      else text[cursor:s], al.text]
            cursor = e
        out.append("".join(parts) + text[cursor:])
    return out


def decode_text(data: bytes, name: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise DocumentError(f"{name}: not UTF-8 text (byte {e.start}: {data[e.start]:#04x})") from None


def translate_txt(data: bytes, name: str, translate: SentenceTranslator, split: Splitter) -> bytes:
    lines = decode_text(data, name).split("\n")
    return "\n".join(translate_texts(lines, translate, split)).encode()


# ---------------------------------------------------------------- subtitles
def wrap(text: str, lines: int) -> str:
    """``text`` on ``lines`` lines of about equal length, broken between words."""
    words = text.split()
    if lines <= 1 or len(words) <= 1:
        return text
    out, target = [], len(text) / lines
    current, done = "", 0  # done: the characters on finished lines (a sum kept, not redone)
    for w in words:
        if current and len(current) + len(w) / 2 > target * (len(out) + 1) - done \
                and len(out) < lines - 1:
            out.append(current)
            done += len(current)
            current = w
        else:
            current = f"{current} {w}" if current else w
    return "\n".join([*out, current])


# A subtitle in italics (or bold, underlined, coloured) as a whole: its tags stay around it.
# Peeled from each end by loops (a regex with a lazy middle backtracks quadratically on
# ``<i></i></i>...x``).
_OPENING = re.compile(r"<[ibu]>|<font[^>]*>", re.I)
_CLOSING = ("</i>", "</b>", "</u>", "</font>")


def wrapping_tags(content: str) -> tuple[str, str, str] | None:
    """``(opening tags, inner text, closing tags)`` of a subtitle wrapped whole in tags, or
    None; the opening tags are all that start it, the closing ones all that end the rest."""
    lo = 0
    while m := _OPENING.match(content, lo):
        lo = m.end()
    hi = len(content)
    while tag := next((t for t in _CLOSING
                       if hi - len(t) >= lo and content[hi - len(t):hi].lower() == t), None):
        hi -= len(tag)
    if lo == 0 or hi == len(content):
        return None
    return content[:lo], content[lo:hi], content[hi:]


def translate_srt(data: bytes, name: str, translate: SentenceTranslator, split: Splitter) -> bytes:
    import srt

    text = decode_text(data, name)
    try:
        subs = list(srt.parse(text, ignore_errors=False))
    except (srt.SRTParseError, ValueError) as e:
        raise DocumentError(f"{name}: not a SubRip (.srt) file: {str(e).splitlines()[0]}") from None
    if text.strip() and not subs:
        raise DocumentError(f"{name}: not a SubRip (.srt) file: no subtitle found")
    wrapped = [wrapping_tags(s.content) for s in subs]
    inner = [m[1] if m else s.content for m, s in zip(wrapped, subs)]
    joined = [" ".join(line.strip() for line in text.split("\n")) for text in inner]
    for sub, m, done in zip(subs, wrapped, translate_texts(joined, translate, split)):
        text = wrap(done, sub.content.count("\n") + 1)
        sub.content = m[0] + text + m[2] if m else text
    return srt.compose(subs, reindex=False).encode()


# ---------------------------------------------------------------- Word
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


def _runs(paragraph) -> list:
    from docx.text.hyperlink import Hyperlink

    out = []
    for item in paragraph.iter_inner_content():
        out.extend(item.runs if isinstance(item, Hyperlink) else [item])
    return out


def _fill(owner: list[int | None], texts: list[str], first: int) -> None:
    """Characters no run's words claimed (spaces, words aligned nowhere) go to a neighbour:
    between two runs, to the earlier one if its source text ended in a space, else the later."""
    i = 0
    while i < len(owner):
        if owner[i] is not None:
            i += 1
            continue
        j = i
        while j < len(owner) and owner[j] is None:
            j += 1
        before = owner[i - 1] if i else None
        after = owner[j] if j < len(owner) else None
        if before is None or after is None or before == after:
            fill = before if before is not None else after if after is not None else first
        else:
            fill = before if texts[before][-1:].isspace() else after
        owner[i:j] = [fill] * (j - i)
        i = j


def split_runs(texts: list[str], plan, done: list[Aligned]) -> list[str]:
    """The runs' new texts: each sentence's translation cut where the alignment says each
    run's words went, in run order (a run moved before an earlier one joins its text)."""
    bounds = [0]
    for t in texts:
        bounds.append(bounds[-1] + len(t))
    text, pieces, cursor = "".join(texts), [], 0

    def source(lo, hi):  # text kept as is: each character stays in its run
        for r, (a, b) in enumerate(zip(bounds, bounds[1:])):
            if max(a, lo) < min(b, hi):
                pieces.append((r, text[max(a, lo):min(b, hi)]))

    for (s, e), al in zip(plan, done):
        source(cursor, s)
        owner: list[int | None] = [None] * len(al.text)
        for r, (a, b) in enumerate(zip(bounds, bounds[1:])):
            got = project_range(al, max(a, s) - s, min(b, e) - s) if max(a, s) < min(b, e) else None
            for i in range(*(got or (0, 0))):
                owner[i] = r if owner[i] is None else owner[i]
        _fill(owner, texts, next((r for r, b in enumerate(bounds[1:]) if b > s), 0))
        pieces += list(zip(owner, al.text))
        cursor = e
    source(cursor, len(text))
    out: list[list[str]] = [[] for _ in texts]  # joined once: += on a list item copies
    last = 0
    for r, piece in pieces:
        last = max(last, r)
        out[last].append(piece)
    return ["".join(run) for run in out]


# What python-docx raises on a package it cannot read (a part missing, a relationship to
# nowhere, an element where another belongs), as it reads or as the document is walked.
_UNREADABLE = (KeyError, ValueError, AttributeError, IndexError, TypeError, SyntaxError,
               zipfile.BadZipFile)  # lxml's XMLSyntaxError is a SyntaxError


@contextmanager
def _refused_as_docx(name: str):
    from docx.opc.exceptions import PackageNotFoundError

    try:
        yield
    except (PackageNotFoundError, *_UNREADABLE) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        if isinstance(e, (AttributeError, TypeError, IndexError)):  # about Python objects
            reason = "its parts are not laid out as Word writes them"
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
    """The Word document translated, run by run; its language metadata ``target_lang``
    when that is given."""
    import docx

    _check_package(data, name)
    with _refused_as_docx(name):
        doc = docx.Document(io.BytesIO(data))
        paragraphs = [(p, _runs(p)) for p in _paragraphs(doc)]
        texts = ["".join(r.text for r in runs) for _, runs in paragraphs]
    plans = plan_texts(texts, split)
    translated = _translate_units(texts, plans, translate)
    with _refused_as_docx(name):
        for (_, runs), plan, done in zip(paragraphs, plans, translated):
            if plan:
                for run, new in zip(runs, split_runs([r.text for r in runs], plan, done)):
                    if run.text != new:
                        run.text = new
        if target_lang:
            _label_language(doc, target_lang)
        out = io.BytesIO()
        doc.save(out)
    return out.getvalue()
