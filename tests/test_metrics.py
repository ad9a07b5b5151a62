"""``seq2seq.metrics``: the same numbers as sacreBLEU's own corpus functions, the signatures
that say how they were computed, and the lowercased-tokenized BLEU's relation to cased BLEU."""

from __future__ import annotations

import random

import pytest
import sacrebleu

from seq2seq.metrics import all_scores, bleu, chrf, lc_tok_bleu

REFS = [
    "A dog runs across the meadow.",
    "Two men stand in front of a house and talk about the weather.",
    "Children.",
    "A woman in a red dress is riding a bike.",
    "Three people sit on a bench in the park while a dog plays.",
    "",
]
HYPS = [
    "A dog is running over the meadow.",
    "Two men are standing in front of a house talking about weather.",
    "Kids.",
    "A woman in a red dress rides a bicycle.",
    "Three persons sit on a park bench, while a dog is playing.",
    "",
]


def _recase(text: str, rng: random.Random) -> str:
    return "".join(c.upper() if rng.random() < 0.5 else c.lower() for c in text)


def test_scores_equal_sacrebleus_own():
    assert bleu(HYPS, REFS).score == sacrebleu.corpus_bleu(HYPS, [REFS]).score
    assert chrf(HYPS, REFS).score == sacrebleu.corpus_chrf(HYPS, [REFS]).score
    expected = sacrebleu.corpus_bleu(HYPS, [REFS], lowercase=True, tokenize="13a").score
    assert lc_tok_bleu(HYPS, REFS).score == expected
    assert 0 < bleu(HYPS, REFS).score < 100


def test_case_only_differences():
    """Hypotheses that differ from the references only in case: lc-tok BLEU is 100, cased
    BLEU and chrF are not."""
    rng = random.Random(0)
    hyps = [_recase(r, rng) for r in REFS]
    assert lc_tok_bleu(hyps, REFS).score == pytest.approx(100.0)
    assert bleu(hyps, REFS).score < 50 and chrf(hyps, REFS).score < 100
    assert bleu(REFS, REFS).score == pytest.approx(100.0) == chrf(REFS, REFS).score


@pytest.mark.parametrize("seed", range(5))
def test_lc_tok_bleu_at_least_cased(seed):
    """Lowercasing can only merge n-grams, so never lowers BLEU (same 13a tokenization)."""
    rng = random.Random(seed)
    hyps = [_recase(h, rng) if rng.random() < 0.7 else h for h in HYPS]
    assert lc_tok_bleu(hyps, REFS).score >= bleu(hyps, REFS).score
    assert lc_tok_bleu(hyps, REFS).score == lc_tok_bleu(HYPS, REFS).score  # case is all it ignores


def test_signatures():
    scores = all_scores(HYPS, REFS)
    assert list(scores) == ["BLEU", "chrF", "BLEU-lc-tok"]
    assert all(s.name == name for name, s in scores.items())
    b, c, lc = scores["BLEU"].signature, scores["chrF"].signature, scores["BLEU-lc-tok"].signature
    assert "case:mixed" in b and "tok:13a" in b and "case:lc" not in b
    assert "case:lc" in lc and "tok:13a" in lc and "case:mixed" not in lc
    assert "case:mixed" in c and "nc:6" in c
    for sig in (b, c, lc):
        assert "nrefs:1" in sig and f"version:{sacrebleu.__version__}" in sig


@pytest.mark.parametrize("fn", [bleu, chrf, lc_tok_bleu, all_scores])
def test_line_count_mismatch_refused(fn):
    with pytest.raises(ValueError, match="^6 hypotheses but 5 references"):
        fn(HYPS, REFS[:5])
    with pytest.raises(ValueError, match="no sentences"):
        fn([], [])
