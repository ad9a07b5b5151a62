"""``--compile`` (``seq2seq.model.inference.compiled``): the AOTInductor-compiled decoder
step gives the eager step's translations on the shipped model, greedy and beam; its packages
are cached on disk and loaded, not compiled, by a second model; without a compiler, or when
compiling fails, decoding is eager with one note; other compute types and ensembles are
refused."""

from __future__ import annotations

import json
from pathlib import Path

import differential
import pytest
from helpers import multi30k_lines, needs_cpp_compiler, run_main
from hypothesis import given, settings

import seq2seq.model.inference.compiled as compiled
import seq2seq.model.inference.step as step_module
from seq2seq.cli import translate
from seq2seq.config import DecodingConfig
from seq2seq.decoding import compiled_beam, compiled_greedy
from seq2seq.fields import FieldWarning
from seq2seq.translation.translator import Translator

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = ROOT / "data" / "models" / "multi30k_de_en_tiny.ckpt"
TEXTS = multi30k_lines("de", 40, "test_2016_flickr")
SEARCHES = {"greedy": DecodingConfig(method="greedy"),
            "beam": DecodingConfig(method="beam", beam_size=5)}

pytestmark = [pytest.mark.slow, needs_cpp_compiler]


@pytest.fixture(autouse=True)
def cache(compiled_cache, monkeypatch) -> Path:
    """The module's package cache: each search's package is compiled once."""
    monkeypatch.setenv("SEQ2SEQ_CACHE_DIR", str(compiled_cache))
    return compiled_cache


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
    # 6 sentences a call: at most 30 decoder rows, all within the compiled step's MAX_ROWS
    outputs = [o for i in range(0, len(TEXTS), 6) for o in translator.translate(TEXTS[i:i + 6])]
    assert near_ties(outputs, eager[search]) <= 1
    assert compiled.COUNTS["steps"] > steps + 20  # the compiled step ran, every step
    loaders = translator.model.inference.compiled_step.loaders
    assert list(loaders) == [1 if search == "greedy" else 5]
    assert "Traceback" not in capsys.readouterr().err
    assert not list(cache.glob(".*"))  # no temporary file left


def test_second_model_loads_the_package_without_compiling(eager, cache):
    Translator.from_checkpoint(SHIPPED, SEARCHES["greedy"], compile=True).translate(TEXTS[:2])
    counts = dict(compiled.COUNTS)
    translator = Translator.from_checkpoint(SHIPPED, SEARCHES["greedy"], compile=True)
    assert near_ties(translator.translate(TEXTS), eager["greedy"]) <= 1
    assert compiled.COUNTS["compiled"] == counts["compiled"]
    assert compiled.COUNTS["loaded"] > counts["loaded"]  # the step's (and the encoder's if used)
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
    monkeypatch.setattr(compiled, "compile_into", fail)
    code, out, err = _translate(["--compile"])
    assert code == 0 and out.splitlines() == eager["greedy"][:10]
    lines = err.splitlines()
    assert len(lines) == 4, err  # each part: a note that it compiles, a warning that it failed
    assert "compiling the decoder step" in err and "compiling the encoder" in err
    assert "--compile: the compiled encoder failed (RuntimeError: C++ compile error " \
           "second line); encoding eagerly" in err
    assert "--compile: the compiled decoder step failed (RuntimeError: C++ compile error " \
           "second line); decoding eagerly" in err


@pytest.mark.parametrize("argv, models", [(["--compute-type", "int8"], 1), ([], 2)])
def test_compile_refused_for_other_compute_types_and_ensembles(argv, models):
    code, out, err = _translate(["--compile", *argv], models)
    assert code == 2 and out == "" and err.count("\n") == 1 and "--compile:" in err, err


# ------------------------------------------------------------ one answer, any batch
@pytest.mark.parametrize("search", ["greedy", "beam5"])
def test_one_sentence_at_a_time_equals_eager(search, capsys):
    """The everyday call: one sentence (a CLI argument, a client's request). With one memory
    row the cross layout's reshapes were views whose strides the package does not read."""
    translator = Translator.from_checkpoint(SHIPPED, differential.SEARCHES[search], compile=True)
    texts = differential.POOL[:100]
    before, before_greedy = dict(compiled.COUNTS), compiled_greedy.COUNTS["sentences"]
    before_beam = compiled_beam.COUNTS["steps"]
    outputs = [translator.translate([t])[0] for t in texts]
    differential.check_same("--compile, one at a time", texts, outputs, search)
    assert "failed" not in capsys.readouterr().err
    # no step through the step packages: one sentence's greedy step, or its beam step's
    # scoring, is a package of its own (decoding.compiled_greedy, decoding.compiled_beam)
    assert compiled.COUNTS["steps"] == before["steps"]
    if search == "greedy":
        assert compiled_greedy.COUNTS["sentences"] - before_greedy == len(texts)
    else:
        assert compiled_beam.COUNTS["steps"] - before_beam > 100


def test_a_batch_uses_the_other_package():
    """Several sentences in a call run the any-number package (the one-sentence package's
    rows are fixed) until one sentence is left, then the one-sentence package; a call of
    one sentence after them runs neither: its whole greedy step is one package of its own
    (``decoding.compiled_greedy``)."""
    translator = Translator.from_checkpoint(SHIPPED, SEARCHES["greedy"], compile=True)
    before = dict(compiled.COUNTS)
    differential.check_same("--compile, a batch", TEXTS[:5], translator.translate(TEXTS[:5]),
                            "greedy")
    lone, steps = (compiled.COUNTS[k] - before[k] for k in ("lone", "steps"))
    assert steps - lone >= 5  # every sentence's first steps, at least, took the other one
    assert lone > 0  # the last sentence left in the batch: the one-sentence step package
    before, sentences = dict(compiled.COUNTS), compiled_greedy.COUNTS["sentences"]
    differential.check_same("--compile, then one", TEXTS[5:6], translator.translate(TEXTS[5:6]),
                            "greedy")
    assert [compiled.COUNTS[k] - before[k] for k in ("steps", "lone")] == [0, 0]
    assert compiled_greedy.COUNTS["sentences"] == sentences + 1


@pytest.mark.parametrize("search", ["greedy", "beam5"])
@pytest.mark.parametrize("order", ["one, then many", "many, then one"])
def test_batch_sizes_in_either_order(search, order):
    translator = Translator.from_checkpoint(SHIPPED, differential.SEARCHES[search], compile=True)
    calls = [differential.POOL[:1], differential.POOL[100:164]]
    for texts in calls if order == "one, then many" else calls[::-1]:
        differential.check_same(f"--compile, {order}", texts, translator.translate(texts), search)
    assert translator.model.inference.compiled_step.failed is False


def test_more_rows_than_max_rows_take_the_eager_step():
    """A batch of more than ``MAX_ROWS`` decoder rows decodes eagerly (faster there), with
    the compiled step taking over once finished sentences leave it under the limit."""
    translator = Translator.from_checkpoint(SHIPPED, SEARCHES["greedy"], compile=True)
    texts = differential.POOL[:compiled.MAX_ROWS + 20]
    steps, eager_steps = compiled.COUNTS["steps"], []
    real = step_module.decoder_step

    def counted(model, tokens, cache):
        eager_steps.append(tokens.shape[0])
        return real(model, tokens, cache)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(step_module, "decoder_step", counted)
        differential.check_same("--compile, many rows", texts, translator.translate(texts),
                                "greedy")
    assert eager_steps and min(eager_steps) > compiled.MAX_ROWS
    assert compiled.COUNTS["steps"] >= steps  # and the compiled one for what was left, if any


@settings(max_examples=3)
@given(texts=differential.batches(sizes=(1, 2, 3, 7, 64)))
def test_any_batch_equals_eager(texts):
    translator = Translator.from_checkpoint(SHIPPED, SEARCHES["greedy"], compile=True)
    differential.check_same("--compile", texts, translator.translate(texts), "greedy")


def test_cli_one_sentence_equals_eager():
    code, out, err = run_main(translate.main, ["-m", str(SHIPPED), "--compile", TEXTS[3]])
    assert code in (0, None), err
    differential.check_same("--compile CLI", TEXTS[3:4], out.splitlines(), "greedy")


# ------------------------------------------------------------ the encoder, small batches
def test_compiled_encoder_equals_the_layers_on_small_batches():
    """Generated sources (1 to ``MAX_ROWS`` rows, lengths 1-40, padded rows): the compiled
    encoder's memory is the eager encoder's; larger batches go through the layers."""
    import torch

    from seq2seq.model.inference import compiled_encoder as ce

    translator = Translator.from_checkpoint(SHIPPED, SEARCHES["greedy"], compile=True)
    model, gen = translator.model, torch.Generator().manual_seed(3)
    used = []
    compiled_encoder = model.inference.compiled_encoder
    with torch.inference_mode():
        for rows in [1, 1, 2, 3, 3, ce.MAX_ROWS + 1]:
            lengths = torch.randint(1, 41, (rows,), generator=gen)
            src = torch.randint(4, model.arch.src_vocab_size, (rows, int(lengths.max())),
                                generator=gen)
            src[torch.arange(src.shape[1])[None, :] >= lengths[:, None]] = model.arch.pad_id
            mask = model.source_mask(src)
            fast = compiled_encoder(model, src, mask)
            used.append(fast is not None)
            want = model.encoder(model.src_embed(src), mask)
            got = model.encode(src, mask)
            torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-5)
            if fast is not None:
                torch.testing.assert_close(fast, want, atol=2e-5, rtol=1e-5)
    assert used == [True] * 5 + [False]


# ------------------------------------------------------------ a package that does not fit
def _fake_package(tmp_path, made_for: dict) -> Path:
    path = tmp_path / "step-x.pt2"
    path.write_bytes(b"compiled code")
    compiled.manifest_path(path).write_text(json.dumps(
        {**made_for, "sha256": compiled.file_sha256(path)}))
    return path


@pytest.mark.parametrize("harm, why", [
    ("none", None),
    ("truncated", "is not the file that was compiled"),
    ("one byte changed", "is not the file that was compiled"),
    ("no manifest", "has no readable manifest"),
    ("manifest not JSON", "has no readable manifest"),
    ("another beam width", "was made for another"),
    ("one sentence's, asked for any number", "was made for another"),
    ("any number's, asked for one sentence", "was made for another"),
    ("another torch", "was made for another"),
])
def test_a_package_is_checked_against_what_is_asked(tmp_path, harm, why):
    made_for = {"key": "digest 2.13.0 x86_64 avx2", "group": 1}
    path = _fake_package(tmp_path, made_for)
    manifest = compiled.manifest_path(path)
    asked = dict(made_for)
    if harm == "truncated":
        path.write_bytes(path.read_bytes()[:5])
    elif harm == "one byte changed":
        path.write_bytes(b"C" + path.read_bytes()[1:])
    elif harm == "no manifest":
        manifest.unlink()
    elif harm == "manifest not JSON":
        manifest.write_text("{")
    elif harm == "another beam width":
        asked["group"] = 2
    elif harm.startswith("one sentence's"):
        path = _fake_package(tmp_path, {**made_for, "sentences": 1})
    elif harm.startswith("any number's"):
        asked["sentences"] = 1
    elif harm == "another torch":
        asked["key"] = "digest 2.14.0 x86_64 avx2"
    got = compiled.stale(path, asked)
    assert got is None if why is None else (got or "").startswith(why), got


def test_a_greedy_package_under_a_beam_name_is_compiled_again(cache, capsys):
    """A greedy package (and its manifest) copied to beam 2's name ran and crashed in the
    compiled code (``aoti_torch_cpu_baddbmm_out``); now it is refused and made again."""
    d = DecodingConfig(method="beam", beam_size=2)
    translator = Translator.from_checkpoint(SHIPPED, SEARCHES["greedy"], compile=True)
    translator.translate(TEXTS[:1])  # the greedy package exists
    step = translator.model.inference.compiled_step
    for lone in (True, False):  # both packages, one sentence's and any number's
        for suffix in (".pt2", ".json"):
            step.path(2, lone).with_suffix(suffix).write_bytes(
                step.path(1, lone).with_suffix(suffix).read_bytes())
    compiled_before = compiled.COUNTS["compiled"]
    beam2 = Translator.from_checkpoint(SHIPPED, d, compile=True)
    # from Python a warning naming the argument (the CLIs print it naming --compile)
    with pytest.warns(FieldWarning, match="^compile: the cached package .* was made for another "
                      "model, torch version, CPU or beam width; compiling it again"):
        differential.check_same("--compile beam 2", TEXTS[:7], beam2.translate(TEXTS[:7]), "beam2")
    assert compiled.COUNTS["compiled"] == compiled_before + 2
    assert not beam2.model.inference.compiled_step.failed


def test_a_package_that_disagrees_with_eager_is_not_used(cache, monkeypatch, capsys):
    """The load-time check (one and three sentences against the eager step, the encoder,
    the greedy step and the source side)
    turns any wrong package into eager decoding with one note each, before it translates
    anything."""
    Translator.from_checkpoint(SHIPPED, SEARCHES["greedy"], compile=True).translate(TEXTS[:1])
    capsys.readouterr()
    monkeypatch.setattr(compiled, "CHECK_TOLERANCE", -1.0)
    translator = Translator.from_checkpoint(SHIPPED, SEARCHES["greedy"], compile=True)
    with pytest.warns(FieldWarning, match="differs from the eager one") as notes:
        differential.check_same("--compile refused", TEXTS[:1], translator.translate(TEXTS[:1]),
                                "greedy")
    said = sorted(str(n.message).split(" failed")[0] for n in notes)
    assert said == ["compile: the compiled decoder step", "compile: the compiled encoder",
                    "compile: the compiled greedy step", "compile: the compiled source side"]
    assert capsys.readouterr().err == ""


def test_the_server_compiles_at_start_and_answers_as_eager(cache):
    """``seq2seq-serve --compile``: greedy's and the default beam's packages are made when
    the model loads (not inside a request); a one-sentence request is the reference's."""
    pytest.importorskip("fastapi", reason="needs the serve extra")
    from fastapi.testclient import TestClient

    from seq2seq.serving import create_app, load_models

    models = load_models([str(SHIPPED)], compile=True)
    step = next(iter(models.values())).translator.model.inference.compiled_step
    assert sorted(step.loaders) == [1, 5] and all(step.loaders.values())
    assert sorted(step.lone) == [1, 5] and all(step.lone.values())
    steps = compiled.COUNTS["steps"]
    with TestClient(create_app(models)) as client:
        for texts, beam, search in (([TEXTS[5]], 1, "greedy"), (TEXTS[:7], 5, "beam5")):
            answer = client.post("/translate", json={"texts": texts, "beam": beam}).json()
            differential.check_same("served --compile", texts,
                                    [r["hyp"] for r in answer["results"]], search)
        libre = client.post("/libretranslate/translate",
                            json={"q": TEXTS[9], "source": "de", "target": "en"}).json()
    assert libre["translatedText"] == differential.reference(TEXTS[9:10], "greedy")[0]
    assert compiled.COUNTS["steps"] > steps
