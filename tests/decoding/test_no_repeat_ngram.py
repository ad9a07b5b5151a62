"""``no_repeat_ngram_size``: no n-gram twice in an output, in every search, as peers do it.

The rule (``decoding.rules.ban_repeated_ngrams``) against a plain Python reference; every
output of greedy, beam (n-best too) and sampling free of repeats where the unruled search
repeats; cached = uncached and batched = one sentence at a time; the same outputs as Hugging
Face ``generate(no_repeat_ngram_size=n)`` and CTranslate2's ``no_repeat_ngram_size`` on the
same weights; the shipped model's looping output on out-of-domain text stopped.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from helpers import tiny_random_model
from hypothesis import given, settings
from hypothesis import strategies as st

from seq2seq.config import ConfigError, DecodingConfig
from seq2seq.decoding.rules import ban_repeated_ngrams
from seq2seq.decoding.search import search
from seq2seq.specials import EOS_ID, PAD_ID

V = 12  # a small vocabulary: random models repeat themselves quickly


def repeated_ngram(tokens: list[int], n: int) -> tuple[int, ...] | None:
    """The first n-gram that occurs twice in ``tokens``, else None."""
    seen = set()
    for i in range(len(tokens) - n + 1):
        gram = tuple(tokens[i : i + n])
        if gram in seen:
            return gram
        seen.add(gram)
    return None


def reference_bans(prefix: list[int], n: int) -> set[int]:
    """Tokens that would complete an n-gram already in ``prefix``, by plain Python."""
    t = len(prefix)
    if n == 0 or t < n:
        return set()
    last = prefix[t - n + 1 :]
    return {prefix[j + n - 1] for j in range(t - n + 1) if prefix[j : j + n - 1] == last}


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.lists(st.integers(4, 9), min_size=0, max_size=14), min_size=1, max_size=5)
       .filter(lambda rows: len({len(r) for r in rows}) == 1),
       n=st.integers(0, 5))
def test_bans_equal_a_plain_reference(rows, n):
    prefix = torch.tensor(rows, dtype=torch.long).view(len(rows), -1)
    lprobs = torch.zeros(len(rows), V)
    ban_repeated_ngrams(lprobs, prefix, n)
    for r, row in enumerate(rows):
        assert set(lprobs[r].isneginf().nonzero().flatten().tolist()) == reference_bans(row, n)


def test_option_is_checked():
    assert DecodingConfig().no_repeat_ngram_size >= 0
    with pytest.raises(ConfigError, match="no_repeat_ngram_size must be >= 0"):
        DecodingConfig(no_repeat_ngram_size=-1)


def _model_and_sources(seed: int = 0):
    model = tiny_random_model(V, seed)
    torch.manual_seed(seed)
    src = torch.randint(4, V, (6, 7))
    src[:, -1] = EOS_ID
    src[3, 4:] = PAD_ID  # mixed lengths
    src[3, 3] = EOS_ID
    return model, src


SEARCHES = {
    "greedy": dict(method="greedy"),
    "beam": dict(method="beam", beam_size=4, nbest=4),
    "beam-exact": dict(method="beam", beam_size=3, nbest=2, stopping="exact"),
    "sample": dict(method="sample", nbest=3, seed=1),
}


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("kind", SEARCHES)
def test_no_output_repeats_an_ngram(kind, n):
    """Every hypothesis of every search is free of repeated n-grams; without the rule the
    same search repeats (so the check can fail)."""
    model, src = _model_and_sources()
    base = DecodingConfig(max_len_a=0.0, max_len_b=20, **SEARCHES[kind])
    repeats = [repeated_ngram(h.tokens, n)
               for hyps in search(model, src, base).hypotheses for h in hyps]
    assert any(repeats)
    ruled = dataclasses.replace(base, no_repeat_ngram_size=n)
    for hyps in search(model, src, ruled).hypotheses:
        for h in hyps:
            assert repeated_ngram(h.tokens, n) is None, (h.tokens, n)


@pytest.mark.parametrize("kind", ["greedy", "beam", "beam-exact"])
def test_cached_batched_equal_uncached_one_at_a_time(kind):
    model, src = _model_and_sources(seed=1)
    decoding = DecodingConfig(max_len_a=0.0, max_len_b=20, no_repeat_ngram_size=2, **SEARCHES[kind])
    batched = search(model, src, decoding).hypotheses
    for i in range(src.shape[0]):
        row = src[i : i + 1, : int((src[i] != PAD_ID).sum())]
        alone = search(model, row, decoding, use_cache=False).hypotheses[0]
        assert [h.tokens for h in alone] == [h.tokens for h in batched[i]]
        for a, b in zip(alone, batched[i]):
            assert a.score == pytest.approx(b.score, abs=1e-4)


def test_min_len_and_the_rule_together_still_end():
    """With every other token banned and EOS forbidden by min_len, the output ends (EOS)
    instead of emitting pad."""
    model, src = _model_and_sources()
    decoding = DecodingConfig(max_len_a=0.0, max_len_b=40, min_len=40, no_repeat_ngram_size=1)
    for hyps in search(model, src, decoding).hypotheses:
        tokens = hyps[0].tokens
        assert len(tokens) == len(set(tokens)) <= V - 3  # no pad, bos or eos inside
        assert PAD_ID not in tokens


# ---------------------------------------------------------------- peers on the same weights
def test_hf_generate_greedy_equals_ours():
    transformers = pytest.importorskip("transformers")  # noqa: F841
    from seq2seq.export.marian import to_hf_marian

    model, src = _model_and_sources()
    marian = to_hf_marian(model)
    for n in (1, 2, 3):
        decoding = DecodingConfig(max_len_a=0.0, max_len_b=16, no_repeat_ngram_size=n)
        ours = [h[0].tokens for h in search(model, src, decoding).hypotheses]
        with torch.no_grad():
            out = marian.generate(input_ids=src, attention_mask=src.ne(PAD_ID), num_beams=1,
                                  do_sample=False, max_new_tokens=17, no_repeat_ngram_size=n)
        theirs = [[t for t in row[1:] if t != PAD_ID] for row in out.tolist()]
        theirs = [row[: row.index(EOS_ID)] if EOS_ID in row else row for row in theirs]
        assert theirs == ours, n


def test_ctranslate2_greedy_equals_ours(tmp_path):
    ctranslate2 = pytest.importorskip("ctranslate2")
    from seq2seq.export.common import vocabularies
    from seq2seq.export.ctranslate2 import to_ctranslate2

    model, src = _model_and_sources()
    translator = ctranslate2.Translator(str(to_ctranslate2(model, tmp_path / "ct2")),
                                        device="cpu", inter_threads=1, intra_threads=1)
    src_vocab, tgt_vocab = vocabularies(model)
    index = {p: i for i, p in enumerate(tgt_vocab)}
    pieces = [[src_vocab[i] for i in row if i != PAD_ID] for row in src.tolist()]
    for n in (1, 2, 3):
        decoding = DecodingConfig(max_len_a=0.0, max_len_b=16, no_repeat_ngram_size=n)
        ours = [h[0].tokens for h in search(model, src, decoding).hypotheses]
        results = translator.translate_batch(
            pieces, beam_size=1, max_decoding_length=16, min_decoding_length=0,
            no_repeat_ngram_size=n, suppress_sequences=[[tgt_vocab[PAD_ID]], [tgt_vocab[2]]])
        assert [[index[p] for p in r.hypotheses[0]] for r in results] == ours, n
