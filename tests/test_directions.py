"""Directions of a multilingual model: specs, refusals, the checkpoint entry, and where the
target-language tag goes when translating."""

from __future__ import annotations

import pytest
import torch
from helpers import save_multilingual_checkpoint, save_tiny_checkpoint, tiny_tokenizers

from seq2seq.checkpoint import CheckpointError, load_checkpoint
from seq2seq.config import DecodingConfig
from seq2seq.data.batch import collate_src
from seq2seq.decoding.search import greedy, search
from seq2seq.directions import DirectionError, Directions, parse_pairs, tag_piece
from seq2seq.files import save_atomic
from seq2seq.translation.translator import Translator

TEXTS = ["Ein Hund läuft im Park.", "A man rides a bike.", "", "Une femme chante."]


def test_specs_name_the_same_pairs_in_every_form():
    assert parse_pairs("en-de, de-en") == (("en", "de"), ("de", "en"))
    assert parse_pairs(["en-de", "de-en"]) == parse_pairs("en<>de")
    assert set(parse_pairs("all:en,de,fr")) == {(a, b) for a in "en de fr".split()
                                                  for b in "en de fr".split() if a != b}
    assert len(parse_pairs("en<>de,fr,cs")) == 6


@pytest.mark.parametrize("spec, words", [
    ("en-en", "into itself"), ("en-de,en-de", "twice"), ("ende", "not a direction"),
    ("EN-de", "not a language code"), ([], "no direction"),
])
def test_bad_specs_are_refused_by_name(spec, words):
    with pytest.raises(DirectionError, match=words):
        parse_pairs(spec)


def test_resolve_needs_a_trained_direction():
    d = Directions(parse_pairs("en<>de,fr"))
    assert d.resolve(None, "de") == (None, "de")
    with pytest.raises(DirectionError, match="name the target language"):
        d.resolve(None, None)
    with pytest.raises(DirectionError, match="not trained on de-fr; it has en-de, de-en"):
        d.resolve("de", "fr")
    with pytest.raises(DirectionError, match="does not translate into 'cs'"):
        d.resolve(None, "cs")
    assert Directions(parse_pairs("en-de")).resolve(None, None) == (None, "de")
    assert Directions.from_state(d.to_state()) == d


@pytest.fixture(scope="module")
def multi(tmp_path_factory):
    root = tmp_path_factory.mktemp("multi")
    return {pos: save_multilingual_checkpoint(root / f"{pos}.ckpt", tag_position=pos)
            for pos in ("source", "decoder")}


def test_checkpoint_keeps_its_directions_under_the_checksum(multi, tmp_path):
    ck = load_checkpoint(multi["decoder"])
    assert Directions.from_state(ck["seq2seq"]["directions"]).tag_position == "decoder"
    ck["seq2seq"]["directions"]["pairs"] = ["en-de"]  # an edit that changes no tensor
    save_atomic(ck, tmp_path / "edited.ckpt")
    with pytest.raises(CheckpointError, match="checksum"):
        load_checkpoint(tmp_path / "edited.ckpt")


def test_unknown_direction_is_refused_naming_the_model_directions(multi):
    tr = Translator.from_checkpoint(multi["source"])
    assert tr.direction_names == ["en-de", "en-fr", "de-en", "de-fr", "fr-en", "fr-de"]
    with pytest.raises(DirectionError, match="into 'cs'; it has en-de, en-fr"):
        tr.translate(TEXTS, target_lang="cs")
    with pytest.raises(DirectionError, match="several languages"):
        tr.translate(TEXTS)


def test_source_tag_leads_the_source(multi):
    tr = Translator.from_checkpoint(multi["source"])
    tag = tr.tokenizers.src.piece_id(tag_piece("fr"))
    full = tr.translate_full(TEXTS[:1], need_attention=True, target_lang="fr")[0]
    assert full.src_pieces[0] == "<2fr>" and full.src_pieces[-1] == "</s>"
    # the same as searching a source built by hand with the tag in front
    ids = tr.tokenizers.src.encode(TEXTS[:1])
    src = collate_src([[tag] + ids[0]], 0, tr.model.arch.eos_id)
    by_hand = greedy(tr.model, src, tr.decoding).hypotheses[0][0].tokens
    assert tr.tokenizers.tgt.decode([by_hand])[0] == full.hyp


@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_decoder_tag_starts_the_decoder_cached_as_uncached(multi, method):
    tr = Translator.from_checkpoint(multi["decoder"], DecodingConfig(method=method, max_len_b=12))
    src = collate_src(tr.tokenizers.src.encode(TEXTS[:2]), 0, tr.model.arch.eos_id)
    tags = [tr.tag_for(lang).decoder for lang in ("de", "en")]
    first = torch.tensor(tags)
    cached = search(tr.model, src, tr.decoding, first=first)
    uncached = search(tr.model, src, tr.decoding, first=first, use_cache=False)
    assert [h[0].tokens for h in cached.hypotheses] == [h[0].tokens for h in uncached.hypotheses]
    # the tag is the decoder's first input: another start, another next-token distribution
    steps = []
    search(tr.model, src[:1], tr.decoding, first=first[:1], on_step=lambda t, lp: steps.append(lp))
    ref = []
    search(tr.model, src[:1], tr.decoding, on_step=lambda t, lp: ref.append(lp))
    assert not torch.allclose(steps[0][:1], ref[0][:1])


def test_single_direction_model_takes_no_tag_and_refuses_another_pair(tmp_path):
    path = save_tiny_checkpoint(tmp_path / "m.ckpt", tiny_tokenizers())
    tr = Translator.from_checkpoint(path)
    assert tr.directions is None and tr.direction_names == ["de-en"]
    assert tr.translate(TEXTS, target_lang="en") == tr.translate(TEXTS)
    with pytest.raises(DirectionError, match="translates de-en, not into 'fr'"):
        tr.translate(TEXTS, target_lang="fr")
