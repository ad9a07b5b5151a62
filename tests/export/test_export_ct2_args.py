"""CTranslate2 searches as ``seq2seq-translate`` does with the arguments docs/export.md gives
(:func:`ct2_translate_kwargs`, :func:`ct2_translate`): the same output, token for token,
greedy and beam 5 on both shipped models, greedy on an imported OPUS-MT-shaped model (whose
outputs often end at once or run to the length limit: the two rules CTranslate2's defaults
get wrong) and on multilingual exports in both tag placements, empty sources included."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import multi30k_lines, save_multilingual_checkpoint

from seq2seq.config import DecodingConfig
from seq2seq.export import export
from seq2seq.export.ctranslate2 import ct2_translate, ct2_translate_kwargs
from seq2seq.translation.translator import Translator

ct2 = pytest.importorskip("ctranslate2")
import sentencepiece  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "data" / "models"
GREEDY, BEAM = DecodingConfig(), DecodingConfig(method="beam", beam_size=5, stopping="patience")


def ours(ckpt, texts: list[str], decoding: DecodingConfig, **direction) -> list[list[str]]:
    """``seq2seq-translate``'s output pieces (without the closing ``</s>``)."""
    results = Translator.from_checkpoint(ckpt, decoding).translate_full(
        texts, need_attention=True, **direction)
    return [r.tgt_pieces[:-1] if r.tgt_pieces else [] for r in results]


def exported(ckpt, folder: Path):
    out = export(ckpt, "ctranslate2", folder)
    translator = ct2.Translator(str(out), device="cpu", inter_threads=1, intra_threads=1)
    sp = sentencepiece.SentencePieceProcessor(model_file=str(out / "source.model"))
    return out, translator, sp


@pytest.mark.parametrize(("name", "lang"), [("multi30k_de_en_tiny", "de"),
                                             ("multi30k_en_de_tiny", "en")])
def test_shipped_models_greedy_and_beam(name, lang, tmp_path):
    ckpt = MODELS / f"{name}.ckpt"
    _, translator, sp = exported(ckpt, tmp_path / "ct2")
    texts = multi30k_lines(lang, 60, "test_2016_flickr") + ["", "."]
    pieces = [sp.encode(t, out_type=str) for t in texts]
    for decoding in (GREEDY, BEAM):
        theirs = ct2_translate(translator, pieces, decoding, max_positions=1024)
        assert theirs == ours(ckpt, texts, decoding), decoding.method


def test_the_documented_call_for_one_sentence(tmp_path):
    """docs/export.md's explicit arguments (what ct2_translate_kwargs gives) for one text."""
    ckpt = MODELS / "multi30k_de_en_tiny.ckpt"
    _, translator, sp = exported(ckpt, tmp_path / "ct2")
    text = "Ein Hund rennt durch den Schnee."
    pieces = sp.encode(text, out_type=str)
    max_len = int(1.2 * (len(pieces) + 1) + 10)  # our rule: a * (pieces + EOS) + b
    kwargs = ct2_translate_kwargs(len(pieces), BEAM, max_positions=1024)
    assert kwargs == {"beam_size": 5, "patience": 1.0, "num_hypotheses": 1, "length_penalty": 1.0,
                      "no_repeat_ngram_size": 4, "min_decoding_length": 0,
                      "max_decoding_length": max_len, "max_input_length": 1024,
                      "suppress_sequences": [["<pad>"], ["<s>"]]}
    result = translator.translate_batch([pieces], **kwargs)[0].hypotheses[0]
    assert result == ours(ckpt, [text], BEAM)[0]


def test_imported_opus_model_greedy(tmp_path):
    """A random OPUS-shaped model ends about 30 % of steps with EOS: outputs that end at
    once (CTranslate2's default min_decoding_length 1 never does) and outputs that run to
    the per-sentence length limit (its max_decoding_length is per call)."""
    pytest.importorskip("transformers")
    from opus_mt import build_opus_folder

    from seq2seq.hf_import import import_marian

    ckpt = tmp_path / "imported.ckpt"
    import_marian(build_opus_folder(tmp_path / "opus-mt-de-en"), ckpt)
    _, translator, sp = exported(ckpt, tmp_path / "ct2")
    texts = multi30k_lines("de", 60, "test_2016_flickr")
    pieces = [sp.encode(t, out_type=str) for t in texts]
    expected = ours(ckpt, texts, GREEDY)
    assert [] in expected  # the case min_decoding_length=0 is for
    opus = {"max_positions": 512, "never": ["<pad>"]}  # its decoder starts from <pad>
    assert ct2_translate(translator, pieces, GREEDY, **opus) == expected
    ends = [len(e) == ct2_translate_kwargs(len(p), GREEDY, **opus)["max_decoding_length"]
            for e, p in zip(expected, pieces)]
    assert any(ends)  # and the per-sentence limit is reached


@pytest.mark.parametrize("position", ["source", "decoder"])
def test_multilingual_export_greedy_with_empty_sources(position, tmp_path):
    ckpt = save_multilingual_checkpoint(tmp_path / "m.ckpt", "en<>de,fr", position, seed=3)
    out, translator, sp = exported(ckpt, tmp_path / "ct2")
    info = json.loads((out / "directions.json").read_text())
    texts = multi30k_lines("en", 20, "test_2016_flickr") + ["", "Children."]
    pieces = [sp.encode(t, out_type=str) for t in texts]
    for tgt in ("de", "fr"):
        expected = ours(ckpt, texts, GREEDY, target_lang=tgt, source_lang="en")
        theirs = ct2_translate(translator, pieces, GREEDY, max_positions=64,
                               tag=info["tags"][tgt], tag_position=info["tag_position"])
        assert theirs == expected and theirs[-2] == []


@pytest.mark.parametrize(("decoding", "field"), [
    (DecodingConfig(method="beam"), "stopping"),
    (DecodingConfig(length_penalty="gnmt"), "length_penalty"),
    (DecodingConfig(method="sample"), "method"),
])
def test_settings_ctranslate2_cannot_reproduce_are_refused_by_name(decoding, field):
    with pytest.raises(ValueError, match=f"DecodingConfig.{field}="):
        ct2_translate_kwargs(10, decoding)
