"""Stand-in translators for document tests: no model, a known answer and a known alignment.

Each takes sentences and returns :class:`Aligned` translations whose ``links`` say, word by
word, where each source word went, so that formatting projected by the alignment has one
right place to land:

- ``identity``: the sentence itself; every document must come back unchanged.
- ``upper``: the sentence uppercased; every run's words keep their formatting.
- ``reverse_words``: the words in reverse order; formatting follows each word to its new
  place (a run of several words may then cover words between them); ``shuffled(rng)``,
  in any order a random generator draws.
- ``Fake``: each sentence as is (or its tokens reversed), aligned token to token, recording
  what it was asked; ``split``: sentences that end at a full stop.
"""

from __future__ import annotations

import re

from seq2seq.documents.align import Aligned

WORD = re.compile(r"\S+")


def _word_links(source: str, target_words: list[tuple[int, int]], order: list[int]) -> list:
    """Links for target words ``target_words`` (spans in the target) that came from source
    word ``order[k]`` (spans of ``WORD`` matches in ``source``)."""
    spans = [m.span() for m in WORD.finditer(source)]
    return [(ts, te, *spans[k]) for (ts, te), k in zip(target_words, order)]


def identity(sentences: list[str]) -> list[Aligned]:
    return [_word_by_word(s, str) for s in sentences]


def upper(sentences: list[str]) -> list[Aligned]:
    return [_word_by_word(s, str.upper) for s in sentences]


def _word_by_word(sentence: str, change) -> Aligned:
    """``change`` applied word by word (lengths kept where ``change`` keeps them), each
    target word linked to its source word."""
    out, links, cursor = [], [], 0
    for m in WORD.finditer(sentence):
        out.append(sentence[cursor:m.start()])
        start = sum(map(len, out))
        word = change(m.group())
        out.append(word)
        links.append((start, start + len(word), m.start(), m.end()))
        cursor = m.end()
    out.append(sentence[cursor:])
    return Aligned("".join(out), links)


def reverse_words(sentences: list[str]) -> list[Aligned]:
    return [_reordered(s, lambda order: order[::-1]) for s in sentences]


def _reordered(sentence: str, reorder) -> Aligned:
    """The words of ``sentence`` in the order ``reorder`` gives their indices, one space
    between them, each linked to its source word."""
    words = WORD.findall(sentence)
    order = reorder(list(range(len(words))))
    text = " ".join(words[k] for k in order)
    spans = [m.span() for m in WORD.finditer(text)]
    return Aligned(text, _word_links(sentence, spans, order))


def shuffled(rng):
    """A translator that puts each sentence's words in an order ``rng`` (a
    :class:`random.Random`) draws: formatting follows each word wherever it lands."""
    return lambda sentences: [_reordered(s, lambda order: rng.sample(order, len(order)))
                              for s in sentences]


TRANSLATORS = {"identity": identity, "upper": upper, "reverse_words": reverse_words}


TOKEN = re.compile(r"\w+|[^\w\s]")


def split(text: str) -> list[tuple[int, int]]:
    """Sentences end at a full stop (enough for these tests; the real segmenter is tested
    on its own); every character is in one (what a splitter leaves out is kept as it is)."""
    return [(m.start(), m.end()) for m in re.finditer(r"[^.]+\.?|\.+", text)]


class Fake:
    """A translator that returns each sentence as is (or its tokens reversed), aligned token
    to token, and records what it was asked."""

    def __init__(self, reverse: bool = False):
        self.reverse, self.calls = reverse, []

    def __call__(self, sentences: list[str]) -> list[Aligned]:
        self.calls.append(list(sentences))
        return [self.one(s) for s in sentences]

    def one(self, s: str) -> Aligned:
        if not self.reverse:
            return Aligned(s, [(m.start(), m.end(), m.start(), m.end()) for m in TOKEN.finditer(s)])
        text, links = "", []
        for m in reversed(list(TOKEN.finditer(s))):
            text += " " if text else ""
            links.append((len(text), len(text) + len(m.group()), m.start(), m.end()))
            text += m.group()
        return Aligned(text, links)
PIECE = re.compile(r"\w+|[^\w\s]+")  # words and punctuation runs apart, as a model's pieces are


def by_hand(source: str, target: str, pairs: dict[int, int]) -> Aligned:
    """``target`` as the translation of ``source``, its token ``k`` (a ``PIECE`` match)
    aligned to source token ``pairs[k]``: a made-up alignment that moves words, as a
    model's does."""
    src, tgt = ([m.span() for m in PIECE.finditer(t)] for t in (source, target))
    return Aligned(target, [(*tgt[k], *src[j]) for k, j in pairs.items()])


def flagging(rules: dict[str, str], translate=identity):
    """``translate`` whose translations carry flags: a sentence holding ``rules[flag]`` (a
    word) is flagged ``flag``, as the model flags "numbers" or "unsure"."""
    def flagged(sentences: list[str]) -> list[Aligned]:
        done = translate(sentences)
        for s, d in zip(sentences, done):
            d.flags = [flag for flag, word in rules.items() if word in re.findall(r"\w+", s)]
        return done
    return flagged
