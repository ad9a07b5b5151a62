"""``--compile`` (``seq2seq.model.compiled``): the AOTInductor-compiled decoder step gives the
eager step's translations on the shipped model, greedy and beam; its packages are cached
on disk and loaded, not compiled, by a second model; without a compiler, or when compiling
fails, decoding is eager with one note; other compute types and ensembles are refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import multi30k_lines, run_main

import seq2seq.model.compiled as compiled
from seq2seq.cli import translate
from seq2seq.config import DecodingConfig
from seq2seq.decoding.translator import Translator

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "data" / "models" / "multi30k_de_en_tiny.ckpt"
TEXTS = multi30k_lines("de", 40, "test_2016_flickr")
SEARCHES = {"greedy": DecodingConfig(method="greedy"),
            "beam": DecodingConfig(method="beam", beam_size=5)}

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(compiled.cpp_compiler() is None, reason="no C++ compiler")]


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """One package cache for the module: each search's package is compiled once."""
    return tmp_path_factory.mktemp("compiled-cache")


@pytest.fixture(autouse=True)
def cache_env(cache, monkeypatch):
    monkeypatch.setenv("SEQ2SEQ_CACHE_DIR", str(cache))


@pytest.fixture(scope="module")
def eager() -> dict[str, list[str]]:
    return {name: Translator.from_checkpoint(SHIPPED, d).translate(TEXTS)
            for name, d in SEARCHES.items()}


def near_ties(outputs: list[str], reference: list[str]) -> int:
    """Lines that differ. The compiled kernels sum in another order (states within ~3e-6),
    which may flip a near-tie: 1 of 1,000 test_2016 lines under beam 5 on an AVX-512 Xeon,
    greedy none (docs/speed.md); a wrong step changes most lines."""
    assert len(outputs) == len(reference)
    return sum(a != b for a, b in zip(outputs, reference))


@pytest.mark.parametrize("search", list(SEARCHES))
def test_compiled_step_translates_as_eager(search, eager, cache, capsys):
    translator = Translator.from_checkpoint(SHIPPED, SEARCHES[search], compile=True)
    steps = compiled.COUNTS["steps"]
    assert near_ties(translator.translate(TEXTS), eager[search]) <= 1
    assert compiled.COUNTS["steps"] > steps + 20  # the compiled step ran, every step
    assert list(translator.model.compiled_step.loaders) == [1 if search == "greedy" else 5]
    assert "Traceback" not in capsys.readouterr().err
    assert not list(cache.glob(".*"))  # no temporary file left


def test_second_model_loads_the_package_without_compiling(eager, cache):
    Translator.from_checkpoint(SHIPPED, SEARCHES["greedy"], compile=True).translate(TEXTS[:2])
    counts = dict(compiled.COUNTS)
    translator = Translator.from_checkpoint(SHIPPED, SEARCHES["greedy"], compile=True)
    assert near_ties(translator.translate(TEXTS), eager["greedy"]) <= 1
    assert compiled.COUNTS["compiled"] == counts["compiled"]
    assert compiled.COUNTS["loaded"] == counts["loaded"] + 1
    assert compiled.COUNTS["steps"] > counts["steps"]


def _translate(argv: list[str], models: int = 1) -> tuple[int, str, str]:
    return run_main(translate.main, [*["-m", str(SHIPPED)] * models, "--beam", "1",
                                     "--warn-below", "0", *argv, *TEXTS[:10]])


def test_no_compiler_decodes_eagerly_with_one_note(eager, monkeypatch, tmp_path):
    monkeypatch.setenv("SEQ2SEQ_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(compiled, "cpp_compiler", lambda: None)
    counts = dict(compiled.COUNTS)
    code, out, err = _translate(["--compile"])
    assert code == 0 and out.splitlines() == eager["greedy"][:10]
    assert err.count("\n") == 1 and "--compile: no C++ compiler found" in err, err
    assert compiled.COUNTS == counts and not tmp_path.joinpath("compiled").exists()


def test_a_failed_compile_decodes_eagerly_with_one_note(eager, monkeypatch, tmp_path):
    monkeypatch.setenv("SEQ2SEQ_CACHE_DIR", str(tmp_path))

    def fail(*args):
        raise RuntimeError("C++ compile error\nsecond line")
    monkeypatch.setattr(compiled, "package", fail)
    code, out, err = _translate(["--compile"])
    assert code == 0 and out.splitlines() == eager["greedy"][:10]
    lines = err.splitlines()
    assert len(lines) == 2 and "compiling the decoder step" in lines[0], err
    assert "--compile: the compiled decoder step failed (RuntimeError: C++ compile error " \
           "second line); decoding eagerly" in lines[1]


@pytest.mark.parametrize("argv, models", [(["--compute-type", "int8"], 1), ([], 2)])
def test_compile_refused_for_other_compute_types_and_ensembles(argv, models):
    code, out, err = _translate(["--compile", *argv], models)
    assert code == 2 and out == "" and err.count("\n") == 1 and "--compile:" in err, err
