"""One sentence's source side in one package (``model.inference.compiled_source``): a cache
made from a cross layout decodes as the cache it came from, on generated sources; the
package's layout is the eager route's (encoder, ``Decoder.cross_kv``,
``DecoderCache.cross_layout``) on generated sources with and without padding, and a package
that lays out anything else fails its load check and is not used."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import multi30k_lines, needs_cpp_compiler, tiny_random_model
from hypothesis import given, settings
from hypothesis import strategies as st

from seq2seq.config import DecodingConfig
from seq2seq.data.batch import collate_src
from seq2seq.decoding import search
from seq2seq.fields import FieldWarning
from seq2seq.model import DecoderCache
from seq2seq.model.inference import compiled, compiled_source
from seq2seq.model.inference.step import decoder_step
from seq2seq.translation.translator import Translator

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = ROOT / "data" / "models" / "multi30k_de_en_tiny.ckpt"
MODEL = tiny_random_model(20)


def _source(model, length: int, pads: int, seed: int) -> torch.Tensor:
    """One source row of ``length`` tokens, its last ``pads`` of them padding."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(4, model.arch.src_vocab_size, (1, length), generator=gen)
    src[0, length - pads:] = model.arch.pad_id
    return src


def _eager_cache(model, src: torch.Tensor, capacity: int = 4) -> DecoderCache:
    mask = model.source_mask(src)
    return DecoderCache(model.decoder.cross_kv(model.encode(src, mask)), mask, capacity)


@settings(max_examples=25, deadline=None)
@given(length=st.integers(1, 12), pads=st.integers(0, 11), seed=st.integers(0, 99))
def test_a_cache_from_its_layout_decodes_as_that_cache(length, pads, seed):
    """Generated sources (one token to twelve, padded or not): a cache made from another's
    cross layout has its cross K/V, and six decoder steps (past the capacity of 4, so the
    buffers grow) give the same states."""
    pads = min(pads, length - 1)
    src = _source(MODEL, length, pads, seed)
    with torch.inference_mode():
        a = _eager_cache(MODEL, src)
        b = DecoderCache.from_layout(a.cross_layout(), a.memory_mask, capacity=4)
        for (ka, va), (kb, vb) in zip(a.cross_kv, b.cross_kv):
            assert torch.equal(ka, kb) and torch.equal(va, vb)
        tokens = torch.randint(4, 20, (6,), generator=torch.Generator().manual_seed(seed))
        for tok in tokens:
            want, got = decoder_step(MODEL, tok.view(1), a), decoder_step(MODEL, tok.view(1), b)
            assert torch.equal(got, want)
        assert a.length == b.length == 6


# ------------------------------------------------------------ the package
@pytest.fixture(scope="module")
def shipped(compiled_cache):
    """The shipped De->En model, its source package (made once here) and tokenizers."""
    translator = Translator.from_checkpoint(SHIPPED)
    model = translator.model
    source = compiled_source.CompiledSource(compiled.CompiledStep(model).key)
    with pytest.MonkeyPatch.context() as mp, torch.inference_mode():
        mp.setenv("SEQ2SEQ_CACHE_DIR", str(compiled_cache))
        source.prepare(model)
    assert source.loader is not None, "the source package was not made"
    return model, source, translator.tokenizers


@pytest.mark.slow
@needs_cpp_compiler
@pytest.mark.parametrize("length, pads", [(1, 0), (2, 0), (11, 0), (17, 5), (60, 0), (200, 1)])
def test_the_package_lays_out_the_source_as_the_eager_route(shipped, length, pads):
    model, source, _ = shipped
    src = _source(model, length, pads, seed=length)
    with torch.inference_mode():
        before = compiled_source.COUNTS["sources"]
        got = source.cache(model, src, capacity=4)
        assert compiled_source.COUNTS["sources"] == before + 1
        want = _eager_cache(model, src).cross_layout()
        for got_row, want_row in zip(got.cross_layout(), want):
            for g, w in zip(got_row, want_row):
                assert g.shape == w.shape and compiled_source._strides(g) == compiled_source._strides(w)
                torch.testing.assert_close(g, w, atol=2e-5, rtol=1e-5)
        assert torch.equal(got.cross_layout()[0][2], want[0][2])  # the bias: 0 or -inf


@pytest.mark.slow
@needs_cpp_compiler
def test_a_package_laying_out_anything_else_is_not_used(shipped, monkeypatch, compiled_cache):
    """The load check: the real package passes; one whose keys and values are swapped
    between layers, or whose bias masks nothing on a padded source, fails. A failing check
    leaves the eager route with one note."""
    model, source, _ = shipped
    real = source.loader
    assert compiled_source.self_check(model, real) <= compiled.CHECK_TOLERANCE

    class LayersSwapped:
        def boxed_run(self, inputs):
            out = real.boxed_run(inputs)
            return [out[0], *out[3:5], *out[1:3], *out[5:]]

    class MasksNothing:
        def boxed_run(self, inputs):
            return [torch.zeros_like(t) if i == 0 else t
                    for i, t in enumerate(real.boxed_run(inputs))]

    with torch.inference_mode():
        assert compiled_source.self_check(model, LayersSwapped()) > 1e-2
        assert compiled_source.self_check(model, MasksNothing()) > 1e-2
        monkeypatch.setenv("SEQ2SEQ_CACHE_DIR", str(compiled_cache))  # the made package
        monkeypatch.setattr(compiled_source, "self_check", lambda m, loader: 1.0)
        broken = compiled_source.CompiledSource(source.key)
        with pytest.warns(FieldWarning, match="the compiled source side failed"):
            broken.prepare(model)
        assert broken.failed and broken.loader is None
        assert broken.cache(model, _source(model, 5, 0, 1), 4) is None


@pytest.mark.slow
@needs_cpp_compiler
@pytest.mark.parametrize("decoding", [
    DecodingConfig(method="greedy"),
    DecodingConfig(method="beam", beam_size=5),
    DecodingConfig(method="beam", beam_size=3, nbest=3, stopping="patience"),
], ids=["greedy", "beam-5", "beam-3-nbest-3"])
def test_searches_from_the_package_are_the_eager_route(shipped, decoding):
    """Test sentences and generated ones, one at a time: the search starting from the
    package's cache (beam: one memory row for k decoder rows, reordered every step) finds
    the hypotheses of the search from the eager encoder and cross K/V."""
    model, source, tokenizers = shipped
    texts = multi30k_lines("de", 5, "test_2016_flickr")
    rows = [*tokenizers.src.encode(texts), [5] * 30, [7]]
    features = model.inference
    try:
        for ids in rows:
            src = collate_src([ids], model.arch.pad_id, model.arch.eos_id)
            before, features.compiled_source = compiled_source.COUNTS["sources"], source
            fast = search.search(model, src, decoding)
            assert compiled_source.COUNTS["sources"] == before + 1
            features.compiled_source = None
            eager = search.search(model, src, decoding)
            for a, b in zip(fast.hypotheses[0], eager.hypotheses[0], strict=True):
                assert a.tokens == b.tokens
                assert a.score == pytest.approx(b.score, abs=1e-3)
    finally:
        features.compiled_source = None
