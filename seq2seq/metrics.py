"""sacreBLEU wrappers: the scores MT people trust, with their signatures.

- ``bleu``: cased, detokenized BLEU (sacreBLEU defaults, 13a), the number to report.
- ``chrf``: chrF2 on the same text.
- ``lc_tok_bleu``: *lowercased* BLEU with 13a tokenization, labelled as such: only for
  comparison with papers that score lowercased tokenized text (Multi30k tradition).
"""

from __future__ import annotations

from dataclasses import dataclass

from sacrebleu.metrics import BLEU, CHRF


@dataclass(frozen=True)
class Score:
    name: str
    score: float
    signature: str


def _check(hyps: list[str], refs: list[str]) -> None:
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references: line counts must match")


def bleu(hyps: list[str], refs: list[str]) -> Score:
    _check(hyps, refs)
    metric = BLEU()
    return Score("BLEU", metric.corpus_score(hyps, [refs]).score, str(metric.get_signature()))


def lc_tok_bleu(hyps: list[str], refs: list[str]) -> Score:
    _check(hyps, refs)
    metric = BLEU(lowercase=True, tokenize="13a")
    return Score("BLEU-lc-tok", metric.corpus_score(hyps, [refs]).score, str(metric.get_signature()))


def chrf(hyps: list[str], refs: list[str]) -> Score:
    _check(hyps, refs)
    metric = CHRF()
    return Score("chrF", metric.corpus_score(hyps, [refs]).score, str(metric.get_signature()))


def all_scores(hyps: list[str], refs: list[str]) -> dict[str, Score]:
    """BLEU (cased, detok), chrF, and the labelled lowercased-tokenized BLEU."""
    return {s.name: s for s in (bleu(hyps, refs), chrf(hyps, refs), lc_tok_bleu(hyps, refs))}
