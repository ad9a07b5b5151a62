"""A document's parts in one ``translate`` call, and the plain texts of an XML document
(an element's own text: a book's title, a table of contents' label) as one of those parts.

A part is a job: its ``sentences``, then ``render`` with their translations (an HTML page,
a paragraph of runs: :class:`seq2seq.documents.runs.Paragraph`, or :class:`Texts`).
"""

from __future__ import annotations

from seq2seq.documents.align import Aligned, SentenceTranslator
from seq2seq.documents.formats import joined, plan_texts
from seq2seq.documents.inline import Splitter
from seq2seq.documents.package import NOT_XML


class Texts:
    """Elements whose own text is translated whole, sentence by sentence, the text between
    sentences kept (what they hold besides their text is left as it is)."""

    def __init__(self, elements: list, split: Splitter):
        self.elements = elements
        self.texts = [el.text or "" for el in elements]
        self.plans = plan_texts(self.texts, split)
        self.sentences = [t[s:e] for t, plan in zip(self.texts, self.plans) for s, e in plan]

    def render(self, translations: list[Aligned]) -> None:
        done = iter(translations)
        for el, text, plan in zip(self.elements, self.texts, self.plans):
            new = NOT_XML.sub("", joined(text, plan, [next(done) for _ in plan]))
            if new != text:
                el.text = new


def one_batch(jobs: list, translate: SentenceTranslator) -> list:
    """Each job's ``render`` with its sentences' translations, all of them from one
    ``translate`` call (one batch for the whole document)."""
    sentences = [s for job in jobs for s in job.sentences]
    done = iter(translate(sentences) if sentences else [])
    return [job.render([next(done) for _ in job.sentences]) for job in jobs]
