"""Exports of a multilingual model. CTranslate2: a source-tag model takes the tag as the
first source token, a decoder-tag model as ``target_prefix`` (``decoder_start_token`` None);
either way its greedy output equals ours, token for token, in two directions, and
``directions.json`` says what to pass. HF Marian/Pegasus refuse it on one line."""

from __future__ import annotations

import json

import pytest
from helpers import run_main, save_multilingual_checkpoint

from seq2seq.cli.export import main as export_main
from seq2seq.config import DecodingConfig
from seq2seq.export import export
from seq2seq.translation.translator import Translator

TEXTS = ["A dog runs through the snow.", "Zwei Männer spielen Fußball.",
         "Une femme lit un livre dans le parc.", "Children."]
N = 12  # max output tokens, the same rule on both sides


pytestmark = pytest.mark.usefixtures("one_thread")


def ours(ckpt, tgt: str, src: str) -> list[list[str]]:
    """Our greedy output pieces (without the n-gram rule, which CTranslate2 lacks)."""
    decoding = DecodingConfig(max_len_a=0.0, max_len_b=N, no_repeat_ngram_size=0)
    results = Translator.from_checkpoint(ckpt, decoding).translate_full(
        TEXTS, need_attention=True, target_lang=tgt, source_lang=src)
    return [r.tgt_pieces[:-1] for r in results]  # without the closing "</s>"


@pytest.mark.parametrize("position", ["source", "decoder"])
def test_ctranslate2_equals_ours_in_two_directions(position, tmp_path):
    ct2 = pytest.importorskip("ctranslate2")
    import sentencepiece

    ckpt = save_multilingual_checkpoint(tmp_path / "m.ckpt", "en<>de,fr", position, seed=3)
    out = export(ckpt, "ctranslate2", tmp_path / "ct2")
    info = json.loads((out / "directions.json").read_text())
    assert info["pairs"] == ["en-de", "de-en", "en-fr", "fr-en"]
    assert info["tag_position"] == position and info["tags"] == {"de": "<2de>", "en": "<2en>", "fr": "<2fr>"}
    assert ("target_prefix" in info["usage"]) == (position == "decoder")
    sp = sentencepiece.SentencePieceProcessor(model_file=str(out / "source.model"))
    translator = ct2.Translator(str(out), device="cpu", inter_threads=1, intra_threads=1)
    outputs = {}
    for src, tgt in (("en", "de"), ("en", "fr")):
        pieces = [sp.encode(t, out_type=str) for t in TEXTS]
        tag = info["tags"][tgt]
        if position == "source":  # what directions.json tells a CTranslate2 user to pass
            batch, prefix = [[tag, *p] for p in pieces], None
        else:
            batch, prefix = pieces, [[tag]] * len(pieces)
        results = translator.translate_batch(
            batch, target_prefix=prefix, beam_size=1, max_decoding_length=N, min_decoding_length=0,
            suppress_sequences=[["<pad>"], ["<s>"]])
        theirs = [r.hypotheses[0] for r in results]
        assert theirs == ours(ckpt, tgt, src)
        outputs[tgt] = theirs
    assert outputs["de"] != outputs["fr"]  # the tag reaches the model


def test_hf_exports_refuse_a_multilingual_model(tmp_path):
    pytest.importorskip("transformers")
    ckpt = save_multilingual_checkpoint(tmp_path / "m.ckpt", "en<>de", "source")
    for fmt in ("hf", "hf-marian", "hf-pegasus"):
        code, out, err = run_main(export_main, ["-m", str(ckpt), "--to", fmt, "--output",
                                                str(tmp_path / fmt)])
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert "multilingual" in err and "en-de, de-en" in err and "--to ctranslate2" in err
        assert not (tmp_path / fmt).exists()
