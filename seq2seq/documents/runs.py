"""A paragraph of an XML document (Word, PowerPoint, OpenDocument) translated as inline
markup, by the rule HTML follows (:mod:`seq2seq.documents.inline`), and rebuilt in place.

A format reads a paragraph's children into entries: a *run* (an element holding text with
its formatting: Word's ``w:r``, PowerPoint's ``a:r``), an *open*/*close* pair (an element
around runs and text: a hyperlink, a field, an OpenDocument span), a *point* (an element
kept as it is: a picture, a bookmark, a field's marks) or *text* (what OpenDocument holds
outside any run). Each run is an element around its words, and the alignment carries runs
and containers to the target words their source words went to: a bold word's translation
is bold, a link keeps its words inside it. The paragraph is then rebuilt from
:meth:`Run.events`:

- A run may be cut where sentences are, so a run never joins two sentences into one unit;
  a container across a sentence boundary does, as an HTML element does. The pieces of one
  run that stay together come back as one copy of it, its text set by the format.
- Text the alignment gives to no run (spaces between runs, a word aligned nowhere) goes to
  a neighbour: the run before takes as many spaces as its source text ended with, the next
  run the rest; words go to the less formatted of the two, never into a container from
  outside it. A run or container whose words all went elsewhere (or were aligned to
  nothing) is dropped, not left empty. In a format whose text may stand outside runs
  (OpenDocument), text is written where it falls instead, by the format's writer.
- A point that ends a line (``brk``) ends every sentence there: the text on each side is
  cut into sentences on its own.
- Points stay, as in HTML, before the target word aligned after them; what precedes the
  entries (paragraph properties) is kept where it is.
"""

from __future__ import annotations

import copy
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from seq2seq.documents.align import Aligned
from seq2seq.documents.inline import Run, Splitter, units
from seq2seq.documents.package import NOT_XML


class Loose:
    """Writes text outside runs where a format allows it: at the end of ``parent`` (its
    text, or its last child's tail). A format with its own spelling of spaces or tabs
    (OpenDocument's ``text:s``) subclasses it; one instance writes one paragraph. Text is
    gathered and set once per place (a tail added to piece by piece is copied each time:
    quadratic for a paragraph of 10,000 spans)."""

    def __init__(self):
        self._parent, self._texts = None, []

    def text(self, parent, text: str) -> None:
        if parent is not self._parent:
            self.flush()
            self._parent = parent
        self._texts.append(text)

    def element(self, parent, el) -> None:
        """``el`` appended after what is written (its tail was read as text: cleared)."""
        self.flush()
        el.tail = None
        parent.append(el)

    def flush(self) -> None:
        text, parent = "".join(self._texts), self._parent
        self._parent, self._texts = None, []
        if not text:
            return
        try:
            last = parent[-1]  # not len(parent): lxml counts the children
        except IndexError:
            parent.text = (parent.text or "") + text
        else:
            last.tail = (last.tail or "") + text


@dataclass(frozen=True)
class Format:
    """What differs between formats: how much formatting a run carries (``weight``: the
    plainest run takes loose words, and is copied for text with no run beside it), how a
    run's copy gets its text (``write``), and, where text may stand outside runs, the
    writer a paragraph's rendering uses (``loose``: a new :class:`Loose` per paragraph)."""

    weight: Callable[[Any], int] = lambda run: 0
    write: Callable[[Any, str], None] = lambda run, text: None
    loose: Callable[[], Loose] | None = None


@dataclass
class Entry:
    kind: str  # "run", "open", "close", "point", "text"
    els: list  # the XML elements it stands for (a Word field's open: begin mark to separate mark)
    tag: str = ""  # pairs an open with its close
    box: bool = False  # an open whose element holds its runs (not a field's marks)
    text: str = ""
    brk: bool = False  # a point that ends a line: no sentence runs over it
    words: bool = False  # an open whose element holds words (left empty, it is dropped)


@dataclass
class _Item:  # what inline.Run reads
    kind: str
    tag: str = ""
    text: str = ""
    raw: str = ""


def _cut(text: str, lo: int, edges: list[int]) -> list[str]:
    """``text`` (at offset ``lo``) cut at the ``edges`` (sorted) inside it."""
    inside = edges[bisect_right(edges, lo):bisect_left(edges, lo + len(text))]
    cuts = [0, *(x - lo for x in inside), len(text)]
    return [text[a:b] for a, b in zip(cuts, cuts[1:]) if a < b] or [text]


class Paragraph:
    """A paragraph's entries planned: ``sentences`` to translate, then :meth:`render`
    rebuilds the paragraph ``p`` (its children that are some entry's elements)."""

    def __init__(self, p, entries: list[Entry], split: Splitter, fmt: Format):
        self.p, self.fmt = p, fmt
        text = "".join(e.text for e in entries)
        spans = self._units(entries, text, split)
        edges = sorted({x for u in spans for x in u})
        self.items: list[_Item] = []
        self.entries: list[tuple[Entry, str]] = []  # per item: its entry, a run piece's text
        at = 0
        for e in entries:
            if e.kind == "run":
                for piece in _cut(e.text, at, edges):
                    tag = f"r{len(self.items)}"
                    self._add(_Item("open", tag), e, piece)
                    self._add(_Item("text", text=piece), e, piece)
                    self._add(_Item("close", tag), e, piece)
            else:
                self._add(_Item(e.kind, e.tag, e.text), e)
            at += len(e.text)
        self.run = Run(self.items, lambda _: spans)
        self.sentences = self.run.sentences if text.strip() else []

    def _add(self, item: _Item, entry: Entry, piece: str = "") -> None:
        self.items.append(item)
        self.entries.append((entry, piece))

    @staticmethod
    def _units(entries: list[Entry], text: str, split: Splitter) -> list[tuple[int, int]]:
        """The sentence units, each line (between ``brk`` points) cut on its own; a
        container or field across a sentence boundary joins them. Marks each container
        that holds words (``Entry.words``)."""
        if not text.strip():
            return []
        ranges, opened, lines, at = [], {}, [0], 0
        for e in entries:
            if e.kind == "open":
                opened[e.tag] = (at, e)
            elif e.kind == "close":
                (a, start), b = opened[e.tag], at
                while a < b and text[a].isspace():
                    a += 1
                while b > a and text[b - 1].isspace():
                    b -= 1
                if a < b:
                    ranges.append((a, b))
                    start.words = True
            elif e.brk:
                lines.append(at)
            at += len(e.text)
        spans = [(lo + s, lo + e) for lo, hi in zip(lines, [*lines[1:], len(text)])
                 for s, e in split(text[lo:hi])]
        return [tuple(u) for u in units(text, spans, ranges)]

    def render(self, translations: list[Aligned]) -> None:
        """The paragraph's content rebuilt in target order from :meth:`Run.events`."""
        if not self.sentences:
            return
        fmt = self.fmt
        fallback = min((e.els[0] for e, _ in self.entries if e.kind == "run"),
                       key=fmt.weight, default=None)
        ours = {id(el) for e, _ in self.entries for el in e.els}
        for child in [c for c in self.p if id(c) in ours]:
            self.p.remove(child)
        loose = fmt.loose() if fmt.loose else None
        if loose:
            self.p.text = None
        levels = [_Level(self.p, fallback, fmt, loose)]
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
                current = levels[-1].start_run(entry, piece) if item.kind == "open" else None
            else:
                _structure(levels, item.kind, entry)
        levels[0].flush()
        if loose:
            loose.flush()
        for written in levels[0].written:
            written.finish(fmt.write)
        for shell in reversed(levels[0].shells):  # inner ones first (held words in the source)
            if not len(shell) and not shell.text:
                _drop(shell)


@dataclass
class _Written:
    """A run of the output: a copy of its source run, with the texts given to it."""

    source: object  # the source run (pieces of one run in a row are written as one)
    el: object
    was: str | None  # the source run's text (None: a run made for loose text)
    tail_spaces: int = 0  # spaces its last source piece ended with (loose spaces it takes)
    texts: list[str] = field(default_factory=list)

    def trailing_spaces(self) -> int:
        """The spaces its text ends with so far (its own edge, ``inline._widen``)."""
        n = 0
        for text in reversed(self.texts):
            n += len(text) - len(text.rstrip())
            if text.strip():
                break
        return n

    def finish(self, write) -> None:
        text = NOT_XML.sub("", "".join(self.texts))
        if not text and self.was:  # its words all went into other runs
            self.el.getparent().remove(self.el)
        elif text != self.was:
            write(self.el, text)


@dataclass
class _Level:
    """Where output goes: a paragraph, a container's copy, or a field's result."""

    parent: object
    fallback: object  # the run copied for loose text with no run beside it
    fmt: Format
    loose: Loose | None = None  # writes text outside runs, where the format has it
    last: _Written | None = None
    pending: str = ""  # text given to no run yet
    written: list[_Written] = field(default_factory=list)  # shared by a paragraph's levels
    shells: list = field(default_factory=list)  # containers' copies, shared too

    def start_run(self, entry: Entry, piece: str) -> _Written:
        source = entry.els[0]
        if self.last is not None and self.pending:
            self._share(self.fmt.weight(self.last.source) <= self.fmt.weight(source),
                        len(piece) - len(piece.lstrip()))
        if self.loose and self.pending:
            self._write_loose()
        if self.last is None or self.last.source is not source:
            self._new(source, entry.text)
        self.last.tail_spaces = len(piece) - len(piece.rstrip())
        self.last.texts.append(self.pending)
        self.pending = ""
        return self.last

    def _share(self, words_before: bool, head: int | None = None) -> None:
        """The run before takes its part of the loose text: the words in it when it is the
        plainer of the two (what no run claimed wears the least formatting) and not in a
        container closed since (``Park</a>.``: the full stop stays out of the link), then the
        spaces its source text ended with that it lacks; the next run takes the rest, but
        of spaces alone only as many as its source began with (``head``, where a run is
        next), the plainer run the others (not a link's leading space)."""
        body = len(self.pending.rstrip())
        k = 0
        outside = self.last.el.getparent() is not self.parent  # in a container: no words
        if self.pending[:body].strip() and words_before and not outside:
            k = body
        stop = k + max(0, self.last.tail_spaces - self.last.trailing_spaces())
        while k < min(stop, len(self.pending)) and self.pending[k].isspace():
            k += 1
        if head is not None and words_before and not self.pending[k:].strip():
            k = max(k, len(self.pending) - head)
        self.last.texts.append(self.pending[:k])
        self.pending = self.pending[k:]

    def _new(self, source, was: str | None) -> None:
        if self.loose:
            self.loose.flush()  # the text before it
        self.last = _Written(source, copy.deepcopy(source), was)
        self.parent.append(self.last.el)
        self.written.append(self.last)

    def _write_loose(self) -> None:
        self.loose.text(self.parent, NOT_XML.sub("", self.pending))
        self.pending = ""

    def flush(self) -> None:
        """The loose text at the end: to the run before, but words only when it is no more
        formatted than the plainest run (``Park</a>.``: the full stop not into the link);
        else to a copy of the plainest run."""
        if self.pending and self.last is None and self.loose:
            self._write_loose()
        if self.pending and self.last is not None:
            self._share(self.fmt.weight(self.last.source) <= self.fmt.weight(self.fallback))
        if self.pending and (self.last is None or self.pending.strip()):
            self._new(self.fallback, None)
        if self.pending:
            self.last.texts.append(self.pending)
        self.pending = ""

    def put(self, els: list) -> None:
        """Elements never changed, after what is written so far: the run before takes its
        part of the loose text (:meth:`_share`), the rest waits for the run after them (or,
        where text stands outside runs, is written before them)."""
        if self.last is not None and self.pending:
            self._share(True)  # words no run claimed: to the run before
        if self.loose and self.pending:
            self._write_loose()
        for el in els:
            if self.loose:
                self.loose.element(self.parent, el)
            else:
                self.parent.append(el)
        self.last = None


def _structure(levels: list[_Level], kind: str, entry: Entry) -> None:
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
            if level.loose:  # its text was read as text
                shell.text = None
            if entry.words:
                level.shells.append(shell)
        before = level.last
        level.put([shell] if entry.box else entry.els)
        if before is not None and not level.pending.strip():  # spaces no run claimed (an
            before.texts.append(level.pending)  # element's own are inside it: inline._widen)
            level.pending = ""
        inner = _Level(shell if entry.box else level.parent, level.fallback, level.fmt,
                       level.loose, written=level.written, shells=level.shells)
        inner.pending, level.pending = level.pending, ""  # text before its first run
        levels.append(inner)
    else:
        inner = levels.pop()
        inner.flush()
        levels[-1].put(entry.els)
        levels[-1].last = inner.last  # the spaces its last run ended with come after it


def _drop(el) -> None:
    """A container left empty (its words all went elsewhere, or none was aligned to it)
    taken out, as a run is; the text after it stays."""
    parent, before = el.getparent(), el.getprevious()
    if el.tail and before is not None:
        before.tail = (before.tail or "") + el.tail
    elif el.tail:
        parent.text = (parent.text or "") + el.tail
    parent.remove(el)
