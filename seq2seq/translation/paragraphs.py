"""Texts of any length through a model trained on single sentences.

A text is cut into sentences (``seq2seq.translation.segment``), a sentence longer than the model
ever saw into clauses, a clause still longer at words (flagged ``"cut"``: no model call
gets more than the model's sentence limit); every piece of every text of a call goes to
the model in the same length-packed batches; each text is then put back together from its
pieces' translations and its own gaps (spaces, line breaks, blank lines, and what is not
language: list markers, numbers alone, symbols, URLs, kept verbatim by the segmenter). A
blank text gives ``""``.

A text of one piece keeps everything its piece's result has (score, n-best, flags); a text
of several gets the total log-prob of its pieces, their mean normalized score, the
geometric-mean token probability over all their tokens, every piece's flags, and as its
n-best the best choices of one hypothesis per piece by their mean score
(:func:`best_choices`): as many as the longest n-best list of its pieces.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from seq2seq.translation.result import TranslationResult
from seq2seq.translation.segment import Segments, cut_words, fit_clauses, from_spans, sentence_spans


@dataclass(frozen=True)
class Layout:
    """How one text is made of the plan's units: its sentences and gaps, where its units
    start in ``Plan.units`` (one per sentence, in order), and whether a clause was cut."""

    segments: Segments
    first: int
    cut: bool


@dataclass(frozen=True)
class Plan:
    """The pieces to translate (``units``) and how each text is made of them."""

    texts: list[str]
    units: list[str]
    layouts: list[Layout]

    def assemble(self, results: Sequence[TranslationResult]) -> list[TranslationResult]:
        """One result per text from the units' results (in ``units`` order)."""
        return [_assemble(text, lay, list(results[lay.first:lay.first + len(lay.segments.sentences)]))
                for text, lay in zip(self.texts, self.layouts)]


def _spans(text: str, lang: str | None, lengths: Callable[[list[str]], list[int]],
           limit: int) -> tuple[list[tuple[int, int]], bool]:
    """Sentence spans of ``text``, those over ``limit`` tokens cut further at clauses, a
    clause still over it at words; and whether that last cut was needed. A sentence holds
    the links in its middle (the Translator cuts them out) unless it is over the limit:
    then it is cut at them first, so no cut falls inside a link."""
    spans = sentence_spans(text, lang, links_inside=True)
    sizes = lengths([text[a:b] for a, b in spans])
    if any(size > limit for size in sizes):
        at_links = sentence_spans(text, lang)
        spans = [s for (a, b), size in zip(spans, sizes) for s in (
            [(a, b)] if size <= limit else [(x, y) for x, y in at_links if a <= x and y <= b])]
        sizes = lengths([text[a:b] for a, b in spans])
    out: list[tuple[int, int]] = []
    cut = False

    def one(s: str) -> int:
        return lengths([s])[0]
    for (a, b), size in zip(spans, sizes):
        if size <= limit:
            out.append((a, b))
            continue
        for x, y in fit_clauses(text[a:b], one, limit):
            x, y = a + x, a + y
            if one(text[x:y]) <= limit:
                out.append((x, y))
            else:  # one clause over the limit: no model call gets more
                cut = True
                out += [(x + u, x + v) for u, v in cut_words(text[x:y], one, limit)]
    return out, cut


def plan(texts: Sequence[str], lang: str | None, lengths: Callable[[list[str]], list[int]],
         limit: int) -> Plan:
    """Cut ``texts`` (in language ``lang``) into the pieces to translate; ``lengths`` gives
    the source tokens of each of a list of strings, ``limit`` the most a piece may have."""
    units: list[str] = []
    layouts = []
    for text in texts:
        spans, cut = _spans(text, lang, lengths, limit)
        segments = from_spans(text, spans)
        layouts.append(Layout(segments, len(units), cut))
        units += segments.sentences
    return Plan(list(texts), units, layouts)


def _assemble(text: str, layout: Layout, done: list[TranslationResult]) -> TranslationResult:
    if not text.strip():  # blank: "" as without splitting (the Translator's promise)
        return TranslationResult(text, "", 0.0, 0.0, [("", 0.0)])
    segments, cut = layout.segments, ["cut"] * layout.cut
    hyp = segments.join([r.hyp for r in done])
    if not done:  # nothing to translate (emoji, numbers, a URL): as it came
        return TranslationResult(text, hyp, 0.0, 0.0, [(hyp, 0.0)])
    if len(done) == 1:  # one sentence: its own result, in the text's gaps
        (r,) = done
        nbest = [(segments.join([h]), s) for h, s in r.nbest]
        return replace(r, src=text, hyp=hyp, nbest=nbest, flags=sorted({*r.flags, *cut}))
    nbest = [(segments.join(choice), score) for choice, score in
             best_choices([r.nbest for r in done], max(len(r.nbest) for r in done))]
    log_prob = sum(r.log_prob for r in done)
    tokens = sum(r.tokens for r in done)
    score = sum(r.score for r in done) / len(done)
    flags = sorted({f for r in done for f in r.flags} | set(cut))
    return TranslationResult(text, hyp, score, log_prob, nbest,
                             confidence=math.exp(log_prob / max(tokens, 1)), tokens=tokens,
                             flags=flags)


def best_choices(lists: Sequence[Sequence[tuple[str, float]]],
                 n: int) -> list[tuple[list[str], float]]:
    """The ``n`` best choices of one ``(text, score)`` from each list (each best first), by
    the mean of their scores, best first (ties: the earlier ranks). Best-first search over
    rank tuples: each choice taken puts its successors (one list a rank further down) on a
    heap, so a text's n-best costs about ``n x pieces`` steps, never the product of the lists."""
    first = (0,) * len(lists)
    heap = [(-sum(x[0][1] for x in lists), first)]
    seen, out = {first}, []
    while heap and len(out) < n:
        neg, ranks = heapq.heappop(heap)
        chosen = [x[r] for x, r in zip(lists, ranks)]  # the score summed afresh: exact
        out.append(([h for h, _ in chosen], sum(s for _, s in chosen) / len(lists)))
        for p, r in enumerate(ranks):
            after = (*ranks[:p], r + 1, *ranks[p + 1:])
            if r + 1 < len(lists[p]) and after not in seen:
                seen.add(after)
                heapq.heappush(heap, (neg + lists[p][r][1] - lists[p][r + 1][1], after))
    return out
