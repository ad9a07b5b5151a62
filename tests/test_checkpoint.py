"""Checkpoints (``seq2seq.checkpoint``, ``seq2seq.files``) that every command refuses: damaged,
edited, foreign, a pickle payload, sizes that would allocate gigabytes, a FIFO. Each refusal
is one line on stderr with exit status 2 and no traceback, before any model is built; no
input file changes; old checkpoints still load; an interrupted write leaves no stray file."""

from __future__ import annotations

import copy
import os
import pickle
import random
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch
from helpers import ROOT, assert_refused, deadline, run_command, snapshot

from seq2seq import checkpoint
from seq2seq.checkpoint import CheckpointError, load_checkpoint, seal

COMMANDS = ["translate", "evaluate", "average", "export", "serve"]
NEEDS = {"export": "ctranslate2", "serve": "fastapi"}


def _edit(fn, sealed: bool = False):
    """An edited copy of the good checkpoint; ``sealed``: its checksum recomputed, so that
    the check that must catch the edit is the structural one, not the checksum."""
    def make(good: dict, path: Path, extra) -> None:
        ckpt = copy.deepcopy(good)
        fn(ckpt, extra)
        torch.save(seal(ckpt) if sealed else ckpt, path)
    return make


def _raw(fn):
    def make(good: dict, path: Path, extra) -> None:
        path.write_bytes(fn(extra["bytes"]))
    return make


def _weight(c: dict) -> str:
    return sorted(k for k in c["state_dict"] if k.endswith("w_q.weight"))[0]


def _pickle_bomb(path: Path, extra) -> None:
    class Bomb:
        def __reduce__(self):
            return (os.system, (f"touch {extra['pwned']}",))

    path.write_bytes(pickle.dumps({"seq2seq": Bomb()}))


def _set(*keys_and_value):
    *keys, value = keys_and_value

    def fn(c: dict, extra) -> None:
        node = c
        for k in keys[:-1]:
            node = node[k]
        node[keys[-1]] = value(c, extra) if callable(value) else value
    return fn


def _drop(*keys):
    def fn(c: dict, extra) -> None:
        node = c
        for k in keys[:-1]:
            node = node[k]
        del node[keys[-1]]
    return fn


def _fill(value: float):
    def fn(c: dict, extra) -> None:
        c["state_dict"][_weight(c)][0, 0] = value
    return fn


DAMAGE = {  # name -> (maker, words the error must contain)
    "truncated": (_raw(lambda b: b[: len(b) // 2]), ["truncated or damaged"]),
    "random bytes": (_raw(lambda b: os.urandom(4096)), ["cannot be read"]),
    "empty file": (_raw(lambda b: b""), ["cannot be read"]),
    "text file": (_raw(lambda b: b"hello\n" * 50), ["cannot be read"]),
    "pickle payload": (lambda g, p, e: _pickle_bomb(p, e), ["refused unread"]),
    "not a dict": (lambda g, p, e: torch.save([1, 2, 3], p), ["not a seq2seq checkpoint"]),
    "foreign lightning": (lambda g, p, e: torch.save({"state_dict": {}, "pytorch-lightning_version": "2.6",
                                                      "epoch": 0}, p), ["Lightning checkpoint of another model"]),
    "future format": (_edit(_set("seq2seq", "format", 99)), ["format 99"]),
    "edited n_heads": (_edit(_set("seq2seq", "model_config", "n_heads", 2)), ["checksum"]),
    "edited eos_id": (_edit(_set("seq2seq", "model_config", "eos_id", 5)), ["eos_id"]),
    "edited max_positions": (_edit(_set("seq2seq", "model_config", "max_positions", 8)), ["checksum"]),
    "edited d_model": (_edit(_set("seq2seq", "model_config", "d_model", 64)), ["shape"]),
    "edited lang": (_edit(_set("seq2seq", "tgt_lang", "fr")), ["checksum"]),
    "mistyped model_config": (_edit(_set("seq2seq", "model_config", "d_model", "32")), ["d_model", "expected int"]),
    "model_config not a dict": (_edit(_set("seq2seq", "model_config", [1, 2])), ["model_config"]),
    "missing model_config": (_edit(_drop("seq2seq", "model_config")), ["model_config"]),
    "unknown model_config key": (_edit(_set("seq2seq", "model_config", "d_modle", 3)), ["d_modle"]),
    "missing tokenizers": (_edit(_drop("seq2seq", "tokenizers")), ["no tokenizers"]),
    "mistyped tokenizers": (_edit(_set("seq2seq", "tokenizers", "abc")), ["tokenizers"]),
    "missing sha256": (_edit(_drop("seq2seq", "tokenizers", "src", "sha256")), ["sha256"]),
    "wrong sha256": (_edit(_set("seq2seq", "tokenizers", "src", "sha256", "0" * 64)), ["fingerprint"]),
    "garbage tokenizer": (_edit(_set("seq2seq", "tokenizers", "src", "model", b"garbage")), ["tokenizer", "damaged"]),
    "truncated tokenizer": (_edit(_set("seq2seq", "tokenizers", "tgt", "model",
                                       lambda c, e: c["seq2seq"]["tokenizers"]["tgt"]["model"][:300])),
                            ["tgt tokenizer"]),
    "other tokenizer same size": (_edit(_set("seq2seq", "tokenizers",
                                             lambda c, e: e["other"].to_state())), ["checksum"]),
    "wrong shape": (_edit(lambda c, e: c["state_dict"].__setitem__(_weight(c), torch.zeros(3, 3)),
                          sealed=True), ["shape"]),
    "edited weight": (_edit(lambda c, e: c["state_dict"][_weight(c)].mul_(2)), ["checksum"]),
    "nan weight": (_edit(_fill(float("nan"))), ["NaN or infinite"]),
    "inf weight": (_edit(_fill(float("inf"))), ["NaN or infinite"]),
    "missing weight": (_edit(lambda c, e: c["state_dict"].pop(_weight(c)), sealed=True), ["missing"]),
    "extra weight": (_edit(lambda c, e: c["state_dict"].__setitem__("model.extra", torch.zeros(2)),
                           sealed=True), ["unexpected"]),
    "int weight": (_edit(lambda c, e: c["state_dict"].__setitem__(_weight(c), c["state_dict"][_weight(c)].int()),
                         sealed=True), ["dtype"]),
    "state_dict not tensors": (_edit(_set("state_dict", "x")), ["state_dict"]),
    "a directory": (lambda g, p, e: p.mkdir(), ["is a directory"]),
}


@pytest.fixture(scope="module")
def damaged(work, other_tokenizers, tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("damaged")
    good = torch.load(work / "good.ckpt", weights_only=True)
    extra = {"bytes": (work / "good.ckpt").read_bytes(), "other": other_tokenizers,
             "pwned": d / "PWNED"}
    paths = {}
    for name, (make, _) in DAMAGE.items():
        paths[name] = d / (name.replace(" ", "_") + ".ckpt")
        make(good, paths[name], extra)
    return paths


def _argv(command: str, ckpt: Path, work: Path, out: Path, alone: bool = False) -> list[str]:
    """``command``'s arguments reading ``ckpt`` (``seq2seq-average``: after a good checkpoint,
    unless ``alone``) and writing under ``out``."""
    return {
        "translate": ["-m", str(ckpt), "Ein Hund."],
        "evaluate": ["-m", str(ckpt), "--src-file", str(work / "src.de"), "--ref-file",
                     str(work / "ref.en"), "--hyp-dir", str(out), "--quiet"],
        "average": ["-o", str(out / "avg.ckpt"), *([] if alone else [str(work / "good.ckpt")]), str(ckpt)],
        "export": ["-m", str(ckpt), "--to", "ctranslate2", "-o", str(out / "ct2")],
        "serve": ["-m", str(ckpt), "--port", "0"],
    }[command]


@pytest.mark.parametrize("command", COMMANDS[:4])
@pytest.mark.parametrize("case", list(DAMAGE))
def test_damaged_checkpoint_is_refused_by_every_command(case, command, damaged, work, tmp_path):
    if command in NEEDS:
        pytest.importorskip(NEEDS[command])
    ckpt = damaged[case]
    before = snapshot(ckpt.parent) | snapshot(work)
    line = assert_refused(run_command(command, _argv(command, ckpt, work, tmp_path)), command,
                          *DAMAGE[case][1])
    assert ckpt.name in line or command == "average" and "average" in line
    assert snapshot(ckpt.parent) | snapshot(work) == before  # no input changed
    assert not (ckpt.parent / "PWNED").exists()  # the pickle payload never ran
    assert not any(tmp_path.rglob("*.ckpt")) and not (tmp_path / "ct2").exists()


def _assert_whole_sentence(path: Path) -> None:
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(path)
    assert str(e.value).rstrip().endswith((")", "copy")) and "Re-running" not in str(e.value)


def test_checkpoint_errors_are_whole_sentences(damaged):
    """Not cut at 200 characters mid-sentence (torch's "Re-running torch.load with ...")."""
    for case in ("random bytes", "pickle payload", "truncated"):
        _assert_whole_sentence(damaged[case])


def test_any_random_bytes_give_a_whole_sentence(tmp_path):
    """torch's legacy reader trips over arbitrary bytes in many ways (IndexError,
    UnicodeDecodeError, ...: about 1 file in 11 of 4 KB); each is one whole sentence."""
    path = tmp_path / "noise.ckpt"
    for seed in range(200):
        path.write_bytes(random.Random(seed).randbytes(4096))
        _assert_whole_sentence(path)


def test_legacy_checkpoint_without_checksum_loads_and_the_shipped_model_is_sealed(work, tmp_path):
    ckpt = torch.load(work / "good.ckpt", weights_only=True)
    assert ckpt["seq2seq"]["format"] == 5 and len(ckpt["seq2seq"]["checksum"]) == 64
    del ckpt["seq2seq"]["checksum"]
    ckpt["seq2seq"]["format"] = 1  # what seq2seq 0.1 wrote
    torch.save(ckpt, tmp_path / "v1.ckpt")
    with pytest.warns(UserWarning, match="format 1.*cannot be detected"):
        load_checkpoint(tmp_path / "v1.ckpt")
    code, _, err = run_command("average", ["-o", str(tmp_path / "sealed.ckpt"), str(tmp_path / "v1.ckpt")])
    assert code == 0 and err.count("warning: ") == 1 and "format 1" in err, err
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # checksummed: no warning
        sealed = load_checkpoint(tmp_path / "sealed.ckpt")
    assert sealed["seq2seq"]["format"] == 5
    assert all(torch.equal(sealed["state_dict"][k], v) for k, v in ckpt["state_dict"].items())
    shipped = load_checkpoint(ROOT / "data" / "models" / "multi30k_de_en_tiny.ckpt")
    assert shipped["seq2seq"]["format"] == 3  # sealed, with its calibration (seq2seq-calibrate)
    resealed = seal(copy.deepcopy(shipped))
    assert resealed["seq2seq"]["checksum"] == shipped["seq2seq"]["checksum"]  # deterministic


def test_a_sealed_good_checkpoint_still_loads(work):
    assert load_checkpoint(work / "good.ckpt")["seq2seq"]["src_lang"] == "de"


SIZES = {  # model_config edits that would allocate GBs if a model were built from them
    "d_model 2^20": {"d_model": 2**20},
    "100,000 encoder layers": {"encoder_layers": 100_000},
    "4,000 decoder layers": {"decoder_layers": 4_000},
    "2^40 positions": {"max_positions": 2**40},
    "learned 2^40 positions": {"positional": "learned", "max_positions": 2**40},
    "d_ff 2^30": {"d_ff": 2**30},
    "2^20 heads of 64": {"n_heads": 2**20, "d_k": 64, "d_v": 64},
}


@pytest.fixture(scope="module")
def edited(work, tmp_path_factory) -> dict[str, Path]:
    """Each edit twice: with the checksum left as it was, and re-sealed (as a determined
    editor would): the sizes must be refused from the weights either way."""
    d = tmp_path_factory.mktemp("edited")
    good = torch.load(work / "good.ckpt", weights_only=True)
    paths = {}
    for name, edit in SIZES.items():
        for sealed in (False, True):
            ckpt = copy.deepcopy(good)
            ckpt["seq2seq"]["model_config"].update(edit)
            stem = "".join(c if c.isalnum() else "_" for c in name)  # a name serve accepts
            paths[name, sealed] = d / f"{stem}{'-sealed' if sealed else ''}.ckpt"
            torch.save(seal(ckpt) if sealed else ckpt, paths[name, sealed])
    return paths


@pytest.mark.parametrize("sealed", [False, True], ids=["checksum kept", "re-sealed"])
@pytest.mark.parametrize("case", list(SIZES))
@pytest.mark.parametrize("command", COMMANDS)
def test_edited_sizes_are_refused_before_any_model_is_built(command, case, sealed, edited, work,
                                                            tmp_path, monkeypatch):
    if command in NEEDS:
        pytest.importorskip(NEEDS[command])

    def no_model(*_, **__):
        raise AssertionError("a model was built from an unverified config")

    monkeypatch.setattr(checkpoint, "Seq2Seq", no_model)
    start = time.perf_counter()
    argv = _argv(command, edited[case, sealed], work, tmp_path, alone=True)
    line = assert_refused(run_command(command, argv), command)
    assert "model_config" in line  # the size named, checksum or not
    assert time.perf_counter() - start < 30  # was 7 s for 4,000 layers, GBs for the rest
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("command", COMMANDS)
def test_a_fifo_as_checkpoint_is_refused_not_waited_on(command, work, tmp_path):
    fifo = tmp_path / "x.ckpt"
    os.mkfifo(fifo)
    out = tmp_path / "out"
    with deadline(60):
        assert_refused(run_command(command, _argv(command, fifo, work, out, alone=True)), command,
                       "named pipe (FIFO)")
    assert not out.exists()


def test_interrupted_writes_are_cleaned_up_but_not_a_write_in_progress(tmp_path):
    """``save_atomic`` removes the temporary files of a killed writer of the same target
    (its PID is in the name), never one another live process is still writing."""
    from seq2seq.files import save_atomic

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    killed = tmp_path / f".a.ckpt.{dead}.k1.tmp"
    busy = tmp_path / f".a.ckpt.{os.getppid()}.k2.tmp"  # our parent: alive
    other = tmp_path / f".b.ckpt.{dead}.k3.tmp"  # another target's: its own next save
    for p in (killed, busy, other):
        p.write_bytes(b"half")
    save_atomic({"x": 1}, tmp_path / "a.ckpt")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([busy.name, other.name, "a.ckpt"])
