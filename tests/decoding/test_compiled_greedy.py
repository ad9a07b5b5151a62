"""One sentence's greedy search with its whole step compiled (``decoding.compiled_greedy``):
the rules inside the graph leave the values ``rules.constrain`` leaves, on generated steps;
the compiled search gives the eager search's tokens, scores and lengths on generated batches
of one under every rule (n-gram bans, min and max length, a decoder-side start token), its
cache from the source package or from the eager route, falls
back where it does not apply, and its load check catches a package that chooses wrong."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import multi30k_lines, needs_cpp_compiler
from hypothesis import given, settings
from hypothesis import strategies as st

from seq2seq.config import DecodingConfig, ModelConfig
from seq2seq.data.batch import collate_src
from seq2seq.decoding import compiled_greedy, search
from seq2seq.decoding.rules import NGRAM_MAX, constrain, constrain_graph
from seq2seq.model.inference import compiled_source
from seq2seq.translation.translator import Translator

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "data" / "models" / "multi30k_de_en_tiny.ckpt"
ARCH = ModelConfig(src_vocab_size=12, tgt_vocab_size=12)  # pad 0, bos 1, eos 2 (specials)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_rules_in_the_graph_are_the_rules(data):
    """Random log-probs, outputs so far (few distinct tokens, so n-grams repeat), step,
    limits and n: ``constrain_graph`` on the row equals ``constrain`` on it."""
    V, T = ARCH.tgt_vocab_size, data.draw(st.integers(2, 24), label="T")
    t = data.draw(st.integers(0, T - 1), label="t")
    max_len = data.draw(st.integers(max(t, 1), T - 1), label="max_len")
    min_len = data.draw(st.integers(0, 6), label="min_len")
    n = data.draw(st.integers(0, NGRAM_MAX), label="n")
    prefix = data.draw(st.lists(st.integers(3, 5), min_size=t, max_size=t), label="prefix")
    lprobs = torch.log_softmax(torch.randn(V, generator=torch.Generator().manual_seed(t)), -1)
    out = torch.full((T,), ARCH.pad_id)
    out[:t] = torch.tensor(prefix, dtype=torch.long)
    never = torch.zeros(V)
    never[[ARCH.pad_id, ARCH.bos_id]] = float("-inf")
    decoding = DecodingConfig(min_len=min_len, no_repeat_ngram_size=n)
    want = constrain(lprobs.clone()[None], t, torch.tensor([max_len]), decoding, ARCH, False,
                     out[None, :t] if n else None)[0]
    got = constrain_graph(lprobs.clone(), torch.tensor(t), out, torch.tensor(max_len),
                          torch.tensor(min_len), torch.tensor(n), never, ARCH.eos_id)
    assert torch.equal(got, want)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_rules_in_the_graph_are_the_rules_on_a_sentences_rows(data):
    """As above for the rows of one sentence (a beam's, ``(R, V)``, each its own outputs so
    far): ``constrain_graph`` on the rows equals ``constrain`` on them."""
    V, T = ARCH.tgt_vocab_size, data.draw(st.integers(2, 16), label="T")
    R, t = data.draw(st.integers(1, 6), label="R"), data.draw(st.integers(0, T - 1), label="t")
    max_len = data.draw(st.integers(max(t, 1), T - 1), label="max_len")
    min_len = data.draw(st.integers(0, 6), label="min_len")
    n = data.draw(st.integers(0, NGRAM_MAX), label="n")
    rows = data.draw(st.lists(st.lists(st.integers(3, 5), min_size=t, max_size=t),
                              min_size=R, max_size=R), label="rows")
    lprobs = torch.log_softmax(torch.randn(R, V, generator=torch.Generator().manual_seed(t)), -1)
    out = torch.full((R, T), ARCH.pad_id)
    out[:, :t] = torch.tensor(rows, dtype=torch.long).view(R, t)
    never = torch.zeros(V)
    never[[ARCH.pad_id, ARCH.bos_id]] = float("-inf")
    decoding = DecodingConfig(min_len=min_len, no_repeat_ngram_size=n)
    want = constrain(lprobs.clone(), t, torch.full((R,), max_len), decoding, ARCH, False,
                     out[:, :t] if n else None)
    got = constrain_graph(lprobs.clone(), torch.tensor(t), out, torch.tensor(max_len),
                          torch.tensor(min_len), torch.tensor(n), never, ARCH.eos_id)
    assert torch.equal(got, want)


# ------------------------------------------------------------ the compiled search
@pytest.fixture(scope="module")
def model(compiled_cache):
    """The shipped De->En model with ``--compile``, its greedy package made once here."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SEQ2SEQ_CACHE_DIR", str(compiled_cache))
        translator = Translator.from_checkpoint(SHIPPED, DecodingConfig(method="greedy"),
                                                compile=True)
        greedy = translator.model.inference.compiled_greedy
        greedy.prepare(translator.model)
        assert greedy.loader is not None, "the greedy package was not made"
        source = translator.model.inference.compiled_source
        source.prepare(translator.model)
        assert source.loader is not None, "the source package was not made"
    return translator


def _both(model, src: torch.Tensor, decoding: DecodingConfig, first=None):
    """(compiled, eager) greedy results of ``src``: the eager one step by step from the
    eager encoder and cross K/V."""
    features, before = model.inference, compiled_greedy.COUNTS["sentences"]
    fast = search.greedy(model, src, decoding, first=first)
    ran = compiled_greedy.COUNTS["sentences"] - before
    whole, features.compiled_greedy = features.compiled_greedy, None
    source, features.compiled_source = features.compiled_source, None
    try:
        eager = search.greedy(model, src, decoding, first=first)
    finally:
        features.compiled_greedy, features.compiled_source = whole, source
    return fast, eager, ran


def _same(fast, eager) -> None:
    a, b = fast.hypotheses[0][0], eager.hypotheses[0][0]
    assert a.tokens == b.tokens
    assert a.score == pytest.approx(b.score, abs=1e-3)
    assert a.normalized == pytest.approx(b.normalized, abs=1e-3)
    assert torch.equal(fast.output, eager.output)


def _sources(translator) -> list[list[int]]:
    """Test sentences' ids and generated ones: a token repeated, one token, a long random row."""
    arch, gen = translator.model.arch, torch.Generator().manual_seed(3)
    texts = multi30k_lines("de", 6, "test_2016_flickr")
    return [*translator.tokenizers.src.encode(texts), [5] * 30, [7],
            torch.randint(4, arch.src_vocab_size, (60,), generator=gen).tolist()]


def _src(translator, ids: list[int]) -> torch.Tensor:
    arch = translator.model.arch
    return collate_src([ids], arch.pad_id, arch.eos_id)


@pytest.mark.slow
@needs_cpp_compiler
@pytest.mark.parametrize("decoding", [
    DecodingConfig(method="greedy"),  # the default rules: the 4-gram ban
    DecodingConfig(method="greedy", no_repeat_ngram_size=0),
    DecodingConfig(method="greedy", no_repeat_ngram_size=1),  # every token at most once
    DecodingConfig(method="greedy", no_repeat_ngram_size=2, min_len=12),
    DecodingConfig(method="greedy", max_len_a=0.0, max_len_b=3),  # EOS forced at step 3
], ids=["default", "no-ban", "ban-1", "ban-2-min-12", "max-3"])
def test_compiled_greedy_is_the_eager_search(model, decoding):
    """Both starts: the source package's cache and, without it, the eager route's."""
    features = model.model.inference
    source = features.compiled_source
    for ids in _sources(model):
        for use in (source, None):
            before, features.compiled_source = compiled_source.COUNTS["sources"], use
            try:
                fast, eager, ran = _both(model.model, _src(model, ids), decoding)
            finally:
                features.compiled_source = source
            assert ran == 1
            assert compiled_source.COUNTS["sources"] - before == (use is not None)
            _same(fast, eager)


@pytest.mark.slow
@needs_cpp_compiler
def test_a_decoder_start_token_and_the_translator(model):
    """A first decoder input other than BOS (a decoder-side language tag) reaches the
    package; whole texts through ``Translator.translate`` are the eager lines."""
    src = _src(model, _sources(model)[0])
    fast, eager, ran = _both(model.model, src, DecodingConfig(method="greedy"),
                             first=torch.tensor([9]))
    assert ran == 1
    _same(fast, eager)
    texts = multi30k_lines("de", 8, "test_2016_flickr")
    before = compiled_greedy.COUNTS["sentences"]
    lines = [model.translate([text])[0] for text in texts]
    assert compiled_greedy.COUNTS["sentences"] - before == len(texts)
    features = model.model.inference
    whole, features.compiled_greedy = features.compiled_greedy, None
    try:
        assert lines == [model.translate([text])[0] for text in texts]
    finally:
        features.compiled_greedy = whole


@pytest.mark.slow
@needs_cpp_compiler
def test_where_it_does_not_apply_the_search_is_step_by_step(model):
    """Two sentences, an n-gram ban past NGRAM_MAX, a forced length, a step hook: no
    package call, and the same results as without the package."""
    m, ids = model.model, _sources(model)[:2]
    arch = m.arch
    two = collate_src(ids, arch.pad_id, arch.eos_id)
    cases = [(two, DecodingConfig(method="greedy"), {}),
             (two[:1], DecodingConfig(method="greedy", no_repeat_ngram_size=NGRAM_MAX + 1), {}),
             (two[:1], DecodingConfig(method="greedy"), {"force_length": 5}),
             (two[:1], DecodingConfig(method="greedy"), {"on_step": lambda t, lp: None})]
    for src, decoding, kwargs in cases:
        before = compiled_greedy.COUNTS["sentences"]
        got = search.greedy(m, src, decoding, **kwargs)
        assert compiled_greedy.COUNTS["sentences"] == before
        features = m.inference
        whole, features.compiled_greedy = features.compiled_greedy, None
        try:
            want = search.greedy(m, src, decoding, **kwargs)
        finally:
            features.compiled_greedy = whole
        assert torch.equal(got.output, want.output)


@pytest.mark.slow
@needs_cpp_compiler
def test_the_load_check_catches_a_wrong_choice(model):
    """The check that guards loading: the real package passes, one whose token is off by
    one, or whose bookkeeping writes nothing, fails."""
    m, loader = model.model, model.model.inference.compiled_greedy.loader
    assert compiled_greedy.self_check(m, loader) <= 1e-4

    class OffByOne:
        def boxed_run(self, inputs):
            out, chosen, limits = inputs[-3:]
            tok = loader.boxed_run(inputs)[0]
            t = int(limits[0]) - 1
            out[t] = (out[t] + 1) % m.arch.tgt_vocab_size
            return [(tok + 1) % m.arch.tgt_vocab_size]

    class WritesNothing:
        def boxed_run(self, inputs):
            return [loader.boxed_run([t.clone() for t in inputs])[0]]

    assert compiled_greedy.self_check(m, OffByOne()) > 1e-2
    assert compiled_greedy.self_check(m, WritesNothing()) == float("inf")
