"""Stand-in translators for document tests: no model, a known answer and a known alignment.

Each takes sentences and returns :class:`Aligned` translations whose ``links`` say, word by
word, where each source word went, so that formatting projected by the alignment has one
right place to land:

- ``identity``: the sentence itself; every document must come back unchanged.
- ``upper``: the sentence uppercased; every run's words keep their formatting.
- ``reverse_words``: the words in reverse order; formatting follows each word to its new
  place (a run of several words may then cover words between them).
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
    done = []
    for s in sentences:
        words = WORD.findall(s)
        text = " ".join(reversed(words))
        spans = [m.span() for m in WORD.finditer(text)]
        done.append(Aligned(text, _word_links(s, spans, list(range(len(words)))[::-1])))
    return done


TRANSLATORS = {"identity": identity, "upper": upper, "reverse_words": reverse_words}


def flagging(rules: dict[str, str], translate=identity):
    """``translate`` whose translations carry flags: a sentence holding ``rules[flag]`` (a
    word) is flagged ``flag``, as the model flags "numbers" or "unsure"."""
    def flagged(sentences: list[str]) -> list[Aligned]:
        done = translate(sentences)
        for s, d in zip(sentences, done):
            d.flags = [flag for flag, word in rules.items() if word in re.findall(r"\w+", s)]
        return done
    return flagged
