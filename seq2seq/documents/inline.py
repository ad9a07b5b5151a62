"""One run of text with inline markup, translated a sentence at a time: which sentences
are translation units, which elements are inside a unit (carried by the alignment) or
around whole units (kept where they are), and the run rebuilt, properly nested.

Items are :class:`seq2seq.documents.html.Item`-like: ``kind`` ("text", "open", "close",
"point"), ``raw`` (bytes kept) and ``text`` (decoded text of a "text" item).
"""

from __future__ import annotations

import html
import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from heapq import heappop, heappush

from seq2seq.documents.align import Aligned
from seq2seq.translation.alignment import project_point, project_range
from seq2seq.translation.segment import spacer, strip_span

Splitter = Callable[[str], list[tuple[int, int]]]  # text -> sentence character spans


class Kept(str):
    """Source text kept as it is (between units), as :meth:`Run.events` gives it."""


@dataclass
class _Node:
    open: int = -1  # item indices of the element's tags (-1: the root, which has none)
    close: int = -1
    start: int = 0
    end: int = 0
    children: list = field(default_factory=list)
    point: bool = False
    glue: str = ""  # a point's spacing in the source: "left" (to the word before), "free"
    edges: tuple[str, str] = ("", "")  # the spaces the element held before and after its words


def match(items) -> dict[int, int]:
    """Open item index -> its close's index; the rest of the tags are points. A close
    pops the nearest open of its name; the opens it passes stay unmatched. Linear: each
    name keeps its opens (stack depth, index); one a close already passed is dropped when
    met, instead of scanning the whole stack at every close (50,000 nested tags)."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    by_name: dict[str, list[tuple[int, int]]] = {}
    for k, it in enumerate(items):
        if it.kind == "open":
            by_name.setdefault(it.tag, []).append((len(stack), k))
            stack.append(k)
        elif it.kind == "close":
            opens = by_name.get(it.tag, [])
            while opens and (opens[-1][0] >= len(stack) or stack[opens[-1][0]] != opens[-1][1]):
                opens.pop()  # passed by an earlier close
            if opens:
                at, o = opens.pop()
                pairs[o] = k
                del stack[at:]
    return pairs


def units(text: str, spans: list[tuple[int, int]], ranges: list[tuple[int, int]]) -> list[list[int]]:
    """Translation units: the sentences (what is between them, the segmenter's gaps, is kept
    as it is: spaces, list markers, symbols), joined where an element starts or ends inside
    one sentence and reaches out of it (into another, or into a gap: then the unit takes in
    the element's whole text, so that its tags still nest). ``ranges`` (the elements' text)
    nest or are disjoint, as elements do. One sweep in order of start, each unit joined at
    most once: 10,000 spans each across a sentence boundary are one unit, found in linear
    time, not by a pass per join."""
    sentences = [u for u in (strip_span(text, s, e) for s, e in spans) if u[0] < u[1]]
    out: list[list[int]] = []
    waiting: list[tuple[int, int]] = []  # (end, start) of elements begun in a gap: a heap
    for start, kind, end in sorted([(s, 0, e) for s, e in sentences] + [(a, 1, b) for a, b in ranges]):
        if out and out[-1][0] <= start and end <= out[-1][1]:
            continue  # inside the last unit (a sentence in it: one an element ran over)
        if kind == 0 and out and start < out[-1][1]:
            _grow(out, waiting, end)
        elif kind == 0:
            while waiting and waiting[0][0] <= start:
                heappop(waiting)  # ended in a gap: around whole units, or around none
            out.append([start, end])
            _grow(out, waiting, end)
        elif out and out[-1][0] < start < out[-1][1]:
            _grow(out, waiting, end)  # begins inside the last unit, ends after it
        else:
            heappush(waiting, (end, start))
    return out


def _grow(out: list[list[int]], waiting: list[tuple[int, int]], end: int) -> None:
    """The last unit reaches to ``end``; an element begun before it (in a gap, or at its
    start) that ends inside it joins it with the units in between, from the element's start."""
    out[-1][1] = max(out[-1][1], end)
    lo = None
    while waiting and waiting[0][0] < out[-1][1]:
        a = heappop(waiting)[1]
        lo = a if lo is None else min(lo, a)
    if lo is not None:
        stop = out[-1][1]
        while out and out[-1][1] > lo:
            lo = min(lo, out.pop()[0])
        out.append([lo, stop])


_REFERENCE = re.compile(r"&(?:#[0-9]+|#[xX][0-9A-Fa-f]+|[A-Za-z][A-Za-z0-9]*);")


def _spelled(items) -> dict[int, str]:
    """Characters the run's text always wrote as one reference (``&eacute;``, ``&nbsp;``,
    ``&#228;``) -> that spelling, for :meth:`str.translate`: the output writes them the same
    way (a page kept in ASCII stays so). Not ``&``, ``<``, ``>`` (always escaped) nor ASCII
    letters or digits."""
    spellings: dict[str, set[str]] = {}
    literal: set[str] = set()
    for it in items:
        if it.kind == "text" and "&" in it.raw:
            for m in _REFERENCE.finditer(it.raw):
                spellings.setdefault(html.unescape(m.group()), set()).add(m.group())
            literal.update(_REFERENCE.sub("", it.raw))
        elif it.kind == "text":
            literal.update(it.raw)
    return {ord(ch): next(iter(ways)) for ch, ways in spellings.items()
            if len(ch) == 1 and len(ways) == 1 and ch not in literal and ch not in "&<>"
            and not (ch.isascii() and ch.isalnum())}


class Run:
    """A run planned: ``sentences`` to translate, then :meth:`render` with their translations."""

    def __init__(self, items, split):
        self.items = items
        self.pairs = match(items)
        self.pos, parts, at = [], [], 0
        for it in items:
            self.pos.append(at)
            if it.kind == "text":
                parts.append(it.text)
                at += len(it.text)
        self.text = "".join(parts)
        ranges = {o: strip_span(self.text, self.pos[o], self.pos[c]) for o, c in self.pairs.items()}
        self.units = units(self.text, split(self.text), [r for r in ranges.values() if r[0] < r[1]])
        self._starts = [u[0] for u in self.units]
        self.sentences = [self.text[s:e] for s, e in self.units]
        self.atoms = self._atoms(ranges)
        self.spelled = _spelled(items)

    def _unit_of(self, a: int, b: int) -> int | None:
        k = bisect_right(self._starts, a) - 1
        return k if k >= 0 and b <= self.units[k][1] else None

    def _atoms(self, ranges) -> list[list]:
        """``[unit | None, item index, chunk]`` in page order: text cut at unit edges."""
        atoms: list[list] = []
        edges = sorted(x for u in self.units for x in u)
        for k, it in enumerate(self.items):
            if it.kind != "text":
                a, b = ranges.get(k, (0, 0))
                unit = self._unit_of(a, b) if k in self.pairs and a < b else None
                around = unit is not None and [a, b] == list(self.units[unit])
                atoms.append([None if around else unit, k, None])  # around a unit: kept there
                continue
            lo, hi = self.pos[k], self.pos[k] + len(it.text)
            cuts = [lo, *edges[bisect_right(edges, lo):bisect_left(edges, hi)], hi]
            for x, y in zip(cuts, cuts[1:]):
                if x < y:
                    atoms.append([self._unit_of(x, y), k, (x, y)])
        by_item = {a[1]: a for a in atoms if a[2] is None}
        for o, c in self.pairs.items():  # a close goes with its open
            by_item[c][0] = by_item[o][0]
        span: dict[int, list[int]] = {}
        for i, a in enumerate(atoms):
            if a[0] is not None:
                span.setdefault(a[0], [i, i])[1] = i
        for u, (first, last) in span.items():  # points among a unit's items belong to it
            for a in atoms[first:last + 1]:
                a[0] = u
        return atoms

    def render(self, translations: list[Aligned]) -> str:
        """The run as HTML: tags from their raw bytes, text escaped once."""
        out = "".join(self.items[t].raw if isinstance(t, int)
                      else html.escape(t, quote=False).translate(self.spelled) if isinstance(t, Kept)
                      else escape_output(t).translate(self.spelled) for t in self.events(translations))
        return out

    def events(self, translations: list[Aligned]) -> list:
        """The run rebuilt as tokens in output order: an item's index (a tag, or a text item
        kept whole), :class:`Kept` source text, or ``str`` translated text."""
        out: list = []
        done = set()
        self._members: dict[int, list[int]] = {}
        stray: dict[int, list[tuple[int, int]]] = {}  # text between units, among a unit's tags
        for unit, k, chunk in self.atoms:
            if unit is not None:
                self._members.setdefault(unit, []).append(k)
                if chunk and not self.units[unit][0] <= chunk[0] < self.units[unit][1]:
                    stray.setdefault(unit, []).append(chunk)
        for unit, k, chunk in self.atoms:
            it = self.items[k]
            if unit is None:
                whole = chunk is None or chunk == (self.pos[k], self.pos[k] + len(it.text))
                out.append(k if whole else Kept(self.text[chunk[0]:chunk[1]]))
            elif unit not in done:  # stray text kept, before or after the unit's translation
                done.add(unit)
                s, e = self.units[unit]
                edges = ("".join(self.text[x:y] for x, y in stray.get(unit, []) if y <= s),
                         "".join(self.text[x:y] for x, y in stray.get(unit, []) if x >= e))
                self._render_unit(unit, translations[unit], edges, out)
                out.append(self._space(unit, translations))
        return [t for t in out if t != ""]

    def _space(self, unit: int, translations: list[Aligned]) -> str:
        """After a unit that its next one touches (no gap): ``segment.spacer``'s space."""
        if unit + 1 == len(self.units) or self.units[unit][1] != self.units[unit + 1][0]:
            return ""
        (a, b), (_, c) = self.units[unit], self.units[unit + 1]
        return spacer(self.text[a:b], self.text[b:c], translations[unit].text,
                      translations[unit + 1].text)

    def _glue(self, x: int) -> str:
        """How a point at ``x`` sits between words: ``Hund<br> Katze`` is "left", ``Run
        <code>ls</code> now`` "free", ``a<br>b`` and ``Hund <br>Katze`` "" (the next word)."""
        before = x == 0 or self.text[x - 1].isspace()
        after = x == len(self.text) or self.text[x].isspace()
        return "free" if before and after else "left" if after else ""

    def _render_unit(self, unit: int, al: Aligned, stray: tuple[str, str], out: list) -> None:
        """The unit's translation with its elements placed; ``stray``, the source text just
        before and after the unit among its elements (spaces at an element's edge, which
        stay inside the element where they were: :func:`_settle`), around it."""
        s, e = self.units[unit]
        text, shift = stray[0] + al.text + stray[1], len(stray[0])
        root = _Node(start=0, end=len(text))
        stack, members = [root], set(self._members[unit])
        closing: list[int] = []  # the close item of each open node on the stack
        for k in sorted(members):
            it = self.items[k]
            if k in self.pairs and self.pairs[k] in members:
                a, b = strip_span(self.text, self.pos[k], self.pos[self.pairs[k]])
                got = project_range(al, a - s, b - s)
                got = got and _outside(self.text, (s, e), (a, b), text, (got[0] + shift, got[1] + shift))
                at = project_point(al, a - s, e - s) + shift
                node = _Node(k, self.pairs[k], *(got or (at, at)))
                node.edges = (self.text[self.pos[k]:a], self.text[b:self.pos[self.pairs[k]]])
                stack[-1].children.append(node)
                stack.append(node)
                closing.append(self.pairs[k])
            elif closing and k == closing[-1]:
                stack.pop()
                closing.pop()
            elif it.kind != "text":
                x = min(max(self.pos[k] - s, 0), e - s)
                stack[-1].children.append(_Node(k, start=project_point(al, x, e - s) + shift,
                                                point=True, glue=self._glue(s + x)))
        _emit(text, root.children, 0, len(text), out)


# The model's own output may hold character references: its training text does ("&amp;" is
# in Multi30k's English side). Those are kept as they are, so "&amp;" is not escaped again.
_BARE_AMP = re.compile(r"&(?!(?:[A-Za-z][A-Za-z0-9]*|#[0-9]+|#[xX][0-9A-Fa-f]+);)")


def escape_output(text: str) -> str:
    """A translation as HTML text: ``<`` and ``>`` escaped, ``&`` unless it starts a
    character reference."""
    return _BARE_AMP.sub("&amp;", text).replace("<", "&lt;").replace(">", "&gt;")


def _settle(text: str, kids: list[_Node]) -> list[_Node]:
    """Siblings in target order, their ranges made disjoint: where two overlap the narrower
    keeps its words and the wider keeps the longest stretch left to it, so that an element
    stretched over a whole sentence by one stray word does not swallow the words of a
    sibling inside that stretch (a plain Word run around a bold one)."""
    taken: list[tuple[int, int]] = []
    for n in sorted((n for n in kids if not n.point and n.start < n.end),
                    key=lambda n: (n.end - n.start, n.start)):
        free = [(n.start, n.end)]
        for a, b in taken:
            free = [p for x, y in free for p in ((x, min(y, a)), (max(x, b), y)) if p[0] < p[1]]
        free = [strip_span(text, x, y) for x, y in free]
        x, y = max(free, key=lambda p: p[1] - p[0], default=(n.start, n.start))
        n.start, n.end = (x, y) if x < y else (n.start, n.start)
        taken.append((n.start, n.end))
    for n in kids:
        _widen(text, n)
    return sorted(kids, key=lambda n: _glued(text, n.start, n.glue, 0))  # stable: ties in source order


def _widen(text: str, n: _Node) -> None:
    """An element takes back the spaces it held at its edges (``<b>Hund </b>``,
    ``&nbsp;``), where the target has those same characters beside its words."""
    lead, trail = n.edges if not n.point and n.start < n.end else ("", "")
    for ch in reversed(lead):
        if n.start == 0 or text[n.start - 1] != ch:
            break
        n.start -= 1
    for ch in trail:
        if n.end == len(text) or text[n.end] != ch:
            break
        n.end += 1


def _glued(text: str, start: int, glue: str, lo: int) -> int:
    """Where a point goes (not before ``lo``): back to the end of the word before when it
    was glued to it, and one space on when it stood "free" between words."""
    if not glue:
        return start
    back = start
    while back > lo and text[back - 1].isspace():
        back -= 1
    return back + (glue == "free" and back < start)


def _mark(ch: str) -> bool:
    return not ch.isalnum() and not ch.isspace()


def _outside(source: str, unit: tuple[int, int], words: tuple[int, int], target: str,
             got: tuple[int, int]) -> tuple[int, int]:
    """``got``, the target words of an element whose words are ``source[a:b]`` (in the
    sentence ``unit``), cut where the element's edge cut a word from its punctuation in
    the source: ``<a>Park</a>.`` keeps the full stop out of the link and ``Park<b>.</b>``
    keeps the word out of the bold, whether a target word carried both or the model
    aligned them together (an alignment's words are whole: ``alignment.snap``)."""
    (s, e), (a, b), (x, y) = unit, words, got
    if b < e and _mark(source[b - 1]) != _mark(source[b]) and not source[b].isspace():
        keep = _mark(source[b - 1])
        while y > x and not target[y - 1].isspace() and _mark(target[y - 1]) != keep:
            y -= 1
    if a > s and _mark(source[a - 1]) != _mark(source[a]) and not source[a - 1].isspace():
        keep = _mark(source[a])
        while x < y and not target[x].isspace() and _mark(target[x]) != keep:
            x += 1
    return (x, y) if x < y else got


def _emit(text: str, children: list[_Node], lo: int, hi: int, out: list) -> None:
    """``text[lo:hi]`` with ``children`` placed in target order, each inside its parent and
    after its earlier siblings (:func:`_settle`), as :meth:`Run.events` tokens. A loop with
    its own stack, not recursion: nesting as deep as a page has is fine."""
    frames = [[_settle(text, children), 0, lo, hi, -1]]  # kids, next, cursor, end, close
    while frames:
        frame = frames[-1]
        kids, k, cursor, end, close = frame
        if k == len(kids):
            out += [text[cursor:end], close] if close >= 0 else [text[cursor:end]]
            frames.pop()
            continue
        c = kids[k]
        frame[1] += 1
        start = _glued(text, min(max(c.start, cursor), end), c.glue, cursor)
        out += [text[cursor:start], c.open]
        if c.point:
            if c.glue == "free" and start < end and not text[start].isspace():
                out.append(" ")
            frame[2] = start
            continue
        stop = min(max(c.end, start), end)
        frame[2] = stop
        frames.append([_settle(text, c.children), 0, start, stop, c.close])


def sentence_splitter(lang: str | None = None):
    """``text -> sentence spans`` in ``lang`` (the one segmenter every entry point uses)."""
    from seq2seq.translation.segment import sentence_spans

    return lambda text: sentence_spans(text, lang)
