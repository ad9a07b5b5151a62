"""``TranslationResult``: what a translation of one text carries besides its text."""

from __future__ import annotations

from dataclasses import dataclass, field

from seq2seq.model import Attentions


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
    # dropped), "truncated" (a source piece longer than the model takes was cut)
    flags: list[str] = field(default_factory=list)
