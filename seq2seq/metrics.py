"""sacreBLEU wrappers: the scores MT people trust, with their signatures.

- ``bleu``: cased, detokenized BLEU (sacreBLEU defaults, 13a), the number to report.
- ``chrf``: chrF2 on the same text.
- ``lc_tok_bleu``: *lowercased* BLEU with 13a tokenization, labelled as such: only for
  comparison with papers that score lowercased tokenized text (Multi30k tradition).

Every function takes one hypothesis and one reference per sentence and refuses lists of
different lengths (or empty ones) with a one-line ``ValueError`` naming both counts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.metrics.base import Metric


@dataclass(frozen=True)
class Score:
    name: str
    score: float
    signature: str  # sacreBLEU's, e.g. "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"


# The reported metrics, by the names the results use: sacreBLEU's defaults (cased, detokenized
# BLEU with 13a; chrF2), the settings of ``bleu``/``chrf`` and of the paired tests.
REPORTED: dict[str, Callable[[], Metric]] = {"BLEU": BLEU, "chrF": CHRF}


def check_lines(hyps: list[str], refs: list[str]) -> None:
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references: line counts must match")
    if not hyps:
        raise ValueError("no sentences to score")


def _score(name: str, metric: Metric, hyps: list[str], refs: list[str]) -> Score:
    check_lines(hyps, refs)
    value = metric.corpus_score(list(hyps), [list(refs)]).score
    # The signature is only complete (nrefs) once the metric has scored something.
    return Score(name, value, str(metric.get_signature()))


def bleu(hyps: list[str], refs: list[str]) -> Score:
    return _score("BLEU", REPORTED["BLEU"](), hyps, refs)


def lc_tok_bleu(hyps: list[str], refs: list[str]) -> Score:
    return _score("BLEU-lc-tok", BLEU(lowercase=True, tokenize="13a"), hyps, refs)


def chrf(hyps: list[str], refs: list[str]) -> Score:
    return _score("chrF", REPORTED["chrF"](), hyps, refs)


def all_scores(hyps: list[str], refs: list[str]) -> dict[str, Score]:
    """BLEU (cased, detok), chrF, and the labelled lowercased-tokenized BLEU, by name."""
    return {s.name: s for s in (bleu(hyps, refs), chrf(hyps, refs), lc_tok_bleu(hyps, refs))}
