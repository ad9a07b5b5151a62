"""One sentence's beam search with its step's scoring compiled (``decoding.compiled_beam``):
it finds the eager beam search's hypotheses (tokens, scores, n-best) on test sentences and
generated ones, one at a time, under the rules (n-gram bans, min and max length, a
decoder-side start token); it is not used where it does not apply, with the same results;
its load check catches a package whose candidates are wrong."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import multi30k_lines, needs_cpp_compiler

from seq2seq.config import DecodingConfig
from seq2seq.data.batch import collate_src
from seq2seq.decoding import compiled_beam, search
from seq2seq.decoding.rules import NGRAM_MAX
from seq2seq.model.inference import compiled
from seq2seq.translation.translator import Translator

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "data" / "models" / "multi30k_de_en_tiny.ckpt"
BEAM5 = DecodingConfig(method="beam", beam_size=5)

pytestmark = [pytest.mark.slow, needs_cpp_compiler]


@pytest.fixture(scope="module")
def model(compiled_cache):
    """The shipped De->En model with ``--compile``, its beam-5 and beam-3 packages made once."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SEQ2SEQ_CACHE_DIR", str(compiled_cache))
        translator = Translator.from_checkpoint(SHIPPED, BEAM5, compile=True)
        for k in (5, 3):
            translator.model.inference.compiled_beam.prepare(translator.model, k)
        assert set(translator.model.inference.compiled_beam.loaders) == {5, 3}
    return translator


def _both(model, src: torch.Tensor, decoding: DecodingConfig, **kwargs):
    """(compiled, eager) beam results of ``src`` and the package steps the first took; the
    eager one from the eager encoder and cross K/V, scored in ``beam.py``."""
    features, before = model.inference, compiled_beam.COUNTS["steps"]
    fast = search.beam_search(model, src, decoding, **kwargs)
    steps = compiled_beam.COUNTS["steps"] - before
    beam, source = features.compiled_beam, features.compiled_source
    features.compiled_beam = features.compiled_source = None
    try:
        eager = search.beam_search(model, src, decoding, **kwargs)
    finally:
        features.compiled_beam, features.compiled_source = beam, source
    return fast, eager, steps


def _same(fast, eager) -> None:
    assert len(fast.hypotheses[0]) == len(eager.hypotheses[0])
    for a, b in zip(fast.hypotheses[0], eager.hypotheses[0]):
        assert a.tokens == b.tokens
        assert a.score == pytest.approx(b.score, abs=1e-3)
        assert a.normalized == pytest.approx(b.normalized, abs=1e-3)
    assert torch.equal(fast.output, eager.output)


def _sources(translator) -> list[torch.Tensor]:
    """Test sentences and generated ones (a token repeated, one token, a long random row),
    each a batch of one."""
    arch, gen = translator.model.arch, torch.Generator().manual_seed(4)
    ids = [*translator.tokenizers.src.encode(multi30k_lines("de", 5, "test_2016_flickr")),
           [5] * 30, [7], torch.randint(4, arch.src_vocab_size, (50,), generator=gen).tolist()]
    return [collate_src([row], arch.pad_id, arch.eos_id) for row in ids]


@pytest.mark.parametrize("decoding", [
    BEAM5,  # the default rules: the 4-gram ban, stopping at the exact bound
    DecodingConfig(method="beam", beam_size=5, nbest=5, stopping="patience"),
    DecodingConfig(method="beam", beam_size=3, nbest=2, no_repeat_ngram_size=0),
    DecodingConfig(method="beam", beam_size=3, no_repeat_ngram_size=2, min_len=12),
    DecodingConfig(method="beam", beam_size=5, max_len_a=0.0, max_len_b=3),
], ids=["default", "patience-nbest-5", "beam-3-no-ban", "beam-3-ban-2-min-12", "max-3"])
def test_compiled_scoring_is_the_eager_beam_search(model, decoding):
    for src in _sources(model):
        fast, eager, steps = _both(model.model, src, decoding)
        assert steps > 0
        _same(fast, eager)


def test_a_decoder_start_token_and_the_translator(model):
    """A decoder-side start token reaches the package; whole texts through the translator
    are the eager lines."""
    fast, eager, steps = _both(model.model, _sources(model)[0], BEAM5, first=torch.tensor([9]))
    assert steps > 0
    _same(fast, eager)
    texts = multi30k_lines("de", 8, "test_2016_flickr")
    before = compiled_beam.COUNTS["steps"]
    lines = [model.translate([text])[0] for text in texts]
    assert compiled_beam.COUNTS["steps"] - before >= len(texts)
    features = model.model.inference
    beam, features.compiled_beam = features.compiled_beam, None
    try:
        assert lines == [model.translate([text])[0] for text in texts]
    finally:
        features.compiled_beam = beam


def test_where_it_does_not_apply_beam_py_scores(model):
    """Two sentences, an n-gram ban past NGRAM_MAX, a forced length, a step hook: no
    package step, and the results of the search without the package."""
    m, arch = model.model, model.model.arch
    two = collate_src([[5, 6, 7], [8, 9]], arch.pad_id, arch.eos_id)
    cases = [(two, BEAM5, {}),
             (two[:1], DecodingConfig(method="beam", beam_size=5,
                                      no_repeat_ngram_size=NGRAM_MAX + 1), {}),
             (two[:1], BEAM5, {"force_length": 4}),
             (two[:1], BEAM5, {"on_step": lambda t, lp: None})]
    for src, decoding, kwargs in cases:
        fast, eager, steps = _both(m, src, decoding, **kwargs)
        assert steps == 0
        assert torch.equal(fast.output, eager.output)


def test_the_load_check_catches_wrong_candidates(model):
    """The real package passes; one whose tokens are off by one, or whose scores leave out
    the beams' own, fails."""
    m, loader = model.model, model.model.inference.compiled_beam.loaders[5]
    assert compiled_beam.self_check(m, loader, 5) <= compiled.CHECK_TOLERANCE

    class OffByOne:
        def boxed_run(self, inputs):
            scores, origin, tok = loader.boxed_run(inputs)
            return [scores, origin, (tok + 1) % m.arch.tgt_vocab_size]

    class NoBeamScores:
        def boxed_run(self, inputs):
            inputs[-2] = torch.zeros_like(inputs[-2])
            return loader.boxed_run(inputs)

    assert compiled_beam.self_check(m, OffByOne(), 5) > 1e-2
    assert compiled_beam.self_check(m, NoBeamScores(), 5) > 1e-2
