"""Sentences translated and aligned on the server: every sentence of every page of a
``format: "html"`` request (or of a document) goes through the batcher (merged with other
requests, within the server's work limits) with cross-attention, and each page is rebuilt
by :mod:`seq2seq.documents.html` (inline tags carried by the alignment, markup kept byte
for byte)."""

from __future__ import annotations

from functools import partial

from seq2seq.config import DecodingConfig
from seq2seq.documents.align import Aligned, aligned
from seq2seq.documents.html import Page
from seq2seq.documents.inline import sentence_splitter
from seq2seq.serving.api import Server, source_tokens, translate_texts
from seq2seq.serving.limits import check_cost
from seq2seq.serving.models import ServedModel


def _aligned_work(served: ServedModel, decoding: DecodingConfig, direction: dict,
                  texts: list[str]) -> list[Aligned]:
    return [aligned(r) for r in translate_texts(served, decoding, direction, texts, True)]


async def run_aligned(server: Server, served: ServedModel, decoding: DecodingConfig,
                      sentences: list[str], direction: dict) -> list[Aligned]:
    """``sentences`` translated and aligned on the batcher. Bounded by work (each sentence,
    and all of them together), not by their count: a page's sentences are not its texts."""
    if not sentences:
        return []
    tokens = source_tokens(served, sentences, server.cfg)
    costs = check_cost(tokens, decoding, served.translator.model.arch, server.cfg)
    key = ("aligned", served.name, repr(decoding), tuple(sorted(direction.items())))
    work = partial(_aligned_work, served, decoding, direction)
    return await server.batcher.submit(key, sentences, costs, work)


async def translate_pages(server: Server, served: ServedModel, decoding: DecodingConfig,
                          pages: list[str], direction: dict, lang: str | None) -> list[str]:
    """Each HTML page translated, all of their sentences in one submission."""
    plans = [Page(p, sentence_splitter(lang)) for p in pages]
    done = iter(await run_aligned(server, served, decoding,
                                  [s for p in plans for s in p.sentences], direction))
    return [p.render([next(done) for _ in p.sentences]) for p in plans]

