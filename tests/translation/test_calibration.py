"""``seq2seq-calibrate`` and the "unsure" flag: the stored threshold is the chosen quantile of
the confidences of the model's own outputs on the split (computed here independently);
outputs are flagged exactly when their confidence is below it, and nothing else changes;
the entry is under the checksum; bad input is refused with the file untouched; the
translate CLI warns once by default and not with ``--warn-below 0``; the server carries it."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import (
    multi30k_lines,
    run_main,
    save_multilingual_checkpoint,
    save_tiny_checkpoint,
    tiny_tokenizers,
)
from hypothesis import given, settings
from hypothesis import strategies as st

import seq2seq.checkpoint as checkpoint
from seq2seq.checkpoint import CheckpointError, load_checkpoint, seal
from seq2seq.cli import calibrate as calibrate_cli
from seq2seq.cli import translate as translate_cli
from seq2seq.config import DecodingConfig
from seq2seq.translation.calibration import threshold_of
from seq2seq.translation.translator import Translator

LIMIT = 40  # val lines the tiny model is calibrated on


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    """A tiny De->En model, never calibrated."""
    return save_tiny_checkpoint(tmp_path_factory.mktemp("cal") / "raw.ckpt", tiny_tokenizers())


@pytest.fixture(scope="module")
def val_confidences(raw) -> list[float]:
    """Computed without seq2seq.translation.calibration: the default decoding's results."""
    results = Translator.from_checkpoint(raw).translate_full(multi30k_lines("de", LIMIT, "val"))
    return [r.confidence for r in results]


def calibrate(src: Path, *args: str) -> tuple[int, str, str]:
    return run_main(calibrate_cli.main, ["-m", str(src), *args])


@pytest.fixture(scope="module")
def calibrated(raw, tmp_path_factory) -> Path:
    """``raw`` calibrated at the 0.3 quantile: about a third of captions-like output flagged."""
    out = tmp_path_factory.mktemp("cal") / "cal.ckpt"
    code, _, err = calibrate(raw, "--limit", str(LIMIT), "--quantile", "0.3", "-o", str(out))
    assert code == 0, err
    return out


def threshold(path: Path) -> float:
    return load_checkpoint(path)["seq2seq"]["calibration"]["threshold"]


# ---------------------------------------------------------------- the threshold
@pytest.mark.parametrize("quantile", ["0.02", "0.3", "0.499"])
def test_threshold_is_the_quantile_of_the_validation_confidences(raw, val_confidences, tmp_path,
                                                                 quantile):
    out = tmp_path / "out.ckpt"
    code, _, err = calibrate(raw, "--limit", str(LIMIT), "--quantile", quantile, "-o", str(out))
    assert code == 0, err
    entry = load_checkpoint(out)["seq2seq"]["calibration"]
    q = float(quantile)
    assert entry == {"threshold": pytest.approx(float(np.quantile(val_confidences, q)), rel=1e-9),
                     "quantile": q, "split": "val", "search": "greedy", "n": LIMIT}
    below = sum(c < entry["threshold"] for c in val_confidences)
    assert below <= math.ceil(q * LIMIT)  # about that share of the split would be flagged


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.floats(1e-6, 1.0), min_size=1, max_size=50),
       quantile=st.floats(1e-4, 0.4999))
def test_threshold_of_is_torch_quantile(values, quantile):
    want = torch.quantile(torch.tensor(values, dtype=torch.float64), quantile).item()
    assert threshold_of(values, quantile) == pytest.approx(want, rel=1e-12, abs=1e-15)


# ---------------------------------------------------------------- the flag
TEXTS = [*multi30k_lines("de", 30, "test_2016_flickr"), "", "   ",
         "Ein Hund rennt. Eine Katze schläft im Gras.", "Die Zentralbank hat die Zinsen erhöht."]


@pytest.mark.parametrize("decoding", [DecodingConfig(), DecodingConfig(method="beam", beam_size=3),
                                      DecodingConfig(split_sentences=False)],
                         ids=["greedy", "beam3", "unsplit"])
def test_flags_are_exactly_the_outputs_below_the_threshold(raw, calibrated, decoding):
    t = threshold(calibrated)
    got = Translator.from_checkpoint(calibrated, decoding).translate_full(TEXTS)
    plain = Translator.from_checkpoint(raw, decoding).translate_full(TEXTS)
    assert [("unsure" in r.flags) for r in got] == [r.confidence < t for r in got]
    assert 0 < sum("unsure" in r.flags for r in got) < len(got)  # the test can tell
    for g, p in zip(got, plain):  # a calibration changes nothing else
        assert (g.hyp, g.score, g.confidence, g.nbest) == (p.hyp, p.score, p.confidence, p.nbest)
        assert [f for f in g.flags if f != "unsure"] == p.flags and "unsure" not in p.flags


def test_an_ensemble_has_no_threshold(calibrated):
    ensemble = Translator.from_checkpoints([calibrated, calibrated])
    assert ensemble.unsure_below is None
    assert all("unsure" not in r.flags for r in ensemble.translate_full(TEXTS[:10]))


# ---------------------------------------------------------------- the file
def test_only_the_calibration_is_added_weights_bit_identical(raw, calibrated):
    before, after = torch.load(raw, weights_only=True), torch.load(calibrated, weights_only=True)
    assert before.keys() == after.keys() and before["state_dict"].keys() == after["state_dict"].keys()
    for k, v in before["state_dict"].items():
        w = after["state_dict"][k]
        assert v.dtype == w.dtype and v.shape == w.shape
        assert torch.equal(v.view(-1).view(torch.uint8), w.view(-1).view(torch.uint8)), k
    changed = {k for k in before["seq2seq"].keys() | after["seq2seq"].keys()
               if before["seq2seq"].get(k) != after["seq2seq"].get(k)}
    assert changed == {"calibration", "checksum", "entries"}
    assert after["seq2seq"]["format"] == 5 and after["seq2seq"]["entries"] == ["calibration"]


def test_in_place_keeps_the_mode_and_recalibrates(raw, tmp_path):
    path = tmp_path / "m.ckpt"
    shutil.copy(raw, path)
    os.chmod(path, 0o640)
    code, _, err = calibrate(path, "--limit", "10")
    assert code == 0 and "are unsure" in err.splitlines()[-1], err
    assert load_checkpoint(path)["seq2seq"]["calibration"]["n"] == 10
    assert path.stat().st_mode & 0o777 == 0o640
    code, _, err = calibrate(path, "--limit", "12")  # again: replaced, not stacked
    assert code == 0 and load_checkpoint(path)["seq2seq"]["calibration"]["n"] == 12


@pytest.mark.parametrize("edit", ["threshold", "quantile", "removed"])
def test_an_edited_or_removed_calibration_is_refused(calibrated, tmp_path, edit):
    ckpt = torch.load(calibrated, weights_only=True)
    if edit == "removed":
        del ckpt["seq2seq"]["calibration"]
    else:
        ckpt["seq2seq"]["calibration"][edit] *= 0.5
    torch.save(ckpt, tmp_path / "edited.ckpt")
    with pytest.raises(CheckpointError, match="edited or damaged after it was written"):
        load_checkpoint(tmp_path / "edited.ckpt")
    code, out, err = run_main(translate_cli.main, ["-m", str(tmp_path / "edited.ckpt"), "Hund."])
    assert code == 2 and out == "" and "edited or damaged" in err and err.count("\n") == 1


@pytest.mark.parametrize("entry", [{"threshold": float("nan")}, {"threshold": 0.0},
                                   {"threshold": 1.5}, {"threshold": "0.4"}, {"threshold": True},
                                   {}, [0.4], {"threshold": 0.4, "x": [1]}])
def test_a_resealed_bad_calibration_is_refused(calibrated, tmp_path, entry):
    ckpt = torch.load(calibrated, weights_only=True)
    ckpt["seq2seq"]["calibration"] = entry
    torch.save(seal(ckpt), tmp_path / "bad.ckpt")
    with pytest.raises(CheckpointError, match="'calibration'"):
        load_checkpoint(tmp_path / "bad.ckpt")


# ---------------------------------------------------------------- bad input
def _state(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mode


def _refused(code: int, out: str, err: str, *words: str) -> None:
    assert code == 2 and out == "" and err.count("\n") == 1, (code, err)
    assert err.startswith("seq2seq-calibrate: error: ") and "Traceback" not in err
    assert all(w in err for w in words), (words, err)


@pytest.mark.parametrize(("args", "words"), [
    (["--quantile", "nan"], ["--quantile nan"]), (["--quantile", "inf"], ["--quantile inf"]),
    (["--quantile", "0"], ["--quantile 0"]), (["--quantile", "-0.1"], ["--quantile -0.1"]),
    (["--quantile", "0.5"], ["--quantile 0.5"]), (["--quantile", "1"], ["--quantile 1"]),
    (["--quantile", "x"], ["--quantile"]), (["--split", "train"], ["--split", "train"]),
    (["--split", "bogus"], ["--split", "bogus"]), (["--limit", "0"], ["--limit 0"]),
])
def test_bad_options_are_refused_and_the_file_is_untouched(raw, tmp_path, args, words):
    path = tmp_path / "m.ckpt"
    shutil.copy(raw, path)
    before = _state(path)
    _refused(*calibrate(path, *args), *words)
    assert _state(path) == before


def test_bad_files_are_refused_and_left_as_they_were(raw, tmp_path):
    text = tmp_path / "notes.ckpt"
    text.write_text("not a checkpoint\n")
    multi = save_multilingual_checkpoint(tmp_path / "multi.ckpt")
    readonly = tmp_path / "ro.ckpt"
    shutil.copy(raw, readonly)
    os.chmod(readonly, 0o444)
    other = tmp_path / "other.txt"
    other.write_text("keep me\n")
    cases = [(text, [], ["notes.ckpt"]), (multi, [], ["multilingual"]),
             (readonly, [], ["read-only", "ro.ckpt"]), (raw, ["-o", str(other)], ["other.txt"]),
             (raw, ["-o", str(other), "--force"], ["not a checkpoint"]),
             (tmp_path / "missing.ckpt", [], ["missing.ckpt"])]
    for path, args, words in cases:
        files = {p: _state(p) for p in (text, multi, readonly, other, raw)}
        _refused(*calibrate(path, "--limit", "3", *args), *words)
        assert {p: _state(p) for p in files} == files
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["notes.ckpt", "multi.ckpt", "ro.ckpt", "other.txt"])  # no temporary left


def test_a_failed_write_leaves_the_old_file(raw, tmp_path, monkeypatch):
    path = tmp_path / "m.ckpt"
    shutil.copy(raw, path)
    before = _state(path)

    def full_disk(obj, f):
        f.write(b"half a checkpoint")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint.torch, "save", full_disk)
    _refused(*calibrate(path, "--limit", "3"), "No space left")
    assert _state(path) == before and [p.name for p in tmp_path.iterdir()] == ["m.ckpt"]


# ---------------------------------------------------------------- seq2seq-translate
def _translate(path: Path, *args: str) -> tuple[list[dict], list[str]]:
    code, out, err = run_main(translate_cli.main, ["-m", str(path), "--output-format", "jsonl",
                                                   *args, *TEXTS])
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines()], err.splitlines()


def _unsure_lines(err: list[str]) -> list[str]:
    return [line for line in err if "unsure" in line]


def test_translate_warns_once_by_default_with_the_count(calibrated):
    records, err = _translate(calibrated)
    t = threshold(calibrated)
    flagged = [i + 1 for i, r in enumerate(records) if "unsure" in r["flags"]]
    assert flagged == [i + 1 for i, r in enumerate(records) if r["confidence"] < t] and flagged
    (line,) = _unsure_lines(err)
    assert line.startswith(f"seq2seq-translate: warning: {len(flagged)} of {len(TEXTS)} output lines "
                           "are unsure")
    assert f"{t:.3g}" in line and "--warn-below 0" in line


def test_warn_below_zero_turns_it_off_and_a_value_overrides(calibrated, raw):
    records, err = _translate(calibrated, "--warn-below", "0")
    assert not _unsure_lines(err) and all("unsure" not in r["flags"] for r in records)
    records, err = _translate(calibrated, "--warn-below", "0.9")
    flagged = sum("unsure" in r["flags"] for r in records)
    assert flagged == sum(r["confidence"] < 0.9 for r in records) > 0
    (line,) = _unsure_lines(err)
    assert f"warning: {flagged} of " in line and "0.9 (--warn-below)" in line
    records, err = _translate(raw)  # not calibrated: as before, no threshold
    assert not _unsure_lines(err) and all("unsure" not in r["flags"] for r in records)


# ---------------------------------------------------------------- the server
def test_server_answers_carry_the_flag_and_models_the_threshold(raw, calibrated):
    pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[serve]'")
    from fastapi.testclient import TestClient

    from seq2seq.serving import create_app, load_models

    models = load_models([f"cal={calibrated}", f"raw={raw}"])
    tok = models["cal"].translator.tokenizers.src
    texts = [t for t, ids in zip(TEXTS, tok.encode(TEXTS)) if len(ids) < 60]  # the server's limit
    with TestClient(create_app(models)) as client:
        listed = {m["name"]: m for m in client.get("/models").json()}
        t = threshold(calibrated)
        assert listed["cal"]["unsure_below"] == t and listed["raw"]["unsure_below"] is None
        for beam in (1, 3):
            got = client.post("/translate", json={"texts": texts, "beam": beam}).json()["results"]
            assert [("unsure" in r["flags"]) for r in got] == [r["confidence"] < t for r in got]
            assert any("unsure" in r["flags"] for r in got)
        raw_got = client.post("/translate", json={"texts": texts, "model": "raw"}).json()["results"]
        assert all("unsure" not in r["flags"] for r in raw_got)
        att = client.post("/attention", json={"text": TEXTS[-1], "beam": 1}).json()
        assert ("unsure" in att["flags"]) == (att["confidence"] < t)
