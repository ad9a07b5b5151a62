"""Hostile documents (seq2seq.documents): adversarial shapes cost time linear in their size
(a 10x larger input takes about 10x, never 100x, and a megabyte a few seconds), and every
file that does not parse is refused in one line naming it. The translator is an identity
stand-in, so what is timed is the reading and writing of the document alone."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("docx", reason="needs the documents extra")
pytest.importorskip("srt", reason="needs the documents extra")

from test_markup import split  # noqa: E402

from seq2seq.documents import translate_document  # noqa: E402
from seq2seq.documents.align import Aligned  # noqa: E402
from seq2seq.documents.formats import wrapping_tags  # noqa: E402


def identity(sentences: list[str]) -> list[Aligned]:
    return [Aligned(s) for s in sentences]


def cue(content: str) -> str:
    return f"1\n00:00:01,000 --> 00:00:02,000\n{content}\n"


# name -> (file name, the document with n repetitions of its adversarial part)
SHAPES = {
    "srt closing tags": ("a.srt", lambda n: cue("<i>" + "</i>" * n + "x")),
    "srt opening tags": ("a.srt", lambda n: cue("<i>" * n + "x")),
    "srt lines": ("a.srt", lambda n: cue("\n".join(["Wort"] * n))),
    "html nested": ("a.html", lambda n: "<p>" + "<b>" * n + "x" + "</b>" * n + "</p>"),
    "html br": ("a.html", lambda n: "<p>" + "a<br>" * n + "</p>"),
    "html crossing": ("a.html", lambda n: "<p>" + "<b>x<i>y</b>z</i>" * n + "</p>"),
    "html comments": ("a.html", lambda n: "<p>" + "a<!-- c -->" * n + "</p>"),
}
# seq2seq.documents.inline is another change's file: its quadratic spots stay marked here
INLINE = {
    "html nested": "inline.match looks through the whole stack of open elements at each close",
}


def seconds(shape, n: int, best_of: int = 1) -> float:
    name, make = SHAPES[shape]
    data = make(n).encode()
    times = []
    for _ in range(best_of):
        start = time.perf_counter()
        translate_document(data, name, identity, split=split)
        times.append(time.perf_counter() - start)
    return min(times)


def megabyte(shape) -> int:
    """The repetitions that make the shape's document about 1 MB."""
    make = SHAPES[shape][1]
    return 2**20 // (len(make(101)) - len(make(100)))


@pytest.mark.parametrize("shape", [
    pytest.param(s, marks=pytest.mark.xfail(s in INLINE, reason=INLINE.get(s, ""), strict=True))
    for s in SHAPES])
def test_adversarial_documents_take_linear_time(shape):
    n = 32
    while seconds(shape, n) < 0.05:  # the small size: long enough to time on a busy machine
        n *= 2
    small, large = seconds(shape, n, best_of=3), seconds(shape, 10 * n)
    assert large / small < 25, f"{shape}: {n} took {small:.3f} s, {10 * n} took {large:.3f} s"
    start = time.perf_counter()
    translate_document(SHAPES[shape][1](megabyte(shape)).encode(), SHAPES[shape][0], identity,
                       split=split)
    assert time.perf_counter() - start < 10


# ---------------------------------------------------------------- subtitles wrapped in tags
OLD_WRAPPING_TAGS = re.compile(r"^((?:<[ibu]>|<font[^>]*>)+)(.*?)((?:</[ibu]>|</font>)+)\Z", re.S | re.I)
FRAGMENTS = ["<i>", "<B>", "<u>", '<font color="red">', "</i>", "</b>", "</U>", "</font>", "x",
             " ", "<", ">", "\n", "İ"]


@given(st.lists(st.sampled_from(FRAGMENTS), max_size=12).map("".join))
def test_wrapping_tags_are_the_regex_s_without_its_backtracking(content):
    m = OLD_WRAPPING_TAGS.match(content)
    assert wrapping_tags(content) == (m.groups() if m else None)
