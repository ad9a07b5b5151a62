"""Property-based fuzzing (Hypothesis) of what users type to ``seq2seq-translate``: every
numeric option (shared with ``-evaluate``) and any bytes on its input. Whatever comes in: no
traceback; a refusal is one line naming the option, exit status 2; an accepted input gives
exactly one output line per input line."""

from __future__ import annotations

import pytest
from helpers import run_main, save_tiny_checkpoint, tiny_tokenizers
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seq2seq.cli.translate import main as translate_main

FUZZ = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


OPTIONS = {
    "--beam": [], "--nbest": ["--beam", "8"], "--lenpen": ["--beam", "2", "--length-penalty", "gnmt"],
    "--max-len-a": [], "--max-len-b": [], "--min-len": [], "--max-tokens": [],
    "--patience": ["--beam", "2", "--stopping", "patience"],
    "--temperature": ["--sample", "--seed", "1"], "--topk": ["--sample", "--seed", "1"],
    "--topp": ["--sample", "--seed", "1"], "--seed": ["--sample"],
}


NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.integers(min_value=-3, max_value=1001).map(str),  # near the limits that matter
    st.sampled_from(["nan", "-nan", "inf", "-inf", "1e30", "1e-400", "-0", "0x10", "1_0", "", " 3",
                     "abc", "9" * 40, "1e20", "0.5"]),
)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return save_tiny_checkpoint(tmp_path_factory.mktemp("fuzz") / "tiny.ckpt", tiny_tokenizers())


def translate(argv: list[str], stdin: bytes = b"") -> tuple[int, str, str]:
    return run_main(translate_main, argv, stdin)


@FUZZ
@given(flag=st.sampled_from(sorted(OPTIONS)), value=NUMBERS)
def test_any_numeric_option_value(checkpoint, flag, value):
    code, out, err = translate(["-m", str(checkpoint), f"{flag}={value}", *OPTIONS[flag],
                                "Ein Hund rennt."])
    assert "Traceback" not in err
    if code == 0:
        assert out.count("\n") == 1 and "error" not in err, (flag, value, err)
    else:
        last, = err.strip().splitlines()  # one line
        assert code == 2 and out == "", (flag, value, code, err)
        assert last.startswith("seq2seq-translate: error: ") and flag in last, (flag, value, last)


def _expected_lines(data: bytes) -> int:
    """What ``wc -l`` counts, plus a last line without its newline."""
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


@FUZZ
@given(parts=st.lists(st.one_of(st.text(max_size=30), st.binary(max_size=30),
                                st.sampled_from(["\r", "\u2028", "\x00", "\ufeff", "🐶" * 20, " " * 5])),
                      max_size=6),
       end=st.sampled_from([b"", b"\n", b"\r\n"]), beam=st.sampled_from(["1", "3"]))
def test_any_input_keeps_one_output_line_per_input_line(checkpoint, parts, end, beam):
    data = b"\n".join(p if isinstance(p, bytes) else p.encode("utf-8") for p in parts) + end
    code, out, err = translate(["-m", str(checkpoint), "--beam", beam, "--max-len-b", "5"], data)
    assert code == 0 and "Traceback" not in err, err
    assert out.count("\n") == _expected_lines(data), (data, out)
    assert "\r" not in out
