"""HTML in, HTML out, a sentence at a time across inline tags.

The page is read with the standard library's ``html.parser`` (a forgiving HTML tokenizer)
into events, each with its raw bytes. Block elements (``p``, ``div``, ``li``, ``td``,
anything not inline) are boundaries, copied verbatim. Between two boundaries, text and
inline elements (``b``, ``i``, ``a``, ``span``, ``em``, ``br``, ...) form one run: its text,
entities decoded, is cut into sentences; each sentence goes to the model as plain text,
and each inline element inside it is carried to the target words the model aligned with
its words (:mod:`seq2seq.documents.align`). An element around whole sentences stays around
their translations; one that crosses a sentence boundary mid-sentence joins those
sentences into one unit. Tags are emitted from their raw source bytes (attributes
untouched), properly nested by construction; text is escaped once on output.

Never translated, kept byte for byte: attributes (but ``lang``/``xml:lang`` in the source
language, set to the target's when that is known), comments (an unclosed ``<!--`` too),
declarations, ``<script>``, ``<style>``, ``<code>``, ``<pre>``, ``<kbd>``, ``<samp>``,
``<textarea>``, ``<svg>``, ``<math>``, ``<template>``, and any element with ``translate="no"`` or class ``notranslate`` (HTML's
own opt-out). A lone ``<`` (``a < b``, ``<3``) is text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from html.parser import HTMLParser

from seq2seq.documents.align import Aligned, SentenceTranslator
from seq2seq.documents.inline import Run, Splitter, sentence_splitter

INLINE = frozenset(
    "a abbr acronym b bdi bdo big br cite code data del dfn em font i img ins kbd label mark "
    "noscript q s samp script small span strike strong style sub sup textarea time tt u var "
    "wbr".split())
VOID = frozenset("area base br col embed hr img input link meta param source track wbr".split())
OPAQUE = frozenset("script style code pre kbd samp textarea svg math template".split())


@dataclass
class Item:
    kind: str  # "text", "open", "close", "point" (kept as is, inside a run), "block"
    raw: str
    tag: str = ""
    text: str = ""  # decoded text of a "text" item
    folded: bool = False  # a never-translated element whole, not a lone tag


class _Events(HTMLParser):
    def __init__(self, source: str):
        super().__init__(convert_charrefs=True)
        self._line_starts = [0] + [i + 1 for i, c in enumerate(source) if c == "\n"]
        self.events: list[tuple[int, str, str, str]] = []  # (offset, kind, tag, text)
        self.opaque_attrs: set[int] = set()  # offsets of start tags that opt out

    def _add(self, kind: str, tag: str = "", text: str = "") -> None:
        line, col = self.getpos()
        self.events.append((self._line_starts[line - 1] + col, kind, tag, text))

    def handle_data(self, data):
        self._add("point" if self.cdata_elem is not None else "text", text=data)

    def handle_starttag(self, tag, attrs):
        values = dict(attrs)
        if values.get("translate") == "no" or "notranslate" in (values.get("class") or "").split():
            line, col = self.getpos()
            self.opaque_attrs.add(self._line_starts[line - 1] + col)
        self._add("void" if tag in VOID else "open", tag)

    def handle_startendtag(self, tag, attrs):
        self._add("void", tag)

    def handle_endtag(self, tag):
        self._add("close", tag)

    def handle_comment(self, data):
        self._add("point")

    handle_decl = handle_pi = unknown_decl = handle_comment

    def parse_marked_section(self, i, report=1):
        """``<![`` not followed by what ``_markupbase`` expects (``<![ x``) makes it raise
        AssertionError (after moving the position on); HTML reads it as a bogus comment up
        to the next ``>``."""
        at = self.lineno, self.offset
        try:
            return super().parse_marked_section(i, report)
        except AssertionError:
            self.lineno, self.offset = at
            return self.parse_bogus_comment(i, report)


def parse(source: str) -> list[Item]:
    """The page as items covering it byte for byte, opaque elements folded into one."""
    p = _Events(source)
    p.feed(source)
    p.close()
    events = p.events
    if not events or events[0][0] != 0:
        events.insert(0, (0, "point", "", ""))
    bounds = [e[0] for e in events] + [len(source)]
    items = []
    for k, (start, kind, tag, text) in enumerate(events):
        raw = source[start:bounds[k + 1]]
        if kind == "text" and len(raw) > 1 and raw[0] == "<" and (raw[1] in "!?/" or raw[1].isalpha()):
            kind = "point"  # markup cut off at the end of the page (an unclosed <!--)
        elif kind == "void":
            kind = "point" if tag in INLINE else "block"
        elif kind in ("open", "close") and tag not in INLINE:
            kind = "block"
        opted_out = kind in ("open", "block") and start in p.opaque_attrs and tag not in VOID
        items.append(Item("opaque", raw, tag) if opted_out else Item(kind, raw, tag, text))
    return _fold_opaque(_fold_unclosed_comment(items))


def _fold_unclosed_comment(items: list[Item]) -> list[Item]:
    """An ``<!--`` never closed runs to the end of the page: one item, never text. Only
    one after the page's last ``-->`` can be unclosed: found in one pass, not a join of the
    rest of the page per tag (quadratic)."""
    page = "".join(it.raw for it in items)
    last, at = page.rfind("-->"), 0
    for k, it in enumerate(items):
        if it.kind in ("text", "point") and last < at and page.startswith("<!--", at):
            return [*items[:k], Item("point", page[at:])]
        at += len(it.raw)
    return items


def _fold_opaque(items: list[Item]) -> list[Item]:
    """Each never-translated element (start tag to its end tag) as one item."""
    out: list[Item] = []
    k = 0
    while k < len(items):
        it = items[k]
        if it.kind == "opaque" or (it.kind in ("open", "block") and it.tag in OPAQUE
                                   and not it.raw.startswith("</")):
            depth, j = 0, k
            while j < len(items):
                depth += (items[j].tag == it.tag) * (1 if not items[j].raw.startswith("</") else -1)
                if depth == 0:
                    break
                j += 1
            raw = "".join(x.raw for x in items[k:j + 1])
            out.append(Item("point" if it.tag in INLINE else "block", raw, it.tag, folded=True))
            k = j + 1
        else:
            out.append(it)
            k += 1
    return out


def runs(items: list[Item]) -> list[str | list[Item]]:
    """Raw markup between blocks, and the inline runs with text to translate."""
    out: list[str | list[Item]] = []
    current: list[Item] = []

    def flush():
        if any(it.kind == "text" and it.text.strip() for it in current):
            out.append(list(current))
        elif current:
            out.append("".join(it.raw for it in current))
        current.clear()

    for it in items:
        if it.kind == "block":
            flush()
            out.append(it.raw)
        else:
            current.append(it)
    flush()
    return out


# One attribute of a start tag, from where the one before it ended (html.parser's reading).
_ATTRIBUTE = re.compile(r"""([^\s/>][^\s/=>]*)(?:(\s*=+\s*)('[^']*'|"[^"]*"|(?!['"])[^>\s]*))?(?:\s|/(?!>))*""")


def _relabel_tag(raw: str, source_lang: str | None, target_lang: str) -> str:
    """A start tag with its ``lang``/``xml:lang`` values in ``source_lang`` (any, if None)
    set to ``target_lang``, quoting and every other byte kept."""
    k = re.match(r"<[^\s/>]+(?:\s|/(?!>))*", raw).end()
    out = [raw[:k]]
    while m := _ATTRIBUTE.match(raw, k):
        name, equals, value = m.groups()
        quote = value[:1] if value and value[0] in "'\"" else ""
        code = value[len(quote):len(value) - len(quote)] if value else ""
        primary = re.split(r"[-_]", code.strip().lower())[0]
        if name.lower() in ("lang", "xml:lang") and primary \
                and (source_lang is None or primary == source_lang.lower().split("-")[0]):
            out.append(f"{name}{equals}{quote}{target_lang}{quote}{m.group()[m.end(3) - k:]}")
        else:
            out.append(m.group())
        k = m.end()
    return "".join(out) + raw[k:]


def relabel(items: list[Item], source_lang: str | None, target_lang: str) -> None:
    """The page's language labels (``<html lang="de">``) say the translation's language,
    except inside never-translated elements."""
    for it in items:
        if it.tag and not it.folded and it.raw[1:2].isalpha() and "lang" in it.raw.lower():
            it.raw = _relabel_tag(it.raw, source_lang, target_lang)


class Page:
    """A page planned: ``sentences`` (all of its units, one batch), then :meth:`render`;
    with ``target_lang``, its language labels relabelled (:func:`relabel`)."""

    def __init__(self, source: str, split: Splitter, source_lang: str | None = None,
                 target_lang: str | None = None):
        items = parse(source)
        if target_lang:
            relabel(items, source_lang, target_lang)
        self.parts = [p if isinstance(p, str) else Run(p, split) for p in runs(items)]
        self.sentences = [s for p in self.parts if isinstance(p, Run) for s in p.sentences]

    def render(self, translations: list[Aligned]) -> str:
        done, out = iter(translations), []
        for p in self.parts:
            out.append(p if isinstance(p, str) else p.render([next(done) for _ in p.sentences]))
        return "".join(out)


def translate_html(source: str, translate: SentenceTranslator, split: Splitter | None = None,
                   lang: str | None = None, target_lang: str | None = None) -> str:
    """``source`` translated: every sentence of the page in one ``translate`` call, cut by
    ``split`` (default: the sentence segmenter in ``lang``); its ``lang`` attributes in
    ``lang`` set to ``target_lang`` when that is given."""
    page = Page(source, split or sentence_splitter(lang), lang, target_lang)
    return page.render(translate(page.sentences) if page.sentences else [])
