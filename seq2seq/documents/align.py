"""Documents' sentences translated with their word alignments (the alignment itself:
``seq2seq.translation.alignment``), so that markup (HTML tags, a document's formatting
runs) can follow the words it covered into the translation; and the flags of a document's
sentences summed up."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from seq2seq.translation.alignment import Aligned, aligned

if TYPE_CHECKING:  # torch loads only when a model runs: the CLI's errors come first, fast
    from seq2seq.translation.translator import Translator

CHUNK = 512  # sentences per model call of sentence_translator (each batched within it)


# Sentences in, one aligned translation per sentence out (in order, one batch).
SentenceTranslator = Callable[[list[str]], list[Aligned]]


def sentence_translator(translator: Translator, **direction) -> SentenceTranslator:
    """``translator`` (in ``direction``: ``target_lang``, ``source_lang``) as a
    :data:`SentenceTranslator`: all sentences in one call, attention on."""
    def translate(sentences: list[str]) -> list[Aligned]:
        out: list[Aligned] = []
        for i in range(0, len(sentences), CHUNK):  # a chunk's attention held at a time
            out += [aligned(r) for r in translator.translate_full(sentences[i:i + CHUNK], True,
                                                                  **direction)]
        return out
    return translate


FIRST_FLAGGED = 5  # sentences named per flag in a document's summary


def flag_summary(sentences: list[str], translations: list[Aligned],
                 first: int = FIRST_FLAGGED) -> dict[str, dict]:
    """Per flag the translations carry: ``count``, the sentences that have it, and
    ``first``, the first few of them as ``{"sentence": n, "source": text}`` (``n`` counts
    the document's sentences from 1, in reading order). JSON as it stands."""
    summary: dict[str, dict] = {}
    for n, (source, done) in enumerate(zip(sentences, translations), 1):
        for flag in dict.fromkeys(done.flags):  # a flag twice on one sentence counts once
            entry = summary.setdefault(flag, {"count": 0, "first": []})
            entry["count"] += 1
            if len(entry["first"]) < first:
                entry["first"].append({"sentence": n, "source": source})
    return summary


class Recording:
    """A :data:`SentenceTranslator` (``translate``) that keeps every sentence and
    translation passing through it: ``summary()`` is their :func:`flag_summary`."""

    def __init__(self, translate: SentenceTranslator):
        self.translate = translate
        self.sentences: list[str] = []
        self.translations: list[Aligned] = []

    def __call__(self, sentences: list[str]) -> list[Aligned]:
        done = self.translate(sentences)
        self.sentences += sentences
        self.translations += done
        return done

    def summary(self) -> dict[str, dict]:
        return flag_summary(self.sentences, self.translations)


__all__ = ["Aligned", "CHUNK", "Recording", "SentenceTranslator", "aligned", "flag_summary",
           "sentence_translator"]
