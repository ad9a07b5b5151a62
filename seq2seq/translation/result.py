"""``TranslationResult``: what a translation of one text carries besides its text, and the
checks that flag an output (``output_flags``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from seq2seq.config import DecodingConfig
from seq2seq.model import Attentions
from seq2seq.translation.numbers import missing_numbers

if TYPE_CHECKING:
    from seq2seq.decoding.search import Hypothesis


@dataclass
class TranslationResult:
    src: str
    hyp: str
    score: float  # the 1-best's normalized score (what ranks hypotheses); 0.0 for empty input
    log_prob: float  # the 1-best's total log-prob
    nbest: list[tuple[str, float]] = field(default_factory=list)  # (text, normalized score)
    src_pieces: list[str] = field(default_factory=list)  # set with need_attention
    tgt_pieces: list[str] = field(default_factory=list)  # the 1-best's pieces, then "</s>"
    attention: Attentions | None = None  # on request: see search.SearchResult
    # the 1-best's geometric-mean token probability, exp(log_prob / its tokens incl. EOS), in
    # (0, 1]; low on input unlike the training data (1.0 for empty input). See confidence().
    confidence: float = 1.0
    tokens: int = 0  # output tokens of the 1-best, EOS included (0: nothing was translated)
    # warnings about this output: "skipped" (far shorter than its source: words were probably
    # dropped), "truncated" (a source piece longer than the model takes was cut: its end is
    # untranslated), "cut" (a clause over the model's sentence limit was cut at words and
    # translated in pieces), "numbers" (a number of the source is not in the output),
    # "unsure" (confidence below the model's calibrated threshold)
    flags: list[str] = field(default_factory=list)


SKIP_MIN_WORDS = 8  # shorter sources vary too much in length to judge (see skip_ratio)


def skipped(src: str, hyp: str, decoding: DecodingConfig) -> bool:
    """Whether ``hyp`` has far fewer words than ``src`` (under ``decoding.skip_ratio`` of
    them): a translation that dropped words, as one-sentence models do with several
    sentences at once. Words are what spaces separate (a measure that does not judge text
    without spaces: Chinese, Japanese)."""
    n_src = len(src.split())
    return n_src >= SKIP_MIN_WORDS and len(hyp.split()) < decoding.skip_ratio * n_src


def output_flags(src: str, hyp: str, decoding: DecodingConfig) -> list[str]:
    """The flags an output of one model call gets from its source: ``"skipped"``,
    ``"numbers"``."""
    return ["skipped"] * skipped(src, hyp, decoding) + ["numbers"] * missing_numbers(src, hyp)


def confidence(hyp: Hypothesis) -> float:
    """How sure the model is of an output, whatever the length penalty that ranked it: the
    geometric mean of its token probabilities, ``exp(score / (|tokens| + 1))`` (EOS counts).
    The shipped De->En model: median 0.75 on Multi30k val (95% above 0.48 greedy, 0.57 beam
    5), 0.25-0.48 on everyday sentences unlike its captions."""
    return math.exp(hyp.score / (len(hyp.tokens) + 1))
