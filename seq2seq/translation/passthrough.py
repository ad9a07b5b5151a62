"""What in a text is not language: kept verbatim in the translation, never sent to a model.

A one-sentence model given a list marker, a bare number or an emoji makes words up around
it (the shipped De->En model: ``1.`` gives ``1 1 1 1.``, ``♪`` "Hemble at night"), and a URL
comes back respelled. ``segment`` asks this module where its sentences are not
language, so those spans stay in the gaps between the sentences that go to the model:

- anywhere in a line: URLs, e-mail addresses, and runs of 64 or more ASCII characters
  without a space (hashes, base64, a path: no word is that long); the line is cut around
  them before it is cut into sentences;
- at a sentence's start: list markers and numbering followed by a space (``1.``, ``2)``,
  ``1.2.``, ``a)``, ``(iv)``, never ``M.`` or ``A.``: a title, an initial; any run without a
  letter or digit: ``-``, ``*``, ``•``, ``–``, ``...``);
- at either end: symbols and emoji (``😀``, ``♪``, ``→``, ``%``, ``€``), bullets and dashes;
- a whole sentence with no letter left (``2024``, ``3.50``, ``12 %``, ``...``), or only a
  number and a unit symbol (``5 km``, ``20 °C``).

Numbers inside a sentence stay in it: the model needs them to translate the words around
them (``result.missing_numbers`` checks that they come back).
"""

from __future__ import annotations

import re
import unicodedata

_LINK = re.compile(
    r"(?:\b(?:https?|ftp)://|\bwww\.)[^\s<>\"]+"  # a URL
    r"|[\w.+-]+@[\w-]+(?:\.[\w-]+)+"  # an e-mail address
    r"|[A-Za-z0-9_+/=.:~%#&?@-]{64,}")  # no word is this long: a hash, base64, a path
_AFTER_LINK = ".,;:!?'\"»«”’›)]}"  # punctuation after a URL belongs to the sentence
_MARKER = re.compile(
    r"(?:\(?(?:\d{1,3}(?:\.\d{1,3})*|[ivx]{2,4}|[IVX]{2,4})[.)]"  # 1. 1.2. 2) (3) iv.
    r"|\(?[A-Za-z]\)"  # a) (b), not "M." (Monsieur) nor "A." (an initial)
    r"|[^\w\s]+)"  # - * • – ... « 😀
    r"(?=\s|$)")
_BULLETS = frozenset("-–—•·*‣◦⁃▪●○■□►▶➢✓✔✗")
_UNIT = re.compile(
    r"[-+±~≈]?\d[\d.,'’\u00a0\u202f ]*\s?"
    r"(?:[kMGTmµnc]?(?:m|g|s|l|Hz|B|W|V|A|Pa|J)|[km]?m[²³]|km/h|m/s|min|h|°[CF]?|K|dB|bar"
    r"|kWh|px|pt|EUR|USD|GBP|CHF|JPY)[.,;:!?]?")


def links(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """Spans of the URLs, e-mail addresses and long ASCII runs in ``text[start:end]``,
    without the punctuation that follows them (a ``)`` only when the URL opened none)."""
    out = []
    for m in _LINK.finditer(text, start, end):
        a, b = m.span()
        while b > a and text[b - 1] in _AFTER_LINK:
            if text[b - 1] == ")" and text.count("(", a, b) >= text.count(")", a, b):
                break  # Wikipedia's /Foo_(Bar): the bracket is the URL's
            b -= 1
        if a < b:
            out.append((a, b))
    return out


_CLOSERS = "\"')]}»”’›"
_FINAL = ".!?…。！？"


def joins(text: str, end: int, start: int) -> bool:
    """Whether the sentences ending at ``end`` and starting at ``start`` are one sentence
    with links between them (``Siehe https://x.org für mehr.``): only links and spaces
    between, and the first one not ended (no full stop, question or exclamation mark)."""
    last = text[:end].rstrip(_CLOSERS)
    if not last or last[-1] in _FINAL:
        return False
    pos, found = end, False
    for a, b in links(text, end, start):
        if text[pos:a].strip():
            return False
        pos, found = b, True
    return found and not text[pos:start].strip()


def holes(text: str) -> tuple[str, list[tuple[int, str]]]:
    """``text`` without the links inside it (words before and after each), for a model,
    and each link with where it stood in that text: ``("Siehe für mehr.", [(5, " https://x.org")])``.
    A link at either end is kept (a sentence never starts or ends with one)."""
    kept, out, pos = [], [], 0
    for a, b in links(text, 0, len(text)):
        if not text[:a].strip() or not text[b:].strip():
            continue
        lead = len(text[pos:a]) - len(text[pos:a].rstrip())  # the spaces before the link go with it
        kept.append(text[pos:a - lead])
        out.append((sum(map(len, kept)), text[a - lead:b]))
        pos = b
    return "".join(kept) + text[pos:], out


def _edge(c: str) -> bool:
    """A character kept at a sentence's ends: a symbol or emoji (Unicode S*), a bullet, a
    dash, or a mark that joins or modifies them (ZWJ, variation selectors, keycaps)."""
    return c in _BULLETS or unicodedata.category(c) in ("Sm", "Sc", "Sk", "So", "Cf", "Me") \
        or 0xFE00 <= ord(c) <= 0xFE0F


def _peel(text: str, start: int, end: int) -> tuple[int, int]:
    """``(start, end)`` without its leading marker and the symbols and spaces at its ends."""
    while True:
        was = (start, end)
        m = _MARKER.match(text, start, end)
        if m:
            start = m.end()
        while start < end and (text[start].isspace() or _edge(text[start])):
            start += 1
        cut = end
        while cut > start and (text[cut - 1].isspace() or _edge(text[cut - 1])):
            cut -= 1
        while cut < end and unicodedata.category(text[cut])[0] == "M":
            cut += 1  # a combining mark stays on the letter before it
        end = cut
        if (start, end) == was:
            return start, end


def language(text: str, start: int, end: int) -> tuple[int, int] | None:
    """The part of the sentence ``text[start:end]`` to translate, without its list marker
    and the symbols at its ends; ``None`` when nothing in it is language (no letter left,
    or a number and a unit)."""
    start, end = _peel(text, start, end)
    piece = text[start:end]
    if not any(c.isalpha() for c in piece) or _UNIT.fullmatch(piece):
        return None
    return start, end
