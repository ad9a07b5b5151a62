"""Which target words came from which source words: the model's own cross-attention, read
as a word alignment so that markup (HTML tags, a document's formatting runs) can follow
the words it covered into the translation, and a link cut out of a sentence
can go back between the words it stood between.

The rule: for each target piece, the last decoder layer's cross-attention averaged over
its heads, argmax over the source pieces that are text (not the language tag, not
``</s>``). A source range ``[a, b)`` then covers the smallest range of whole target words
holding every target piece aligned into it. On the shipped De->En model, with one German
noun or colour word per test_2016 sentence in ``<b>`` (377 sentences whose translation has
its dictionary word), the bold landed on exactly that English word 335 times with the last
layer, 176 with the mean over all layers (whose bold spans grew), 164 with the
penultimate layer (``scripts/experiments/tag_alignment.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch loads only when a model runs
    from seq2seq.translation.result import TranslationResult

SPACE = "\u2581"  # SentencePiece's word-start mark


@dataclass
class Aligned:
    """One translated sentence and its alignment: ``links`` holds, per target piece,
    ``(tgt_start, tgt_end, src_start, src_end)`` character offsets into ``text`` and into
    the source sentence; ``flags``, what the translation was warned of ("unsure",
    "numbers", "cut", ...)."""

    text: str
    links: list[tuple[int, int, int, int]] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)  # the model's warnings (TranslationResult.flags)


def piece_spans(text: str, pieces: list[str]) -> list[tuple[int, int] | None]:
    """Character span of each piece in ``text``; ``None`` for pieces that are not text
    (``</s>``, a language tag, ``<unk>``) or that normalization changed beyond finding."""
    out: list[tuple[int, int] | None] = []
    at = 0
    for piece in pieces:
        word = piece.replace(SPACE, " ").strip()
        found = text.find(word, at) if word else -1
        if found < 0 or text[at:found].strip():  # not next in the text: not this text's piece
            out.append(None)
            continue
        out.append((found, found + len(word)))
        at = found + len(word)
    return out


def aligned(result: TranslationResult) -> Aligned:
    """A :class:`TranslationResult` translated with ``need_attention=True`` as an
    :class:`Aligned` (its flags kept); no links where there was nothing to translate."""
    flags = list(result.flags)
    if result.attention is None or not result.attention.decoder_cross:
        return Aligned(result.hyp, flags=flags)
    weights = result.attention.decoder_cross[-1][0].float().mean(0)  # (1, H, L, S) -> (L, S)
    src = piece_spans(result.src, result.src_pieces)
    tgt = piece_spans(result.hyp, result.tgt_pieces)
    text_cols = [j for j, s in enumerate(src) if s is not None and j < weights.shape[1]]
    if not text_cols:
        return Aligned(result.hyp, flags=flags)
    links = []
    for i, span in enumerate(tgt[: weights.shape[0]]):
        if span is None:
            continue
        j = text_cols[int(weights[i, text_cols].argmax())]
        links.append((*span, *src[j]))
    return Aligned(result.hyp, links, flags)


def snap(text: str, start: int, end: int) -> tuple[int, int]:
    """``[start, end)`` widened to whole words of ``text`` (a tag never cuts a word)."""
    while start > 0 and text[start - 1].isalnum() and text[start].isalnum():
        start -= 1
    while 0 < end < len(text) and text[end].isalnum() and text[end - 1].isalnum():
        end += 1
    return start, end


def project_range(al: Aligned, a: int, b: int) -> tuple[int, int] | None:
    """The whole target words aligned into source ``[a, b)``; ``None`` if none is."""
    hits = [(ts, te) for ts, te, ss, se in al.links if ss < b and se > a]
    if not hits:
        return None
    return snap(al.text, min(h[0] for h in hits), max(h[1] for h in hits))


def project_point(al: Aligned, x: int, source_len: int) -> int:
    """Where a point at source offset ``x`` (a ``<br>``, an image) goes: sentence start or
    end stay so; else before the first target word aligned at or after ``x``."""
    if x <= 0:
        return 0
    after = [ts for ts, _, ss, _ in al.links if ss >= x]
    if x >= source_len or not after:
        return len(al.text)
    return snap(al.text, min(after), min(after))[0]


_TAIL = ".!?…。！？\"')]}»”’›"  # a sentence's closing marks: a link at the end goes before them


def _insert(hyp: str, pos: int, link: str) -> str:
    """``link`` (with the spaces it had before it) into ``hyp`` before the word at ``pos``;
    never before the first word (the link had words before it)."""
    words = hyp.split(maxsplit=1)
    pos = max(pos, len(hyp) - len(words[1]) if len(words) > 1 else len(hyp))
    if pos >= len(hyp):
        end = len(hyp.rstrip(_TAIL))
        return hyp[:end] + link + hyp[end:]
    head = hyp[:pos].rstrip()
    return head + link + (hyp[len(head):pos] or " ") + hyp[pos:]  # the spaces after it kept


def put_back(result: TranslationResult, text: str, holes: list[tuple[int, str]]) -> TranslationResult:
    """``result`` (of ``text`` without its ``holes``, ``passthrough.holes``, translated with
    attention) as the result of ``text``: each link back in the 1-best before the first
    word aligned to a source word after it, in the other hypotheses (which have no
    attention) at the end, before the closing marks; the attention dropped (it is of
    another text than ``text``)."""
    al = aligned(result)
    spots = [project_point(al, x, len(result.src)) for x, _ in holes]
    at: dict[int, str] = {}
    for (_, link), pos in zip(holes, spots):  # links at one spot together, in source order
        at[pos] = at.get(pos, "") + link
    best = result.hyp
    for pos in sorted(at, reverse=True):  # from the last spot back: earlier spots stay valid
        best = _insert(best, pos, at[pos])
    nbest = [(best, result.nbest[0][1])] if result.nbest else []
    for other, score in result.nbest[1:]:
        for _, link in holes:
            other = _insert(other, len(other), link)
        nbest.append((other, score))
    return replace(result, src=text, hyp=best, nbest=nbest, attention=None, src_pieces=[],
                   tgt_pieces=[])
