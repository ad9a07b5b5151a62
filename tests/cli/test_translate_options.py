"""``seq2seq-translate``'s options and input on the command line: every refusal is one line on
stderr with exit status 2 and no traceback, stdout keeps its one-line-per-input contract, and
what is accepted is correct (a warning names what it did to the input or ignored)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from helpers import ROOT, assert_refused, run_command

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
    result = run_command("translate", ["-m", str(work / "good.ckpt"), *flags, SENTENCE])
    if words:
        assert_refused(result, "translate", *words)
    else:
        code, out, err = result
        assert code == 0 and out.count("\n") == 1 and "Traceback" not in err, result


def test_huge_max_len_means_the_models_limit_not_an_overflow(work):
    """``--max-len-a 1e30`` once wrapped int64 and translated to one token ("A")."""
    outputs = {a: run_command("translate", ["-m", str(work / "good.ckpt"), "--max-len-a", a, SENTENCE])[1]
               for a in ("1e30", "1e300", "1000")}
    assert len(set(outputs.values())) == 1 and len(outputs["1000"].split()) >= 1
    long = run_command("translate", ["-m", str(work / "good.ckpt"), "--max-len-b", "99999999", SENTENCE])[1]
    assert long == outputs["1000"]


@pytest.mark.parametrize("flags, word", [
    (["--lenpen", "1.0"], "--lenpen"),
    (["--temperature", "0.5"], "--temperature"),
    (["--beam", "3", "--patience", "2"], "--patience"),
    (["--stopping", "exact"], "--stopping"),
])
def test_flags_without_effect_are_named(flags, word, work):
    code, out, err = run_command("translate", ["-m", str(work / "good.ckpt"), *flags, SENTENCE])
    assert code == 0 and out.count("\n") == 1
    assert any(line.startswith("seq2seq-translate: warning: " + word) for line in err.splitlines())


def test_invalid_utf8_lines_are_counted(work):
    stdin = b"Ein Hund.\n\xff\xfe kaputt\nZwei \xc3\x28 M\xe4nner\n\nEnde"
    code, out, err = run_command("translate", ["-m", str(work / "good.ckpt")], stdin)
    assert code == 0 and out.count("\n") == 5
    assert "2 input line(s) were not valid UTF-8" in err


def test_truncation_warning_once(work):
    text = " ".join(["Hund"] * 200)
    code, out, err = run_command("translate", ["-m", str(work / "good.ckpt"), "--no-split", text])
    assert code == 0 and out.count("\n") == 1
    assert sum("truncated" in line for line in err.splitlines()) == 1, err
    code, out, err = run_command("translate", ["-m", str(work / "good.ckpt"), text])  # split: cut, whole
    assert code == 0 and out.count("\n") == 1 and "truncated" not in err
    assert sum("was cut at words" in line for line in err.splitlines()) == 1, err


@pytest.mark.parametrize("flags, words", [
    (["--input", "/nonexistent/x.txt"], ["--input", "No such file"]),
    (["--input", "."], ["--input", "directory"]),
    (["--plot-attention", "."], ["--plot-attention", "directory"]),
])
def test_translate_paths(flags, words, work):
    assert_refused(run_command("translate", ["-m", str(work / "good.ckpt"), *flags]), "translate", *words)


def test_lone_carriage_returns_are_counted_not_silent(work):
    stdin = b"Ein Hund.\rZwei Katzen.\rDrei V\xc3\xb6gel.\r\nEine Frau.\r\n"
    code, out, err = run_command("translate", ["-m", str(work / "good.ckpt")], stdin)
    assert code == 0 and out.count("\n") == 2  # LF ends a line; CRLF is one line end
    assert "1 input line(s) hold a carriage return" in err and err.count("warning:") == 1, err
    code, out, err = run_command("translate", ["-m", str(work / "good.ckpt")], b"Ein Hund.\r\nEine Frau.\n")
    assert code == 0 and out.count("\n") == 2 and "carriage return" not in err


def test_min_len_beyond_the_length_limit_is_said(work):
    """Forced EOS wins over --min-len: where the limit is at or below it, the output stops
    at the limit unfinished, with a warning counting those sentences (not silently)."""
    args = ["-m", str(work / "good.ckpt"), "--max-len-a", "0", "--max-len-b", "5"]
    code, out, err = run_command("translate", [*args, "--min-len", "5", "Ein Hund.", "Zwei Katzen.", "  "])
    assert code == 0 and out.count("\n") == 3
    assert "2 sentence(s) have a length limit" in err and "--min-len 5" in err, err
    code, out, err = run_command("translate", [*args, "--min-len", "4", "Ein Hund."])
    assert code == 0 and "length limit" not in err, err


def test_directory_as_checkpoint_says_so(work):
    assert_refused(run_command("translate", ["-m", str(work), "x"]), "translate", "is a directory")


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
