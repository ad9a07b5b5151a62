"""The models shipped under data/models/ are what the README says they are: small, fp16,
one teacher and one distilled student per direction, and each reproduces the BLEU of
its committed evaluation JSON when decoded the same way, from the checkpoint file alone."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from seq2seq.checkpoint import load_checkpoint
from seq2seq.config.decoding import stored_decoding
from seq2seq.data.sources import read_lines
from seq2seq.metrics import all_scores
from seq2seq.translation.translator import Translator

ROOT = Path(__file__).resolve().parents[1]
MODELS = {"multi30k_de_en_tiny": ("de", "en"), "multi30k_en_de_tiny": ("en", "de"),
          "multi30k_en_de_student": ("en", "de"), "multi30k_de_en_student": ("de", "en")}
CASES = [pytest.param(pair, ROOT / "data" / "models" / f"{name}.ckpt", id=name) for name, pair in MODELS.items()]


def _search(record: dict | None) -> str:
    """A record's test id: greedy, beamK, or missing (no evaluation JSON)."""
    decoding = (record or {}).get("decoding", {})
    return "beam{}".format(decoding["beam_size"]) if decoding.get("method") == "beam" else decoding.get("method", "missing")


def test_every_shipped_model_is_checked_here():
    assert sorted(p.stem for p in (ROOT / "data" / "models").glob("*.ckpt")) == sorted(MODELS)


def _records() -> list:
    """One case per record of each model's JSON; a missing JSON is one failing case."""
    out = []
    for case in CASES:
        model = case.values[1]
        path = model.with_suffix(".json")
        records = json.loads(path.read_text()) if path.exists() else [None]
        out += [pytest.param(model, r, id=f"{model.stem}-{_split(r)}{_search(r)}",
                             marks=[pytest.mark.slow] if _split(r) else []) for r in records]
    return out


def _split(record: dict | None) -> str:
    """"" for test_2016_flickr (the default run re-checks it), else the split's name and a
    dash: the other test sets are re-checked by the slow run."""
    test_set = (record or {}).get("test_set", "multi30k/test_2016_flickr")
    split = test_set.split()[0].split("/")[-1]
    return "" if split == "test_2016_flickr" else f"{split}-"


@pytest.mark.parametrize(("pair", "model"), CASES)
def test_shipped_model_is_small_half_precision(pair, model):
    assert model.stat().st_size <= 10 * 2**20
    ckpt = load_checkpoint(model)  # weights_only=True inside
    assert (ckpt["seq2seq"]["src_lang"], ckpt["seq2seq"]["tgt_lang"]) == pair
    floats = [v for v in ckpt["state_dict"].values() if v.is_floating_point()]
    assert floats and all(v.dtype == torch.float16 for v in floats)


@pytest.mark.parametrize(("model", "record"), _records())
def test_shipped_model_reproduces_its_evaluation(model, record):
    assert record is not None, f"{model.with_suffix('.json')} is missing"
    # a record written before the n-gram rule or the number repair existed was decoded without
    decoding, load = stored_decoding({"no_repeat_ngram_size": 0, "restore_numbers": False,
                                      **record["decoding"]})
    translator = Translator.from_checkpoint(model, decoding, **dataclasses.asdict(load))
    src = read_lines(ROOT / record["source"])
    refs = read_lines(ROOT / record["reference"])
    scores = all_scores(translator.translate(src), refs)
    for name in ("BLEU", "BLEU-lc-tok", "chrF"):
        # same decoding, same weights; another CPU's kernels may sum floats in another order
        # and flip a near-tie in a few sentences, hence a small tolerance
        assert scores[name].score == pytest.approx(record[name]["score"], abs=0.3), name
        assert scores[name].signature == record[name]["signature"]


@pytest.mark.parametrize(("pair", "model"), CASES)
def test_shipped_model_is_calibrated_with_the_defaults(pair, model):
    """Its "unsure" threshold (seq2seq-calibrate, default settings) is the default quantile of
    the confidences of its greedy translations of Multi30k val, computed here again."""
    from seq2seq.config import CalibrationConfig

    entry = load_checkpoint(model)["seq2seq"]["calibration"]
    d = CalibrationConfig()
    assert (entry["quantile"], entry["split"], entry["search"]) == (d.quantile, d.split, "greedy")
    src = read_lines(ROOT / "data" / "multi30k" / f"val.{pair[0]}.gz")
    translator = Translator.from_checkpoint(model)
    values = [r.confidence for r in translator.translate_full(src)]
    assert entry["n"] == len(values)
    # another CPU's kernels may sum floats in another order: a small tolerance
    assert entry["threshold"] == pytest.approx(float(np.quantile(values, d.quantile)), abs=2e-3)
    assert translator.unsure_below == entry["threshold"]
