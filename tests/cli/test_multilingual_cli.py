"""A multilingual model from the command line: ``seq2seq-translate --target-lang`` (and
``--source-lang``) picks the direction and translates exactly as ``Translator(target_lang=)``
does; a direction the model lacks is one line naming the ones it has, exit 2; a
single-direction model takes its own languages only. ``seq2seq-evaluate`` evaluates the
direction asked for, or every direction (``--all-directions``), naming those without test
files. Tiny random checkpoints (tests/helpers.py), the shipped Multi30k test files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import run_main, save_multilingual_checkpoint, save_tiny_checkpoint, tiny_tokenizers

from seq2seq.cli.evaluate import main as evaluate_main
from seq2seq.cli.translate import main as translate_main
from seq2seq.data.sources import read_lines
from seq2seq.translation.translator import Translator

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data" / "multi30k"
SENTENCES = ["A dog runs through the snow.", "Two men play football on a meadow.",
             "A woman with a red hat reads a book."]
SHORT = ["--max-len-b", "6"]  # short outputs: fast


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("multi")
    return {
        "source": save_multilingual_checkpoint(root / "source.ckpt", "all:en,de,fr", "source", seed=1),
        "decoder": save_multilingual_checkpoint(root / "decoder.ckpt", "en<>de,fr", "decoder", seed=2),
        "single": save_tiny_checkpoint(root / "single.ckpt", tiny_tokenizers(100), seed=1),
    }


def translate(ckpt: Path, *flags: str, texts=SENTENCES) -> tuple[int, str, str]:
    return run_main(translate_main, ["-m", str(ckpt), *SHORT, *flags, *texts])


def ours(ckpt: Path, texts=SENTENCES, **direction) -> list[str]:
    from seq2seq.config import DecodingConfig

    return Translator.from_checkpoint(ckpt, DecodingConfig(max_len_b=6)).translate(texts, **direction)


def assert_one_line_error(code: int, out: str, err: str, *words: str) -> None:
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for word in words:
        assert word in err, (word, err)


# ---------------------------------------------------------------- seq2seq-translate
@pytest.mark.parametrize("kind, direction", [("source", ("en", "de")), ("source", (None, "fr")),
                                             ("decoder", ("en", "fr")), ("decoder", ("de", "en"))])
def test_translate_picks_the_direction_as_the_api_does(ckpts, kind, direction):
    src, tgt = direction
    flags = ["--target-lang", tgt, *(["--source-lang", src] if src else [])]
    code, out, err = translate(ckpts[kind], *flags)
    assert code == 0, err
    assert out.splitlines() == ours(ckpts[kind], target_lang=tgt, source_lang=src)


def test_the_tag_changes_the_output(ckpts):
    """Each target language is a different output (the tag reaches the model)."""
    outs = {tgt: translate(ckpts["source"], "--target-lang", tgt)[1] for tgt in ("en", "de", "fr")}
    assert len(set(outs.values())) == 3


@pytest.mark.parametrize("flags, words", [
    ([], ["--target-lang", "en-de", "fr-de"]),  # several targets: one must be named
    (["--target-lang", "cs"], ["'cs'", "en-de, en-fr, de-en, de-fr, fr-en, fr-de"]),
    (["--source-lang", "de", "--target-lang", "de"], ["de-de", "en-de"]),
    (["--tgt-lang", "xx"], ["'xx'", "en-de"]),  # the old spelling, the same check
])
def test_translate_refuses_a_direction_the_model_lacks(ckpts, flags, words):
    assert_one_line_error(*translate(ckpts["source"], *flags), *words)


def test_decoder_tag_model_refuses_an_untrained_pair(ckpts):
    assert_one_line_error(*translate(ckpts["decoder"], "--source-lang", "de", "--target-lang", "fr"),
                          "de-fr", "en-de, de-en, en-fr, fr-en")


def test_single_direction_model_takes_its_own_languages_only(ckpts):
    plain = translate(ckpts["single"])
    assert plain[0] == 0 and plain[1].strip()
    assert translate(ckpts["single"], "--target-lang", "en", "--source-lang", "de") == plain
    assert_one_line_error(*translate(ckpts["single"], "--target-lang", "fr"), "de-en", "'fr'")
    assert_one_line_error(*translate(ckpts["single"], "--source-lang", "en"), "de-en", "'en'")


def test_plot_attention_uses_the_direction(ckpts, tmp_path):
    plot = tmp_path / "attn.png"
    code, out, err = translate(ckpts["source"], "--target-lang", "de", "--plot-attention", str(plot),
                               texts=SENTENCES[:1])
    assert code == 0 and plot.stat().st_size > 0, err
    assert out.splitlines() == ours(ckpts["source"], SENTENCES[:1], target_lang="de")


# ---------------------------------------------------------------- seq2seq-evaluate
def evaluate(tmp_path: Path, ckpt: Path, *flags: str, data: Path = DATA) -> tuple[int, str, str, list]:
    js = tmp_path / "results.json"
    code, out, err = run_main(evaluate_main, ["-m", str(ckpt), "--data-dir", str(data), "--limit", "3",
                                              "--quiet", "--json", str(js), *SHORT, *flags])
    return code, out, err, json.loads(js.read_text()) if code == 0 else []


def test_evaluate_one_direction_of_a_multilingual_model(ckpts, tmp_path):
    code, out, err, records = evaluate(tmp_path, ckpts["source"], "--source-lang", "fr",
                                       "--target-lang", "de")
    assert code == 0, err
    [r] = records
    assert r["direction"] == "fr-de" and r["test_set"].startswith("multi30k/test_2016_flickr fr-de")
    src = read_lines(DATA / "test_2016_flickr.fr.gz")[:3]
    assert read_lines(r["hypotheses"]) == ours(ckpts["source"], src, target_lang="de", source_lang="fr")


def test_evaluate_needs_the_source_to_find_the_files(ckpts, tmp_path):
    code, out, err, _ = evaluate(tmp_path, ckpts["source"], "--target-lang", "de")
    assert_one_line_error(code, out, err, "--source-lang", "en, fr", "--all-directions")
    code, out, err, _ = evaluate(tmp_path, ckpts["decoder"], "--src-lang", "de", "--tgt-lang", "fr")
    assert_one_line_error(code, out, err, "de-fr", "en-de")


def test_evaluate_all_directions_names_those_without_test_files(ckpts, tmp_path):
    data = tmp_path / "data"  # English and German only: the French directions have no files
    data.mkdir()
    for lang in ("en", "de"):
        shutil.copy(DATA / f"test_2016_flickr.{lang}.gz", data)
    code, out, err, records = evaluate(tmp_path, ckpts["source"], "--all-directions", data=data)
    assert code == 0, err
    assert [r["direction"] for r in records] == ["en-de", "de-en"]
    missing = ["en-fr", "de-fr", "fr-en", "fr-de"]
    assert all(r["directions_without_test_files"] == missing for r in records)
    assert f"for {ckpts['source']}: {', '.join(missing)}" in out
    for r in records:  # each direction's hypotheses are that direction's translations
        src_lang, tgt_lang = r["direction"].split("-")
        src = read_lines(data / f"test_2016_flickr.{src_lang}.gz")[:3]
        assert read_lines(r["hypotheses"]) == ours(ckpts["source"], src, target_lang=tgt_lang,
                                                   source_lang=src_lang)
    assert len({r["hypotheses"] for r in records}) == 2


def test_all_directions_skips_a_language_the_shipped_split_lacks():
    """Without --data-dir the files are looked up in the shipped data: Multi30k's 2017 test
    sets have no Czech, so an En-Cs direction is skipped there (not an error), and found in
    test_2016_flickr, which has Czech."""
    from argparse import Namespace

    from seq2seq.cli.evaluate_sets import _has_files
    from seq2seq.data.sources import MULTI30K_LANGS

    for split, present in [("test_2017_flickr", False), ("test_2017_mscoco", False), ("test_2016_flickr", True)]:
        args = Namespace(split=split, data_dir=None)
        assert _has_files(args, ("en", "cs"), MULTI30K_LANGS) is present, split
        assert _has_files(args, ("en", "de"), MULTI30K_LANGS), split


def test_evaluate_all_directions_refusals(ckpts, tmp_path):
    code, out, err, _ = evaluate(tmp_path, ckpts["source"], "--all-directions", "--target-lang", "de")
    assert_one_line_error(code, out, err, "--all-directions")
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out, err, _ = evaluate(tmp_path, ckpts["source"], "--all-directions", data=empty)
    assert_one_line_error(code, out, err, "none of the directions", "en-de")


def test_evaluate_single_direction_model_all_directions_is_its_own(ckpts, tmp_path):
    code, out, err, records = evaluate(tmp_path, ckpts["single"], "--all-directions")
    assert code == 0, err
    assert [r["direction"] for r in records] == ["de-en"]
    assert records[0]["directions_without_test_files"] == []


def test_evaluate_own_files_need_only_the_target(ckpts, tmp_path):
    """With --src-file/--ref-file no file is looked up: the target language suffices."""
    src = DATA / "test_2016_flickr.en.gz"
    js = tmp_path / "r.json"
    code, out, err = run_main(evaluate_main, [
        "-m", str(ckpts["source"]), "--src-file", str(src), "--ref-file", str(DATA / "test_2016_flickr.fr.gz"),
        "--target-lang", "fr", "--limit", "3", "--quiet", "--json", str(js), *SHORT])
    assert code == 0, err
    [r] = json.loads(js.read_text())
    assert read_lines(r["hypotheses"]) == ours(ckpts["source"], read_lines(src)[:3], target_lang="fr")
