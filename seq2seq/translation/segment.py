"""Sentences of a text, as character spans, and the text between them.

- Every line break is a hard boundary; within a line, ``sentencex`` (chosen by measurement,
  docs/translation.md) finds the sentence ends for the language, then three corrections: a
  "sentence" starting with a lowercase letter continues the previous one only after what
  may be an abbreviation or a date (``3. října``, ``ca.``; in a long sentence only a known
  abbreviation), so ``… wiese. ein hund …`` is two; one ending in a single letter and a
  full stop is an initial or French ``M.``, not an end; a full stop after a word that is no
  abbreviation (Moses' lists, as ``sentence-splitter`` ships them) ends a sentence before
  a number or a lowercase word (sentencex's German and Czech rules never end one there).
- What is not language (``passthrough``: list markers, numbers alone, symbols, URLs)
  is left out of the sentences, so it stays in the gaps, verbatim; for texts, a link in
  mid-sentence (words on both sides, the words before it not ended) stays in its sentence,
  and the ``Translator`` cuts it out for the model and puts it back by the alignment.
- Spans never include the whitespace around a sentence: :func:`split_text` keeps it in the
  gaps, so ``Segments.join`` of the translations puts spaces, line breaks and blank lines
  back where they were, and ``join`` of the sentences themselves is the input, exactly.
  Two sentences with no gap in a script written without spaces (``我爱你。你好！``) get a
  space between their translations when those are in a script written with spaces.
- A sentence longer than a model takes is cut further at clause boundaries (``;``, ``,``,
  dashes) by :func:`fit_clauses`, a clause still too long at words by :func:`cut_words`.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources

import sentencex

from seq2seq.translation import passthrough

_INITIAL = re.compile(r"(?:^|\s)[^\W\d_]\.$")  # "M." / "J." at a piece's end: not a sentence end
# a full stop after a word, then a number or a lowercase word: "… Landschaft. 2 Mädchen …",
# "… wiese. ein hund …" (sentencex never ends a German or Czech sentence there, for dates;
# the word tells a date or an abbreviation from an end)
_STOP_BEFORE = re.compile(r"[.!?]\s+(?=\d)|\.\s+(?=[^\W\d_])")
# characters of a sentence after which a short lowercase word before a full stop ("gut.")
# is no longer taken for an abbreviation: lowercase text must not run into one "sentence"
LONG = 100
_LAST_WORD = re.compile(r"[^\W\d_]+$")
_CLAUSE_END = re.compile(r"[;,，；、](?=\s)|\s[-–—]\s")  # after ; or , / a spaced dash


def strip_span(text: str, start: int, end: int) -> tuple[int, int]:
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


def _continues(text: str, previous: tuple[int, int], nxt: tuple[int, int], lang: str) -> bool:
    """Whether the library's boundary between two pieces is a false one (see the module)."""
    if _INITIAL.search(text[previous[0]:previous[1]]):
        return True
    stop = previous[1] - 1  # "?", "!", a quote: the library's call stands, as it always did
    return text[nxt[0]].islower() and (text[stop] != "." or not _ends(text, previous[0], stop, lang))


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


def _ends(text: str, start: int, stop: int, lang: str) -> bool:
    """Whether the stop at ``stop`` (before a number or a lowercase word) ends the sentence
    begun at ``start``: after a word that is no abbreviation of the language (nor looks like
    one: a single letter, or, in a sentence under ``LONG``, four lowercase letters at most,
    as ``geb.``, ``inkl.``), never after a number or a symbol (``1. 1. 1990``, ``3. října``)."""
    before = _LAST_WORD.search(text, max(start, stop - 64), stop)
    if before is None:
        return False
    word = before.group()
    short = len(word) < 2 or (len(word) <= 4 and word.islower() and stop - start < LONG)
    return text[stop] != "." or not (short or word in _prefixes(lang))


def _cuts(text: str, span: tuple[int, int], lang: str) -> list[tuple[int, int]]:
    """``span`` cut where a sentence ends before a number or a lowercase word (``_ends``)."""
    out, start = [], span[0]
    for match in _STOP_BEFORE.finditer(text, span[0], span[1]):
        after = text[match.end()]
        if (after.isdigit() or after.islower()) and _ends(text, start, match.start(), lang):
            out.append((start, match.start() + 1))
            start = match.end()
    return [*out, (start, span[1])]


def _line_sentences(text: str, start: int, end: int, lang: str) -> list[tuple[int, int]]:
    try:  # sentencex encodes to UTF-8 inside: a lone surrogate cannot be, so no cut there
        pieces = list(sentencex.segment(lang, text[start:end]))
    except UnicodeEncodeError:
        return [strip_span(text, start, end)]
    spans, pos = [], start
    for piece in pieces:
        if text[pos:pos + len(piece)] != piece:  # never trust offsets we cannot check
            return [strip_span(text, start, end)]
        span = strip_span(text, pos, pos + len(piece))
        pos += len(piece)
        if span[0] == span[1]:
            continue
        if spans and _continues(text, spans[-1], span, lang):
            spans[-1] = (spans[-1][0], span[1])
        else:
            spans.append(span)
    return [cut for span in spans for cut in _cuts(text, span, lang)]


def _between_links(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """``[start, end)`` without its URLs and e-mail addresses (``passthrough.links``)."""
    out = []
    for a, b in passthrough.links(text, start, end):
        out.append((start, a))
        start = b
    return [*out, (start, end)]


def sentence_spans(text: str, lang: str | None = None,
                   links_inside: bool = False) -> list[tuple[int, int]]:
    """``(start, end)`` character offsets of the sentences of ``text`` in ``lang`` (an ISO
    639-1 code; ``None`` for English rules), in order, never overlapping, without the
    whitespace around them and without what is not language (``passthrough``); a line
    break always ends a sentence; blank lines hold none. ``links_inside``: a link in
    mid-sentence stays in its sentence (``passthrough.joins``) for a translator that cuts
    it out and puts it back (``Translator``); else it cuts the sentence (documents, whose
    markup follows the words by the alignment of the words as they were cut)."""
    spans: list[tuple[int, int]] = []
    for line in _line_spans(text):
        for start, end in _between_links(text, *line):
            start, end = strip_span(text, start, end)
            for span in _line_sentences(text, start, end, lang or "en") if start < end else []:
                kept = passthrough.language(text, *span)
                if kept and links_inside and spans and passthrough.joins(text, spans[-1][1], kept[0]):
                    spans[-1] = (spans[-1][0], kept[1])  # a link in mid-sentence: one sentence
                elif kept:
                    spans.append(kept)
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
        for i, (sentence, gap) in enumerate(zip(sentences, self.gaps[1:])):
            if i and not self.gaps[i]:
                parts.append(spacer(self.sentences[i - 1], self.sentences[i], sentences[i - 1], sentence))
            parts += [sentence, gap]
        return "".join(parts)


def _unspaced(c: str) -> bool:
    """A character of a script written without spaces between sentences (Chinese, Japanese;
    their full-width punctuation)."""
    return unicodedata.east_asian_width(c) in ("W", "F")


def spacer(left: str, right: str, left_out: str, right_out: str) -> str:
    """What goes between the translations ``left_out`` and ``right_out`` of two sentences
    with no gap in the source: a space when the source's script is written without spaces
    and the translations' script with them (``我爱你。你好！`` -> ``I love you. Hello!``),
    else nothing (the identity gives the source back)."""
    if not (left and right and left_out and right_out):
        return ""
    if not (_unspaced(left[-1]) or _unspaced(right[0])):
        return ""
    ends = (left_out[-1], right_out[0])
    return "" if any(_unspaced(c) or c.isspace() for c in ends) else " "


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
    """Spans of the clauses of one sentence: cut after ``;``/``,`` and at spaced dashes,
    without what is not language at their ends (``passthrough``: the dash itself)."""
    spans, start = [], 0
    for match in _CLAUSE_END.finditer(sentence):
        cut = match.end() if match.group()[0] in ";,，；、" else match.start()
        spans.append(passthrough.language(sentence, start, cut))
        start = cut
    spans.append(passthrough.language(sentence, start, len(sentence)))
    return [s for s in spans if s is not None]


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


def cut_words(piece: str, length: Callable[[str], int], limit: int) -> list[tuple[int, int]]:
    """Spans of ``piece`` (a clause over ``limit``) cut between words into as few runs as
    stay within ``limit``; a word over ``limit`` alone is cut between characters (a run
    left without a letter is kept, ``passthrough``). The hard cap on what one model
    call gets: a 20,000-character word, whole, keeps a model busy for minutes."""
    pieces: list[tuple[int, int]] = []
    for word in re.finditer(r"\S+", piece):
        start, end = word.span()
        if pieces and length(piece[pieces[-1][0]:end]) <= limit:
            pieces[-1] = (pieces[-1][0], end)
        elif length(piece[start:end]) <= limit:
            pieces.append((start, end))
        else:
            pieces += _cut_characters(piece, start, end, length, limit)
    kept = [passthrough.language(piece, a, b) for a, b in pieces]
    return [span for span in kept if span is not None]


def _cut_characters(text: str, start: int, end: int, length: Callable[[str], int],
                    limit: int) -> list[tuple[int, int]]:
    """``[start, end)`` (one word) cut into the longest runs within ``limit`` (at least a
    character each), found by bisection within 16 characters a token (SentencePiece's
    longest piece by default)."""
    out = []
    while start < end:
        lo, hi = start + 1, min(end, start + 16 * limit)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if length(text[start:mid]) <= limit else (lo, mid - 1)
        out.append((start, lo))
        start = lo
    return out
