"""Compiling while serving (``seq2seq.serving.compiling``, ``seq2seq-serve``'s
default): calls answer at once, eagerly, while a child process makes the packages; then they
use them, translating as eager does; this process never compiles (exporting here would
trace the requests' modules too); another beam width is made when first asked for, never
inside the call; a failed child leaves eager decoding with one note; the child ends with
its parent and leaves no half-written file."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import differential
import pytest
from helpers import multi30k_lines, needs_cpp_compiler

import seq2seq.model.inference.compiled as compiled
from seq2seq.config import DecodingConfig
from seq2seq.decoding import compiled_beam, compiled_greedy
from seq2seq.fields import FieldWarning
from seq2seq.translation.translator import Translator

pytest.importorskip("fastapi", reason="needs the serve extra")
from seq2seq.serving import compiling  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "data" / "models" / "multi30k_de_en_tiny.ckpt"
TEXTS = multi30k_lines("de", 12, "test_2016_flickr")
BUILD_S = 1200  # a busy 2-core machine: the child runs only on what is left over

pytestmark = [pytest.mark.slow, needs_cpp_compiler]


@pytest.fixture(autouse=True)
def cache(compiled_cache, monkeypatch) -> Path:
    monkeypatch.setenv("SEQ2SEQ_CACHE_DIR", str(compiled_cache))
    # the child at the lowest priority waits for idle cores, which a test run rarely leaves
    monkeypatch.setattr(compiling, "LOW_PRIORITY", 0)
    return compiled_cache


def _served(**kw):
    from seq2seq.serving import load_models

    return next(iter(load_models([str(SHIPPED)], background_compile=True, **kw).values()))


def _one_at_a_time(translator: Translator, texts: list[str]) -> list[str]:
    return [translator.translate([t])[0] for t in texts]


def test_answers_at_once_then_from_the_packages(cache):
    counts = dict(compiled.COUNTS)
    served = _served()
    assert served.compile_state == "building"  # a cold cache: minutes of work have begun
    translator = served.translator
    differential.check_same("while compiling", TEXTS[:3], _one_at_a_time(translator, TEXTS[:3]),
                            "greedy")
    assert served.compiling.wait(BUILD_S), "the packages were not made in time"
    assert served.compile_state == "ready"
    features = translator.model.inference
    assert sorted(features.compiled_step.loaders) == [1, 5] and features.compiled_encoder.loader
    assert features.compiled_greedy.loader is not None  # one sentence's whole greedy step
    sentences = compiled_greedy.COUNTS["sentences"]
    differential.check_same("compiled in the background", TEXTS,
                            _one_at_a_time(translator, TEXTS), "greedy")
    assert compiled_greedy.COUNTS["sentences"] == sentences + len(TEXTS)  # the package ran
    assert compiled.COUNTS["compiled"] == counts["compiled"]  # made by the child, not here
    assert served.describe()["compile"] == "ready"
    assert not list(cache.rglob(".*.pt2"))  # no temporary file left


def test_another_beam_is_made_when_asked_not_inside_the_call(cache):
    served = _served()
    assert served.compiling.wait(BUILD_S)  # greedy's and beam 5's packages, from the cache
    beam2 = Translator(served.translator.model, served.translator.tokenizers,
                       DecodingConfig(method="beam", beam_size=2))
    steps, scored = compiled.COUNTS["steps"], compiled_beam.COUNTS["steps"]
    differential.check_same("beam 2 asked for", TEXTS[:2], _one_at_a_time(beam2, TEXTS[:2]),
                            "beam2")
    # eager: its packages are being made meanwhile
    assert (compiled.COUNTS["steps"], compiled_beam.COUNTS["steps"]) == (steps, scored)
    assert served.compile_state == "building"
    assert served.compiling.wait(BUILD_S) and served.compile_state == "ready"
    features = served.translator.model.inference
    assert 2 in features.compiled_step.loaders and 2 in features.compiled_beam.loaders
    differential.check_same("beam 2 compiled", TEXTS, _one_at_a_time(beam2, TEXTS), "beam2")
    assert compiled_beam.COUNTS["steps"] > scored  # one sentence's beam-2 scoring package


def test_a_failed_child_leaves_eager_decoding_with_one_note(monkeypatch, tmp_path):
    monkeypatch.setenv("SEQ2SEQ_CACHE_DIR", str(tmp_path))  # nothing made yet
    monkeypatch.setattr(compiling, "child_command",  # a child that makes nothing
                        lambda *_: [sys.executable, "-c", "raise SystemExit(3)"])
    with pytest.warns(FieldWarning) as notes:
        served = _served()
        assert served.compiling.wait(60)
    said = [str(n.message) for n in notes]
    assert len(said) == 1 and "compiling in the background failed (exit status 3" in said[0], said
    assert served.compile_state == "failed"
    steps = compiled.COUNTS["steps"]
    differential.check_same("after a failed child", TEXTS[:3],
                            _one_at_a_time(served.translator, TEXTS[:3]), "greedy")
    assert compiled.COUNTS["steps"] == steps


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_child_ends_with_its_parent_and_leaves_no_temporary_file(tmp_path):
    """The parent ends abruptly (no clean-up of its own) while its child compiles."""
    parent = textwrap.dedent(f"""
        import os, sys, time
        sys.path.insert(0, {str(ROOT / 'tests')!r})
        from seq2seq.serving import load_models
        served = next(iter(load_models([{str(SHIPPED)!r}], background_compile=True).values()))
        while served.compiling.child is None:
            time.sleep(0.1)
        print(served.compiling.child.pid, flush=True)
        time.sleep(3)  # the child is compiling
        os._exit(0)
    """)
    env = {**os.environ, "SEQ2SEQ_CACHE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", parent], env=env, capture_output=True, text=True,
                         timeout=300)
    child = int(out.stdout.split()[0])
    deadline = time.monotonic() + 60
    while _alive(child):
        assert time.monotonic() < deadline, "the child outlived its parent by a minute"
        time.sleep(0.5)
    assert not list(tmp_path.rglob(".*.pt2"))


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False
