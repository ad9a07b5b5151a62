"""Plain text and subtitles, translated with their structure kept (documents with runs of
formatting: :mod:`seq2seq.documents.runs`).

Each format gathers every sentence of the document first and makes one ``translate`` call
(one batch), then writes the translations back where the sentences were:

- ``.txt``: line by line (one output line per input line, blank lines kept), each line cut
  into sentences, the spaces between them kept.
- ``.srt`` (the ``srt`` package): numbering and timing kept; a subtitle's lines are one text
  (a sentence may run over a line break), its translation wrapped back onto as many lines;
  tags around a whole subtitle (``<i>...</i>``) stay around it.
"""

from __future__ import annotations

import codecs
import re

from seq2seq.documents.align import Aligned, SentenceTranslator
from seq2seq.documents.inline import Splitter, units
from seq2seq.documents.package import DocumentError
from seq2seq.fields import FieldError
from seq2seq.translation.segment import spacer


class OptionError(DocumentError, FieldError):
    """A document's input or output refused, naming the option (``{output}``)."""


def plan_texts(texts: list[str], split: Splitter) -> list[list[tuple[int, int]]]:
    """The sentence units of each text (what is not language left between them)."""
    return [units(t, split(t), []) if t.strip() else [] for t in texts]


def _translate_units(texts, plans, translate: SentenceTranslator) -> list[list[Aligned]]:
    sentences = [t[s:e] for t, plan in zip(texts, plans) for s, e in plan]
    done = iter(translate(sentences) if sentences else [])
    return [[next(done) for _ in plan] for plan in plans]


def joined(text: str, plan: list[tuple[int, int]], done: list[Aligned]) -> str:
    """``text`` with its units ``plan`` replaced by their translations ``done``, the text
    between them kept (between two that touch, ``spacer``'s space)."""
    parts, cursor = [], 0
    for k, ((s, e), al) in enumerate(zip(plan, done)):
        touch = k and s == cursor  # no gap: a space between them, maybe (spacer)
        parts += [spacer(text[plan[k - 1][0]:s], text[s:e], parts[-1], al.text) if touch
                  else text[cursor:s], al.text]
        cursor = e
    return "".join(parts) + text[cursor:]


def translate_texts(texts: list[str], translate: SentenceTranslator, split: Splitter) -> list[str]:
    """Each text with its sentences translated and the text between them kept."""
    plans = plan_texts(texts, split)
    return [joined(text, plan, done)
            for text, plan, done in zip(texts, plans, _translate_units(texts, plans, translate))]


def decode_text(data: bytes, name: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise DocumentError(f"{name}: not UTF-8 text (byte {e.start}: {data[e.start]:#04x})") from None


def encode_like(data: bytes, text: str) -> bytes:
    """``text`` as UTF-8, with the byte order mark ``data`` started with (kept as found)."""
    return (codecs.BOM_UTF8 if data.startswith(codecs.BOM_UTF8) else b"") + text.encode()


def translate_txt(data: bytes, name: str, translate: SentenceTranslator, split: Splitter) -> bytes:
    lines = decode_text(data, name).split("\n")
    return encode_like(data, "\n".join(translate_texts(lines, translate, split)))


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


def rewrap(source: str, done: str) -> str:
    """A subtitle's translation on as many lines as ``source``: broken where ``source`` is
    when it has the same words (a name, a number, what the model copied), else by :func:`wrap`."""
    lines = source.split("\n")
    if [w.casefold() for w in done.split()] != [w.casefold() for w in source.split()]:
        return wrap(done, len(lines))
    words, out = iter(done.split()), []
    for line in lines:
        out.append(" ".join(next(words) for _ in line.split()))
    return "\n".join(out)


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
    for sub, m, source, done in zip(subs, wrapped, inner, translate_texts(joined, translate, split)):
        text = rewrap(source, done)
        sub.content = m[0] + text + m[2] if m else text
    return encode_like(data, srt.compose(subs, reindex=False))
