"""A newcomer's first hour without dead ends: the shipped data and models work from any
folder, averaging says what it averages, the shipped configs are the shipped models'
recipe, outputs carry a confidence, and ``import seq2seq`` is the public API."""

from __future__ import annotations

import gzip
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import run_main, save_tiny_checkpoint, tiny_tokenizers

import seq2seq.shipped as shipped
from seq2seq.cli import average as average_cli
from seq2seq.cli import evaluate as evaluate_cli
from seq2seq.cli import translate as translate_cli

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = {"de_en": ROOT / "data" / "models" / "multi30k_de_en_tiny.ckpt",
           "en_de": ROOT / "data" / "models" / "multi30k_en_de_tiny.ckpt"}
IN_DOMAIN = "Zwei Hunde spielen im Schnee."  # a short image caption, like Multi30k's
OUT_OF_DOMAIN = "Wie viel kostet das?"  # everyday German, unlike any caption
LOOPING = "Die Geschwindigkeitsbegrenzung auf Autobahnen wird kontrovers diskutiert."


@pytest.fixture(scope="module")
def de_en():
    from seq2seq import Translator

    return Translator.from_checkpoint(SHIPPED["de_en"])


# ---------------------------------------------------------------- shipped data and models
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


# ---------------------------------------------------------------- averaging
def test_average_of_a_missing_folder_says_so(tmp_path):
    (tmp_path / "runs" / "x" / "checkpoints").mkdir(parents=True)
    missing = tmp_path / "runs" / "x" / "lightning_logs" / "version_0" / "checkpoints"
    code, _, err = run_main(average_cli.main, ["-o", str(tmp_path / "a.ckpt"), "--last", "10", str(missing)])
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"{missing}: no such folder" in err
    assert f"this run's checkpoints are in {tmp_path / 'runs' / 'x' / 'checkpoints'}" in err


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory) -> Path:
    return save_tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "one.ckpt", tiny_tokenizers())


def test_average_warns_when_the_window_is_most_of_the_run(tmp_path, snapshot):
    """The quickstart's case: --last 10 over a 1,000-update run's 3 snapshots."""
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    for step in (500, 750, 1000):
        shutil.copy(snapshot, folder / f"step{step:06d}-bleu3{step // 250}.00.ckpt")
    shutil.copy(snapshot, folder / "last.ckpt")
    code, _, err = run_main(average_cli.main, ["-o", str(tmp_path / "avg.ckpt"), "--last", "10", str(folder)])
    assert code == 0 and (tmp_path / "avg.ckpt").is_file()
    lines = err.strip().splitlines()
    assert any("holds only 3" in line for line in lines)
    assert any("steps 500-1000" in line and "75% of this run's 1000 updates" in line for line in lines), err


def test_average_of_a_runs_tail_has_no_window_warning(tmp_path):
    for step in range(250, 10001, 250):
        (tmp_path / f"step{step:06d}.ckpt").touch()
    chosen = average_cli.select(tmp_path, last=10, best=None)
    assert average_cli.window_note(tmp_path, chosen) is None  # 10 x 250 of 10,000: 25%
    assert average_cli.window_note(tmp_path, average_cli.select(tmp_path, last=20, best=None))


# ---------------------------------------------------------------- the shipped configs
def _cli(tmp_path, monkeypatch, *configs: str):
    from seq2seq.cli.train import build_cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["seq2seq-train"])
    return build_cli([a for c in configs for a in ("--config", str(ROOT / "configs" / c))], run=False)


@pytest.mark.parametrize("pair", SHIPPED)
def test_shipped_config_is_the_shipped_models_recipe(pair, tmp_path, monkeypatch):
    from dataclasses import asdict

    from seq2seq.checkpoint import load_checkpoint
    from seq2seq.config import ModelConfig

    meta = load_checkpoint(SHIPPED[pair])["seq2seq"]
    cli = _cli(tmp_path, monkeypatch, f"multi30k_{pair}_tiny.yaml")
    arch, data = asdict(cli.model.arch), cli.datamodule.config
    stored = dict(meta["model_config"])
    for field in set(arch) - set(stored):  # options added after the models were trained
        stored[field] = ModelConfig.__dataclass_fields__[field].default
    # the vocabulary sizes come from the tokenizers the config trains
    for side in ("src", "tgt"):
        assert stored.pop(f"{side}_vocab_size") == data.tokenizer.vocab_size
        arch.pop(f"{side}_vocab_size")
    assert arch == stored
    assert (data.src_lang, data.tgt_lang) == (meta["src_lang"], meta["tgt_lang"])
    # the pre_ln overlay over it changes nothing; post_ln gives the Post-LN comparison
    again = _cli(tmp_path, monkeypatch, f"multi30k_{pair}_tiny.yaml", "pre_ln.yaml")
    assert again.model.arch == cli.model.arch
    post = _cli(tmp_path, monkeypatch, f"multi30k_{pair}_tiny.yaml", "post_ln.yaml")
    assert post.model.arch.norm_position == "post"


def test_every_snapshot_goes_to_the_runs_checkpoint_folder(tmp_path, monkeypatch):
    """The configs' step snapshots land beside last.ckpt, not in lightning_logs/version_N."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    cli = _cli(tmp_path, monkeypatch, "multi30k_de_en_tiny.yaml")
    folders = [c.dirpath for c in cli.trainer.callbacks if isinstance(c, ModelCheckpoint)]
    assert len(folders) == 2  # last + best by BLEU, and the step snapshots
    assert set(folders) == {str(tmp_path / "runs" / "multi30k_de_en_tiny" / "checkpoints")}


# ---------------------------------------------------------------- out-of-domain input
def test_confidence_is_the_geometric_mean_token_probability(de_en):
    """Against a teacher-forced pass over the 1-best (not the search's own sums)."""
    from seq2seq.data.batch import collate_src, collate_tgt_in
    from seq2seq.decoding.search import search

    texts = [IN_DOMAIN, OUT_OF_DOMAIN, "Ein Mann fährt Fahrrad."]
    results = de_en.translate_full(texts)
    arch, tok = de_en.model.arch, de_en.tokenizers
    for text, r in zip(texts, results):
        src = collate_src(tok.src.encode([text]), arch.pad_id, arch.eos_id)
        out = search(de_en.model, src, de_en.decoding).hypotheses[0][0].tokens + [arch.eos_id]
        tgt_in = collate_tgt_in([out[:-1]], arch.pad_id, arch.bos_id)
        with torch.no_grad():
            lp = de_en.model(src, tgt_in).log_softmax(-1)[0].gather(1, torch.tensor(out)[:, None])
        assert r.confidence == pytest.approx(math.exp(lp.mean().item()), abs=1e-4)
        assert r.confidence == pytest.approx(math.exp(r.score), abs=1e-6)  # average penalty
    assert results[0].confidence > 0.7 > 0.5 > results[1].confidence


def test_jsonl_confidence_and_warn_below(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["-m", str(SHIPPED["de_en"]), "--output-format", "jsonl", "--warn-below", "0.5"]
    code, out, err = run_main(translate_cli.main, argv, stdin=f"{IN_DOMAIN}\n{OUT_OF_DOMAIN}\n\n".encode())
    assert code == 0, err
    records = [json.loads(line) for line in out.splitlines()]
    assert [0 < r["confidence"] <= 1 for r in records] == [True] * 3
    assert records[0]["confidence"] > 0.5 > records[1]["confidence"]
    assert [r["flags"] for r in records] == [[], ["unsure"], []]
    warned = err.strip().splitlines()
    assert len(warned) == 1 and warned[0].startswith(
        "seq2seq-translate: warning: 1 of 3 output lines are unsure (line 2): confidence below 0.5")


def test_the_shipped_models_warn_by_default_and_0_turns_it_off():
    text = f"{IN_DOMAIN}\n{OUT_OF_DOMAIN}\n".encode()
    code, _, err = run_main(translate_cli.main, ["-m", str(SHIPPED["de_en"])], stdin=text)
    assert code == 0 and err.startswith("seq2seq-translate: warning: 1 of 2 output lines are unsure")
    code, _, err = run_main(translate_cli.main, ["-m", str(SHIPPED["de_en"]), "--warn-below", "0"],
                            stdin=text)
    assert code == 0 and err == ""


@pytest.mark.parametrize("value", ["1", "-0.5", "nan", "inf"])
def test_warn_below_outside_0_1_is_refused(value):
    code, out, err = run_main(translate_cli.main, ["-m", str(SHIPPED["de_en"]), "--warn-below", value, "x"])
    assert code == 2 and out == "" and err.count("\n") == 1 and f"--warn-below {float(value)}" in err


def test_help_says_what_the_shipped_models_know():
    text = " ".join(translate_cli.build_parser().format_help().split())
    assert "short image captions" in text and "--warn-below" in text
    assert "multi30k_de_en_tiny" in text  # -m takes a shipped model's name


def test_default_decoding_stops_the_shipped_models_loop(de_en):
    """Beam 5 loops on this sentence ("...establuousousousous...") without the rule; the
    default decoding has no n-gram of the default size twice."""
    import dataclasses

    from seq2seq.config import DecodingConfig

    n = DecodingConfig().no_repeat_ngram_size
    assert n > 0
    beam = DecodingConfig(method="beam")
    tok = de_en.tokenizers.tgt

    def grams(decoding):
        de_en.decoding = decoding
        ids = tok.encode(de_en.translate([LOOPING]))[0]
        return [tuple(ids[i : i + n]) for i in range(len(ids) - n + 1)]

    off = grams(dataclasses.replace(beam, no_repeat_ngram_size=0))
    assert len(set(off)) < len(off)
    on = grams(beam)
    assert len(set(on)) == len(on)
    de_en.decoding = DecodingConfig()


# ---------------------------------------------------------------- the public API
def test_top_level_exports_the_public_api():
    import seq2seq
    from seq2seq import checkpoint, config, decoding

    assert seq2seq.Translator is decoding.translator.Translator
    assert seq2seq.load_checkpoint is checkpoint.load_checkpoint
    for name in ("ModelConfig", "DecodingConfig", "DataConfig", "TokenizerConfig", "OptimConfig"):
        assert getattr(seq2seq, name) is getattr(config, name)
    assert set(seq2seq.__all__) == {"__version__", *seq2seq._EXPORTS}
    assert all(getattr(seq2seq, name) is not None for name in seq2seq.__all__)
    assert set(seq2seq.__all__) <= set(dir(seq2seq))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        seq2seq.nope  # noqa: B018


def test_import_seq2seq_is_cheap():
    code = "import sys, seq2seq; print(sorted(m for m in ('torch', 'lightning', 'datasets') if m in sys.modules))"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert res.returncode == 0 and res.stdout.strip() == "[]", res.stderr


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
