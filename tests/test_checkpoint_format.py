"""One checkpoint format number with the list of its optional entries; files of every earlier
format (stored in tests/fixtures/checkpoints, written by the code of their time) still load."""

from __future__ import annotations

import copy
import itertools
import warnings
from pathlib import Path

import pytest
import torch

from seq2seq.checkpoint import CheckpointError, check, load_checkpoint, load_model, seal
from seq2seq.checkpoint_format import ENTRIES, FORMAT, READABLE_FORMATS, entries_of
from seq2seq.config import DecodingConfig
from seq2seq.translation.translator import Translator

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "checkpoints"
OLD = {1: [], 2: [], 3: ["calibration"], 4: ["calibration", "shortlist"]}


def _load(path: Path) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # format 1's "cannot be detected" (tested below)
        return load_checkpoint(path)


@pytest.mark.parametrize("fmt", sorted(OLD))
def test_a_stored_file_of_each_earlier_format_loads_and_translates(fmt):
    path = FIXTURES / f"format{fmt}.ckpt"
    meta = _load(path)["seq2seq"]
    assert meta["format"] == fmt and entries_of(meta) == OLD[fmt]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _, model = load_model(path)
    assert [("cannot be detected" in str(w.message)) for w in seen] == ([True] if fmt == 1 else [])
    assert model(torch.tensor([[5, 6, 7, 2]]), torch.tensor([[1, 5, 6]])).isfinite().all()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = Translator.from_checkpoint(path, DecodingConfig(max_len_b=5)).translate(["Ein Hund."])
    assert len(out) == 1 and isinstance(out[0], str)


@pytest.mark.parametrize("fmt", sorted(OLD))
def test_resealing_an_old_file_lists_its_entries_and_keeps_its_sum(fmt):
    old = _load(FIXTURES / f"format{fmt}.ckpt")
    new = seal(copy.deepcopy(old))["seq2seq"]
    assert new["format"] == FORMAT and new["entries"] == OLD[fmt]
    if fmt > 1:  # the sum covers what decides outputs, not the format number
        assert new["checksum"] == old["seq2seq"]["checksum"]
    check(seal(copy.deepcopy(old)))


def _sealed_with(entries: tuple[str, ...]) -> dict:
    base = _load(FIXTURES / "format4.ckpt")
    meta = base["seq2seq"]
    meta["averaged_from"] = ["a.ckpt", "b.ckpt"]
    for name in set(ENTRIES) - set(entries) - {"directions"}:  # directions: a multilingual model's
        meta.pop(name, None)
    return seal(base)


@pytest.mark.parametrize("entries", [c for n in range(4) for c in itertools.combinations(
    ("averaged_from", "calibration", "shortlist"), n)])
def test_every_set_of_entries_is_listed_and_read_back(entries, tmp_path):
    ckpt = _sealed_with(entries)
    torch.save(ckpt, tmp_path / "x.ckpt")
    meta = load_checkpoint(tmp_path / "x.ckpt")["seq2seq"]
    assert meta["format"] == FORMAT and meta["entries"] == sorted(entries)


@pytest.mark.parametrize(("edit", "message"), [
    (lambda m: m["entries"].append("glossary"), r"entries \['glossary'\] are not ones this version reads"),
    (lambda m: m["entries"].remove("calibration"), r"lists \['shortlist'\] but the file holds"),
    (lambda m: m.pop("shortlist"), r"lists \['calibration', 'shortlist'\] but the file holds \['calibration'\]"),
    (lambda m: m.update(entries="calibration"), "'entries' must be a list of names"),
    (lambda m: m.update(format=FORMAT + 1), rf"format {FORMAT + 1} is not one this version reads"),
    (lambda m: m.update(format=True), "format True is not one this version reads"),
])
def test_an_entries_list_that_disagrees_is_refused_in_one_line(edit, message, tmp_path):
    ckpt = _sealed_with(("calibration", "shortlist"))
    edit(ckpt["seq2seq"])
    torch.save(ckpt, tmp_path / "x.ckpt")
    with pytest.raises(CheckpointError, match=message) as e:
        load_checkpoint(tmp_path / "x.ckpt")
    assert "\n" not in str(e.value) and str(tmp_path / "x.ckpt") in str(e.value)


def test_every_readable_format_has_a_stored_file_or_is_the_current_one():
    assert sorted({*OLD, FORMAT}) == list(READABLE_FORMATS)
    assert sorted(p.name for p in FIXTURES.glob("*.ckpt")) == [f"format{f}.ckpt" for f in OLD]
