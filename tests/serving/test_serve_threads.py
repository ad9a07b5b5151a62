"""A lone text's model call on the server's worker thread runs torch on one thread: the
answers are the same as with torch's own count, and the count is restored after the call
(also when the call fails), so merged calls and other work keep theirs."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from helpers import DE_EN, multi30k_lines

from seq2seq.config import DecodingConfig
from seq2seq.serving.api import translate_texts
from seq2seq.serving.models import load_models


@pytest.fixture(scope="module")
def served():
    return next(iter(load_models([str(DE_EN)]).values()))


@pytest.fixture(autouse=True)
def _keep_thread_count():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _lines(results):
    return [(r.hyp, r.flags, [h for h, _ in r.nbest]) for r in results]


@pytest.mark.parametrize("decoding", [DecodingConfig(), DecodingConfig(method="beam", beam_size=3,
                                                                       nbest=2)])
def test_a_lone_text_translates_the_same_on_one_thread_and_the_count_comes_back(served, decoding):
    texts = multi30k_lines("de", 6, "test_2016_flickr")
    torch.set_num_threads(2)
    with ThreadPoolExecutor(1) as worker:  # as the batcher runs it
        for text in texts:
            ref = worker.submit(translate_texts, served, decoding, {}, [text]).result()
            one = worker.submit(translate_texts, served, decoding, {}, [text],
                                lone_text_threads=1).result()
            assert _lines(one) == _lines(ref)
            assert worker.submit(torch.get_num_threads).result() == 2
        merged = worker.submit(translate_texts, served, decoding, {}, texts,
                               lone_text_threads=1).result()
    assert _lines(merged) == [line for t in texts for line in _lines(
        translate_texts(served, decoding, {}, [t]))]


def test_the_count_comes_back_when_the_call_fails(served, monkeypatch):
    def boom(*args, **kwargs):
        assert torch.get_num_threads() == 1
        raise RuntimeError("boom")

    torch.set_num_threads(2)
    monkeypatch.setattr("seq2seq.serving.api.Translator.translate_full", boom)
    with pytest.raises(RuntimeError, match="boom"):
        translate_texts(served, DecodingConfig(), {}, ["Ein Hund."], lone_text_threads=1)
    assert torch.get_num_threads() == 2
