"""Sentences of a text, as character spans, and the text between them.

- Every line break is a hard boundary; within a line, ``sentencex`` (chosen by measurement,
  docs/translation.md) finds the sentence ends for the language, then three corrections: a
  "sentence" starting with a lowercase letter continues the previous one (Czech dates,
  ``3. října``); one ending in a single letter and a full stop is an initial or French
  ``M.``, not an end; a full stop after a word that is no abbreviation (Moses' lists, as
  ``sentence-splitter`` ships them) ends a sentence even before a number (German and Czech
  rules in sentencex never end one there).
- Spans never include the whitespace around a sentence: :func:`split_text` keeps it in the
  gaps, so ``Segments.join`` of the translations puts spaces, line breaks and blank lines
  back where they were, and ``join`` of the sentences themselves is the input, exactly.
- A sentence longer than a model takes is cut further at clause boundaries (``;``, ``,``,
  dashes) by :func:`fit_clauses`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources

import sentencex

_INITIAL = re.compile(r"(?:^|\s)[^\W\d_]\.$")  # "M." / "J." at a piece's end: not a sentence end
# a full stop after a word, then a number: "… Landschaft. 2 Mädchen …" (sentencex never ends
# a German or Czech sentence before a digit, for dates; the word tells a date from an end)
_BEFORE_DIGIT = re.compile(r"[.!?]\s+(?=\d)")
_LAST_WORD = re.compile(r"[^\W\d_]+$")
_CLAUSE_END = re.compile(r"[;,，；、](?=\s)|\s[-–—]\s")  # after ; or , / a spaced dash


def has_words(text: str) -> bool:
    """Whether a text has anything to translate (a letter or digit): emoji, punctuation and
    symbols alone are passed through as they are."""
    return any(c.isalnum() for c in text)


def _strip(text: str, start: int, end: int) -> tuple[int, int]:
    """``(start, end)`` narrowed to exclude surrounding whitespace."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _line_spans(text: str) -> list[tuple[int, int]]:
    """Spans of the lines of ``text`` without their line breaks (``str.splitlines``' breaks)."""
    spans, start = [], 0
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n\v\f\x1c\x1d\x1e\x85\u2028\u2029")
        spans.append((start, start + len(body)))
        start += len(line)
    return spans


def _continues(text: str, previous: tuple[int, int], nxt: tuple[int, int]) -> bool:
    """Whether the library's boundary between two pieces is a false one (see the module)."""
    return text[nxt[0]].islower() or bool(_INITIAL.search(text[previous[0]:previous[1]]))


@cache
def _prefixes(lang: str) -> frozenset[str]:
    """Moses' non-breaking prefixes of ``lang`` (``Nr``, ``ca``; as ``sentence-splitter``
    ships them); none for a language it has no list for."""
    try:
        text = (resources.files("sentence_splitter") / "non_breaking_prefixes" / f"{lang}.txt")
        lines = text.read_text(encoding="utf-8").splitlines()
    except (FileNotFoundError, ModuleNotFoundError, OSError):
        return frozenset()
    return frozenset(line.split("#")[0].strip() for line in lines if line.split("#")[0].strip())


def _digit_cuts(text: str, span: tuple[int, int], lang: str) -> list[tuple[int, int]]:
    """``span`` cut where a sentence ends before a number (see ``_BEFORE_DIGIT``): after a
    word that is no abbreviation of the language (nor looks like one: a single letter, or
    four lowercase letters at most, as ``geb.``, ``inkl.``)."""
    out, start = [], span[0]
    for match in _BEFORE_DIGIT.finditer(text, span[0], span[1]):
        before = _LAST_WORD.search(text, max(start, match.start() - 64), match.start())
        if before is None:  # a number or a symbol before the stop: "1. 1. 1990"
            continue
        word = before.group()
        short = len(word) < 2 or (len(word) <= 4 and word.islower())
        if text[match.start()] == "." and (short or word in _prefixes(lang)):
            continue
        out.append((start, match.start() + 1))
        start = match.end()
    return [*out, (start, span[1])]


def _line_sentences(text: str, start: int, end: int, lang: str) -> list[tuple[int, int]]:
    try:  # sentencex encodes to UTF-8 inside: a lone surrogate cannot be, so no cut there
        pieces = list(sentencex.segment(lang, text[start:end]))
    except UnicodeEncodeError:
        return [_strip(text, start, end)]
    spans, pos = [], start
    for piece in pieces:
        if text[pos:pos + len(piece)] != piece:  # never trust offsets we cannot check
            return [_strip(text, start, end)]
        span = _strip(text, pos, pos + len(piece))
        pos += len(piece)
        if span[0] == span[1]:
            continue
        if spans and _continues(text, spans[-1], span):
            spans[-1] = (spans[-1][0], span[1])
        else:
            spans.append(span)
    return [cut for span in spans for cut in _digit_cuts(text, span, lang)]


def sentence_spans(text: str, lang: str | None = None) -> list[tuple[int, int]]:
    """``(start, end)`` character offsets of the sentences of ``text`` in ``lang`` (an ISO
    639-1 code; ``None`` for English rules), in order, never overlapping, without the
    whitespace around them; a line break always ends a sentence; blank lines hold none."""
    spans: list[tuple[int, int]] = []
    for start, end in _line_spans(text):
        start, end = _strip(text, start, end)
        if start < end:
            spans.extend(_line_sentences(text, start, end, lang or "en"))
    return spans


@dataclass(frozen=True)
class Segments:
    """A text as its sentences and the ``gaps`` around them (``len(sentences) + 1``: before
    the first, between each two, after the last)."""

    sentences: list[str]
    gaps: list[str]

    def join(self, sentences: Sequence[str]) -> str:
        """The text with ``sentences`` (e.g. translations, one per sentence) in place of its
        own, in its gaps."""
        if len(sentences) != len(self.sentences):
            raise ValueError(f"{len(sentences)} sentences for {len(self.sentences)} places")
        parts = [self.gaps[0]]
        for sentence, gap in zip(sentences, self.gaps[1:]):
            parts += [sentence, gap]
        return "".join(parts)


def from_spans(text: str, spans: Sequence[tuple[int, int]]) -> Segments:
    """``text`` cut at ``spans`` (in order, not overlapping) into sentences and gaps."""
    gaps, sentences, pos = [], [], 0
    for start, end in spans:
        gaps.append(text[pos:start])
        sentences.append(text[start:end])
        pos = end
    gaps.append(text[pos:])
    return Segments(sentences, gaps)


def split_text(text: str, lang: str | None = None) -> Segments:
    """``text`` as sentences and the whitespace, line breaks and blank lines between them."""
    return from_spans(text, sentence_spans(text, lang))


def clause_spans(sentence: str) -> list[tuple[int, int]]:
    """Spans of the clauses of one sentence: cut after ``;``/``,`` and at spaced dashes."""
    spans, start = [], 0
    for match in _CLAUSE_END.finditer(sentence):
        cut = match.end() if match.group()[0] in ";,，；、" else match.start()
        spans.append(_strip(sentence, start, cut))
        start = cut
    spans.append(_strip(sentence, start, len(sentence)))
    return [s for s in spans if s[0] < s[1]]


def fit_clauses(sentence: str, length: Callable[[str], int], limit: int) -> list[tuple[int, int]]:
    """Spans of consecutive clauses of ``sentence`` joined while ``length`` (e.g. subword
    tokens) stays within ``limit``: as few pieces as fit. A clause longer than ``limit`` on
    its own stays whole (the caller reports it)."""
    pieces: list[tuple[int, int]] = []
    for start, end in clause_spans(sentence):
        if pieces and length(sentence[pieces[-1][0]:end]) <= limit:
            pieces[-1] = (pieces[-1][0], end)
        else:
            pieces.append((start, end))
    return pieces
