"""Paragraphs of an XML document as runs of text ("slots"), translated with their formatting
carried by the alignment, and every part of a document in one ``translate`` call.

A slot is one run's text in the tree (a ``<a:t>``, an ODF span's text with its spaces and
tabs, ...) and how to write it back. A paragraph's slots are joined into one text, cut into
sentences, and each run's words go where the alignment says (``formats.split_runs``, as for
Word): a bold word stays bold, a link's words stay linked, in whatever order they come.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from seq2seq.documents.align import Aligned, SentenceTranslator
from seq2seq.documents.formats import plan_texts, split_runs
from seq2seq.documents.inline import Splitter

# Characters XML 1.0 cannot hold (lxml refuses them): never written into a part.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


@dataclass
class Slot:
    text: str
    write: Callable[[str], None]


def carry(texts: list[str], plan: list[tuple[int, int]], done: list[Aligned]) -> list[str]:
    """``split_runs(texts, plan, done)``, one unit at a time over only the runs the unit
    covers: the same answer (a unit's words only ever go to its own runs), in time linear in
    runs and units rather than their product."""
    bounds = [0]
    for t in texts:
        bounds.append(bounds[-1] + len(t))
    out: list[list[str]] = [[] for _ in texts]  # joined at the end: += on a list item copies
    r, cursor = 0, 0

    def keep(lo: int, hi: int) -> None:  # text between units: each character in its run
        nonlocal r
        while lo < hi:
            while bounds[r + 1] <= lo:
                r += 1
            out[r].append(texts[r][lo - bounds[r]:min(hi, bounds[r + 1]) - bounds[r]])
            lo = min(hi, bounds[r + 1])

    for (s, e), al in zip(plan, done):
        keep(cursor, s)
        while bounds[r + 1] <= s:
            r += 1
        last = r
        while last + 1 < len(texts) and bounds[last + 1] < e:
            last += 1
        local = [texts[k][max(s, bounds[k]) - bounds[k]:min(e, bounds[k + 1]) - bounds[k]]
                 for k in range(r, last + 1)]
        for k, new in enumerate(split_runs(local, [(0, e - s)], [al])):
            out[r + k].append(new)
        cursor = e
    keep(cursor, bounds[-1])
    return ["".join(pieces) for pieces in out]


class Paragraphs:
    """Paragraphs (each a list of slots) planned: ``sentences``, then :meth:`render` with
    their translations, which writes each changed run back."""

    def __init__(self, paragraphs: list[list[Slot]], split: Splitter):
        self.paragraphs = [p for p in paragraphs if p]
        texts = ["".join(s.text for s in p) for p in self.paragraphs]
        self.plans = plan_texts(texts, split)
        self.sentences = [t[s:e] for t, plan in zip(texts, self.plans) for s, e in plan]

    def render(self, translations: list[Aligned]) -> None:
        done = iter(translations)
        for slots, plan in zip(self.paragraphs, self.plans):
            got = [next(done) for _ in plan]
            if not plan:
                continue
            for slot, new in zip(slots, carry([s.text for s in slots], plan, got)):
                new = _NOT_XML.sub("", new)
                if new != slot.text:
                    slot.write(new)


def one_batch(jobs: list, translate: SentenceTranslator) -> list:
    """Each job's ``render`` with its sentences' translations, all of them from one
    ``translate`` call (one batch for the whole document)."""
    sentences = [s for job in jobs for s in job.sentences]
    done = iter(translate(sentences) if sentences else [])
    return [job.render([next(done) for _ in job.sentences]) for job in jobs]


def text_slot(element) -> Slot:
    """An element's own text (a title, a table of contents' label) as one run."""
    return Slot(element.text or "", lambda new: setattr(element, "text", new))
