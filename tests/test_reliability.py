"""Hostile input to seq2seq-translate, -evaluate, -average and -export (issue 14): every
refusal is one line on stderr with exit status 2 and no traceback, stdout keeps its
one-line-per-input contract, no input file changes, and what is accepted is correct.

Table-driven: one row per bad input. ``seq2seq-train`` is in ``test_reliability_train.py``.
"""

from __future__ import annotations

import copy
import hashlib
import os
import pickle
import random
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from helpers import run_main, save_tiny_checkpoint, tiny_tokenizers

from seq2seq.checkpoint import CheckpointError, load_checkpoint, seal
from seq2seq.cli import average, evaluate, export, translate
from seq2seq.data.tokenizer import TokenizerPair

ROOT = Path(__file__).resolve().parents[1]
MAINS = {"translate": translate.main, "evaluate": evaluate.main, "average": average.main,
         "export": export.main}


@pytest.fixture(scope="module")
def tokenizers() -> TokenizerPair:
    return tiny_tokenizers()


@pytest.fixture(scope="module")
def other_tokenizers() -> TokenizerPair:
    """Another tokenizer of the same size: a checkpoint relabelled with it must be refused."""
    return tiny_tokenizers(langs=("en",), n=300)


@pytest.fixture(scope="module")
def work(tmp_path_factory, tokenizers) -> Path:
    """A folder with a good checkpoint, a small parallel test set, and nothing else."""
    d = tmp_path_factory.mktemp("reliability")
    save_tiny_checkpoint(d / "good.ckpt", tokenizers)
    save_tiny_checkpoint(d / "good2.ckpt", tokenizers, seed=1)
    (d / "src.de").write_text("Ein Hund.\nZwei Männer.\n", encoding="utf-8")
    (d / "ref.en").write_text("A dog.\nTwo men.\n", encoding="utf-8")
    return d


def run(command: str, argv: list[str], stdin: bytes = b"") -> tuple[int, str, str]:
    return run_main(MAINS[command], argv, stdin)


def assert_refused(result: tuple[int, str, str], command: str, *needles: str) -> str:
    """Exit 2, nothing on stdout, one stderr line ``seq2seq-X: error: ...`` holding every
    needle (argparse's own errors too)."""
    code, out, err = result
    lines = err.strip().splitlines()
    assert code == 2 and out == "", (code, out, err)
    assert len(lines) == 1 and lines[-1].startswith(f"seq2seq-{command}: error: "), err
    for needle in needles:
        assert needle in lines[-1], (needle, lines[-1])
    return lines[-1]


def snapshot(folder: Path) -> dict[str, str]:
    """Name -> sha256 of every file under ``folder`` (inputs must not change)."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------- damaged checkpoints
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


def _argv(command: str, ckpt: Path, work: Path, out: Path) -> list[str]:
    return {
        "translate": ["-m", str(ckpt), "Ein Hund."],
        "evaluate": ["-m", str(ckpt), "--src-file", str(work / "src.de"), "--ref-file",
                     str(work / "ref.en"), "--hyp-dir", str(out), "--quiet"],
        "average": ["-o", str(out / "avg.ckpt"), str(work / "good.ckpt"), str(ckpt)],
        "export": ["-m", str(ckpt), "--to", "ctranslate2", "-o", str(out / "ct2")],
    }[command]


@pytest.mark.parametrize("command", list(MAINS))
@pytest.mark.parametrize("case", list(DAMAGE))
def test_damaged_checkpoint_is_refused_by_every_command(case, command, damaged, work, tmp_path):
    if command == "export":
        pytest.importorskip("ctranslate2")
    ckpt = damaged[case]
    before = snapshot(ckpt.parent) | snapshot(work)
    line = assert_refused(run(command, _argv(command, ckpt, work, tmp_path)), command,
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
    code, _, err = run("average", ["-o", str(tmp_path / "sealed.ckpt"), str(tmp_path / "v1.ckpt")])
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


# ---------------------------------------------------------------- translate options
SENTENCE = "Ein Hund rennt durch den Schnee."
NUMERIC = [  # (flags, words the error must hold); [] = accepted
    (["--max-len-a", "nan"], ["--max-len-a", "finite"]),
    (["--max-len-a", "inf"], ["--max-len-a", "finite"]),
    (["--max-len-a=-1"], ["--max-len-a", ">= 0"]),
    (["--max-len-b", "1e20"], ["--max-len-b", "invalid int"]),
    (["--max-len-b", "99999999999999999999"], ["--max-len-b", "out of range"]),
    (["--max-len-b", "0"], ["--max-len-b"]),
    (["--lenpen", "nan", "--length-penalty", "gnmt"], ["--lenpen", "finite"]),
    (["--lenpen", "inf", "--length-penalty", "gnmt"], ["--lenpen", "finite"]),
    (["--lenpen", "1e30", "--length-penalty", "gnmt"], ["--lenpen"]),
    (["--sample", "--temperature", "inf"], ["--temperature", "finite"]),
    (["--sample", "--temperature", "nan"], ["--temperature", "finite"]),
    (["--sample", "--temperature", "0"], ["--temperature"]),
    (["--sample", "--temperature", "1e-30"], ["--temperature"]),
    (["--sample", "--topp", "nan"], ["--topp"]),
    (["--sample", "--topk=-1"], ["--topk"]),
    (["--sample", "--seed", "99999999999999999999"], ["--seed", "out of range"]),
    (["--beam", "0"], ["--beam 0"]),
    (["--beam", "99999999999999999999"], ["--beam", "out of range"]),
    (["--beam", "100000"], ["--beam", "1000"]),
    (["--beam", "3", "--nbest", "4"], ["--nbest"]),
    (["--beam", "3", "--stopping", "patience", "--patience", "inf"], ["--patience", "finite"]),
    (["--beam", "3", "--stopping", "patience", "--patience", "1e30"], ["--patience"]),
    (["--min-len", "99999999999999999999"], ["--min-len", "out of range"]),
    (["--max-tokens", "0"], ["--max-tokens"]),
    (["--device", "foo"], ["--device", "foo"]),
    (["--device", "meta"], ["--device", "meta"]),
    *([(["--device", "cuda"], ["--device cuda"])] if not torch.cuda.is_available() else []),
    (["--max-len-a", "1e30"], []),
    (["--max-len-b", "1000000"], []),
    (["--min-len", "1000000"], []),
    (["--sample", "--temperature", "1e30", "--seed", "1"], ["--temperature"]),
    (["--sample", "--temperature", "1000", "--seed", "1"], []),
    (["--sample", "--topk", "100000", "--seed", "1"], []),
    (["--max-tokens", "99999999"], []),
]


@pytest.mark.parametrize("flags, words", NUMERIC, ids=[" ".join(f) for f, _ in NUMERIC])
def test_translate_numeric_options(flags, words, work):
    result = run("translate", ["-m", str(work / "good.ckpt"), *flags, SENTENCE])
    if words:
        assert_refused(result, "translate", *words)
    else:
        code, out, err = result
        assert code == 0 and out.count("\n") == 1 and "Traceback" not in err, result


def test_huge_max_len_means_the_models_limit_not_an_overflow(work):
    """``--max-len-a 1e30`` once wrapped int64 and translated to one token ("A")."""
    outputs = {a: run("translate", ["-m", str(work / "good.ckpt"), "--max-len-a", a, SENTENCE])[1]
               for a in ("1e30", "1e300", "1000")}
    assert len(set(outputs.values())) == 1 and len(outputs["1000"].split()) >= 1
    long = run("translate", ["-m", str(work / "good.ckpt"), "--max-len-b", "99999999", SENTENCE])[1]
    assert long == outputs["1000"]


@pytest.mark.parametrize("flags, word", [
    (["--lenpen", "1.0"], "--lenpen"),
    (["--temperature", "0.5"], "--temperature"),
    (["--beam", "3", "--patience", "2"], "--patience"),
    (["--stopping", "exact"], "--stopping"),
])
def test_flags_without_effect_are_named(flags, word, work):
    code, out, err = run("translate", ["-m", str(work / "good.ckpt"), *flags, SENTENCE])
    assert code == 0 and out.count("\n") == 1
    assert any(line.startswith("seq2seq-translate: warning: " + word) for line in err.splitlines())


def test_invalid_utf8_lines_are_counted(work):
    stdin = b"Ein Hund.\n\xff\xfe kaputt\nZwei \xc3\x28 M\xe4nner\n\nEnde"
    code, out, err = run("translate", ["-m", str(work / "good.ckpt")], stdin)
    assert code == 0 and out.count("\n") == 5
    assert "2 input line(s) were not valid UTF-8" in err


def test_truncation_warning_once(work):
    text = " ".join(["Hund"] * 200)
    code, out, err = run("translate", ["-m", str(work / "good.ckpt"), "--no-split", text])
    assert code == 0 and out.count("\n") == 1
    assert sum("truncated" in line for line in err.splitlines()) == 1, err
    code, out, err = run("translate", ["-m", str(work / "good.ckpt"), text])  # split: cut, whole
    assert code == 0 and out.count("\n") == 1 and "truncated" not in err
    assert sum("was cut at words" in line for line in err.splitlines()) == 1, err


@pytest.mark.parametrize("flags, words", [
    (["--input", "/nonexistent/x.txt"], ["--input", "No such file"]),
    (["--input", "."], ["--input", "directory"]),
    (["--plot-attention", "."], ["--plot-attention", "directory"]),
])
def test_translate_paths(flags, words, work):
    assert_refused(run("translate", ["-m", str(work / "good.ckpt"), *flags]), "translate", *words)


@pytest.mark.parametrize("target", ["the checkpoint", "the input", "a user file"])
def test_plot_attention_replaces_only_an_earlier_plot(target, work, tmp_path):
    """Never the checkpoint (-m), the --input file or another file of that name; an
    earlier attention plot is replaced."""
    ckpt, src = tmp_path / "m.ckpt", tmp_path / "src.txt"
    ckpt.write_bytes((work / "good.ckpt").read_bytes())
    src.write_text("Ein Hund.\n")
    (tmp_path / "notes.txt").write_text("precious\n")
    path = {"the checkpoint": ckpt, "the input": src, "a user file": tmp_path / "notes.txt"}[target]
    before = snapshot(tmp_path)
    words = ["is an input"] if target != "a user file" else ["not an attention plot", "--force"]
    assert_refused(run("translate", ["-m", str(ckpt), "--input", str(src),
                                     "--plot-attention", str(path)]), "translate", *words)
    assert snapshot(tmp_path) == before
    plot = tmp_path / "attn.png"
    for _ in range(2):  # the second run replaces the first one's plot
        code, out, err = run("translate", ["-m", str(ckpt), "--input", str(src), "--plot-attention", str(plot)])
        assert code == 0 and out.count("\n") == 1, err
    assert plot.read_bytes().startswith(b"\x89PNG")


def test_lone_carriage_returns_are_counted_not_silent(work):
    stdin = b"Ein Hund.\rZwei Katzen.\rDrei V\xc3\xb6gel.\r\nEine Frau.\r\n"
    code, out, err = run("translate", ["-m", str(work / "good.ckpt")], stdin)
    assert code == 0 and out.count("\n") == 2  # LF ends a line; CRLF is one line end
    assert "1 input line(s) hold a carriage return" in err and err.count("warning:") == 1, err
    code, out, err = run("translate", ["-m", str(work / "good.ckpt")], b"Ein Hund.\r\nEine Frau.\n")
    assert code == 0 and out.count("\n") == 2 and "carriage return" not in err


def test_min_len_beyond_the_length_limit_is_said(work):
    """Forced EOS wins over --min-len: where the limit is at or below it, the output stops
    at the limit unfinished, with a warning counting those sentences (not silently)."""
    args = ["-m", str(work / "good.ckpt"), "--max-len-a", "0", "--max-len-b", "5"]
    code, out, err = run("translate", [*args, "--min-len", "5", "Ein Hund.", "Zwei Katzen.", "  "])
    assert code == 0 and out.count("\n") == 3
    assert "2 sentence(s) have a length limit" in err and "--min-len 5" in err, err
    code, out, err = run("translate", [*args, "--min-len", "4", "Ein Hund."])
    assert code == 0 and "length limit" not in err, err


def test_directory_as_checkpoint_says_so(work):
    assert_refused(run("translate", ["-m", str(work), "x"]), "translate", "is a directory")


# ---------------------------------------------------------------- evaluate
@pytest.mark.parametrize("target", ["json-dir", "json-is-src", "json-is-ckpt", "hyp-dir-is-file"])
def test_evaluate_outputs_checked_before_decoding(target, work, tmp_path, monkeypatch):
    from seq2seq.decoding import translator

    def no_decoding(*a, **k):
        raise AssertionError("decoding started")

    monkeypatch.setattr(translator.Translator, "translate", no_decoding)
    (tmp_path / "file").write_text("x")
    out = {"json-dir": ["--json", str(tmp_path)],
           "json-is-src": ["--json", str(work / "src.de")],
           "json-is-ckpt": ["--json", str(work / "good.ckpt")],
           "hyp-dir-is-file": ["--hyp-dir", str(tmp_path / "file")]}[target]
    before = snapshot(work)
    argv = ["-m", str(work / "good.ckpt"), "--src-file", str(work / "src.de"),
            "--ref-file", str(work / "ref.en"), "--quiet", *out]
    assert_refused(run("evaluate", argv), "evaluate", out[0])
    assert snapshot(work) == before


def test_evaluate_replaces_earlier_outputs_only_with_force(work, tmp_path):
    """A hypothesis or --json file that exists is refused before decoding (a user's file
    of that name must not vanish); --force replaces it. Greedy and beam outputs of one
    model and test set get different names, so neither replaces the other."""
    argv = ["-m", str(work / "good.ckpt"), "--src-file", str(work / "src.de"),
            "--ref-file", str(work / "ref.en"), "--quiet", "--hyp-dir", str(tmp_path),
            "--max-len-b", "3", "--max-len-a", "0"]
    hyp = tmp_path / "good.src.de.greedy.hyp"
    hyp.write_text("precious\n")
    assert_refused(run("evaluate", argv), "evaluate", "exists", "--force")
    assert hyp.read_text() == "precious\n"
    code, _, err = run("evaluate", [*argv, "--force"])
    assert code == 0, err
    assert hyp.read_text() != "precious\n"
    code, _, err = run("evaluate", [*argv, "--beam", "2"])
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.glob("*.hyp")) == ["good.src.de.beam2.hyp", hyp.name]


# ---------------------------------------------------------------- average
def _save_variant(src: Path, dst: Path, fn) -> Path:
    ckpt = torch.load(src, weights_only=True)
    fn(ckpt)
    torch.save(seal(ckpt), dst)  # a consistent checkpoint, just not compatible
    return dst


@pytest.fixture(scope="module")
def snapshots(work, tmp_path_factory) -> Path:
    """A checkpoint folder as training leaves it: two step snapshots, a re-written step
    (``-v1``), last.ckpt."""
    d = tmp_path_factory.mktemp("snaps")
    for name, src in (("step000004.ckpt", "good.ckpt"), ("step000008.ckpt", "good2.ckpt"),
                      ("step000008-v1.ckpt", "good2.ckpt"), ("last.ckpt", "good2.ckpt")):
        (d / name).write_bytes((work / src).read_bytes())
    return d


def test_average_last_n_counts_each_step_once_and_warns_when_short(snapshots, tmp_path):
    out = tmp_path / "avg.ckpt"
    code, _, err = run("average", ["-o", str(out), "--last", "10", str(snapshots)])
    assert code == 0, err
    assert "--last 10" in err and "holds only 2 step checkpoints" in err and "averaging 2\n" in err
    assert err.strip().endswith(f"averaged 2 checkpoints -> {out}")
    assert [Path(p).name for p in load_checkpoint(out)["seq2seq"]["averaged_from"]] == \
        ["step000004.ckpt", "step000008-v1.ckpt"]


@pytest.mark.parametrize("case", ["output is a directory", "output is an input", "output exists",
                                  "output under a file", "--last 0", "folder without --last",
                                  "--last with two folders", "empty folder", "incomplete weights",
                                  "wrong shape", "mixed dtypes", "other tokenizer",
                                  "one file twice"])
def test_average_refusals(case, work, snapshots, tmp_path, other_tokenizers):
    good, good2 = str(work / "good.ckpt"), str(work / "good2.ckpt")
    key = "model.decoder.layers.0.cross_attn.w_q.weight"
    variants = {
        "incomplete weights": lambda c: c["state_dict"].pop(key),
        "wrong shape": lambda c: c["state_dict"].__setitem__(key, torch.zeros(3, 3)),
        "mixed dtypes": lambda c: c["state_dict"].update({k: v.half() for k, v in c["state_dict"].items()}),
        "other tokenizer": lambda c: c["seq2seq"].__setitem__("tokenizers", other_tokenizers.to_state()),
    }
    (tmp_path / "empty").mkdir()
    (tmp_path / "exists.ckpt").write_bytes(b"precious")
    (tmp_path / "afile").write_text("x")
    argv, words = {
        "output is a directory": (["-o", str(tmp_path), good, good2], ["directory"]),
        "output is an input": (["-o", good2, good, good2], ["one of the inputs"]),
        "output exists": (["-o", str(tmp_path / "exists.ckpt"), good, good2], ["--force"]),
        "output under a file": (["-o", str(tmp_path / "afile" / "x.ckpt"), good, good2], []),
        "--last 0": (["-o", str(tmp_path / "a.ckpt"), "--last", "0", str(snapshots)], ["--last"]),
        "folder without --last": (["-o", str(tmp_path / "a.ckpt"), str(snapshots)], ["--last N"]),
        "--last with two folders": (["-o", str(tmp_path / "a.ckpt"), "--last", "2", str(snapshots),
                                     str(snapshots)], ["one folder"]),
        "empty folder": (["-o", str(tmp_path / "a.ckpt"), "--last", "2", str(tmp_path / "empty")],
                         ["no step checkpoints"]),
        "one file twice": (["-o", str(tmp_path / "a.ckpt"), good, good2,
                            str(Path(good).parent / "." / Path(good).name)], ["same file", "once"]),
    }.get(case, (None, None))
    if case in variants:
        _save_variant(Path(good2), tmp_path / "v.ckpt", variants[case])
        argv, words = ["-o", str(tmp_path / "a.ckpt"), good, str(tmp_path / "v.ckpt")], []
    before = snapshot(work) | snapshot(snapshots) | snapshot(tmp_path)
    assert_refused(run("average", argv), "average", *words)
    assert snapshot(work) | snapshot(snapshots) | snapshot(tmp_path) == before  # nothing written


def test_average_force_replaces_an_output_but_never_an_input(work, tmp_path):
    out = tmp_path / "avg.ckpt"
    out.write_bytes((work / "good2.ckpt").read_bytes())  # an earlier output
    code, _, err = run("average", ["-o", str(out), "--force", str(work / "good.ckpt")])
    assert code == 0, err
    load_checkpoint(out)
    before = snapshot(work)
    assert_refused(run("average", ["-o", str(work / "good.ckpt"), "--force", str(work / "good.ckpt"),
                                   str(work / "good2.ckpt")]), "average", "one of the inputs")
    assert snapshot(work) == before


# ---------------------------------------------------------------- export
def test_export_force_replaces_only_its_own_folder(work, tmp_path):
    pytest.importorskip("ctranslate2")
    ckpt = str(work / "good.ckpt")
    mine = tmp_path / "mine"
    mine.mkdir()
    for name in ("model.bin", "config.json"):  # named like export files, but the user's
        (mine / name).write_text("precious")
    before = snapshot(mine)
    assert_refused(run("export", ["-m", ckpt, "--to", "ctranslate2", "-o", str(mine), "--force"]),
                   "export", "not a ctranslate2 export written by seq2seq-export")
    assert snapshot(mine) == before
    out = tmp_path / "ct2"
    for _ in range(2):  # the second time over its own previous export: replaced
        code, _, err = run("export", ["-m", ckpt, "--to", "ctranslate2", "-o", str(out), "--force"])
        assert code == 0, err
    assert_refused(run("export", ["-m", ckpt, "--to", "hf-marian", "-o", str(out), "--force"]),
                   "export")
    assert (out / "model.bin").stat().st_size > 1000


def test_cli_refusal_in_a_subprocess_is_one_line_exit_2(work):
    """The real process: exit status, stderr and stdout as a shell sees them."""
    proc = subprocess.run(
        [sys.executable, "-m", "seq2seq.cli.translate", "-m", str(work / "good.ckpt"),
         "--max-len-a", "nan", SENTENCE],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("seq2seq-translate: error: --max-len-a")
