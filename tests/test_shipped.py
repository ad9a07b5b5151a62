"""The shipped data and models (``seq2seq.shipped``) work from any folder: a model by its name,
a named test set, ``$SEQ2SEQ_DATA`` naming another copy; a shipped model named is still an
input, never an output; what is not found says each place it looked, once."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from helpers import DE_EN, ROOT, run_main

import seq2seq.shipped as shipped
from seq2seq.cli import evaluate as evaluate_cli
from seq2seq.cli import translate as translate_cli

SHIPPED = {"de_en": DE_EN}
IN_DOMAIN = "Zwei Hunde spielen im Schnee."


@pytest.fixture(scope="module")
def de_en():
    from seq2seq import Translator

    return Translator.from_checkpoint(SHIPPED["de_en"])


def test_evaluate_named_test_set_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no data/ here
    code, out, err = run_main(evaluate_cli.main, ["-m", "multi30k_de_en_tiny", "--limit", "5",
                                                  "--quiet", "--json", "r.json"])
    assert code == 0, err
    record = json.loads((tmp_path / "r.json").read_text())[0]
    assert Path(record["source"]) == ROOT / "data" / "multi30k" / "test_2016_flickr.de.gz"
    assert record["BLEU"]["score"] > 20


@pytest.mark.parametrize("spec", ["multi30k_de_en_tiny", "multi30k_de_en_tiny.ckpt",
                                  "data/models/multi30k_de_en_tiny.ckpt"])
def test_shipped_model_by_name_from_any_folder(spec, tmp_path, monkeypatch, de_en):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(translate_cli.main, ["-m", spec, IN_DOMAIN])
    assert code == 0, err
    assert out.splitlines() == de_en.translate([IN_DOMAIN])


def test_a_shipped_model_named_is_still_an_input_never_an_output(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = SHIPPED["de_en"].read_bytes()
    code, _, err = run_main(evaluate_cli.main, ["-m", "multi30k_de_en_tiny", "--limit", "2", "--force",
                                                "--json", str(SHIPPED["de_en"])])
    assert code == 2 and "would replace an input file" in err
    assert SHIPPED["de_en"].read_bytes() == before


def _small_data_copy(root: Path) -> Path:
    """A SEQ2SEQ_DATA folder: the first 7 val pairs and the De->En model (a link)."""
    (root / "multi30k").mkdir(parents=True)
    for lang in ("de", "en"):
        with gzip.open(ROOT / "data" / "multi30k" / f"val.{lang}.gz", "rt", encoding="utf-8") as f:
            lines = [next(f) for _ in range(7)]
        with gzip.open(root / "multi30k" / f"val.{lang}.gz", "wt", encoding="utf-8") as f:
            f.writelines(lines)
    (root / "models").mkdir()
    (root / "models" / "mine.ckpt").symlink_to(SHIPPED["de_en"])
    return root


def test_seq2seq_data_names_another_copy(tmp_path, monkeypatch):
    data = _small_data_copy(tmp_path / "elsewhere")
    monkeypatch.setenv(shipped.ENV, str(data))
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(evaluate_cli.main, ["-m", "mine", "--split", "val", "--quiet",
                                                "--json", "r.json"])
    assert code == 0, err
    record = json.loads((tmp_path / "r.json").read_text())[0]
    assert record["source"] == str(data / "multi30k" / "val.de.gz") and record["sentences"] == 7


def test_not_found_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.setenv(shipped.ENV, str(tmp_path / "nothing"))
    monkeypatch.setattr(shipped, "CHECKOUT_DATA", tmp_path / "no_checkout")
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(evaluate_cli.main, ["-m", str(SHIPPED["de_en"]), "--limit", "2"])
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    for place in (tmp_path / "nothing" / "multi30k", tmp_path / "no_checkout" / "multi30k",
                  tmp_path / "data" / "multi30k"):
        assert str(place) in err
    assert shipped.ENV in err
    code, _, err = run_main(translate_cli.main, ["-m", "no_such_model", "x"])
    assert code == 2 and "no such file" in err and str(tmp_path / "nothing" / "models") in err


@pytest.mark.parametrize("env", [None, "checkout", "link"])
def test_not_found_names_each_place_once(env, tmp_path, monkeypatch):
    """In the checkout ``./data`` is the checkout's data/ (and $SEQ2SEQ_DATA may name it
    too, or a link to it): the error lists that folder once."""
    monkeypatch.chdir(ROOT)
    if env is None:
        monkeypatch.delenv(shipped.ENV, raising=False)
    else:
        (tmp_path / "link").symlink_to(ROOT / "data")
        monkeypatch.setenv(shipped.ENV, str(ROOT / "data" if env == "checkout" else tmp_path / "link"))
    code, _, err = run_main(translate_cli.main, ["-m", "no_such_model", "x"])
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    places = err.split("looked in ", 1)[1].split(" ($")[0].strip().split(", ")
    assert len(places) == 1 and places[0].endswith("no_such_model.ckpt"), err
