"""Numbers inside a sentence come back as the source wrote them where the model changed them
(``seq2seq.translation.numbers``): the repair's properties on generated texts, and the
shipped model's outputs with it against the same outputs without it."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seq2seq.config import DecodingConfig
from seq2seq.translation.numbers import missing_numbers, restore_numbers
from seq2seq.translation.translator import Translator

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "data" / "models" / "multi30k_de_en_tiny.ckpt"
NUMBER = re.compile(r"\d+(?:[.,:]\d+)*")

numbers = st.from_regex(r"\A[0-9٣]{1,4}([.,:][0-9]{1,3})?\Z")
words = st.sampled_from(["a", "Hund", "dogs", "run", "m", "'s", "(", ")", ".", ",", "€"])


@st.composite
def sentences(draw, numbers_in: list[str] | None = None) -> str:
    """Words and numbers with spaces; ``numbers_in``: these numbers, in this order."""
    count = len(numbers_in) if numbers_in is not None else draw(st.integers(0, 4))
    nums = numbers_in if numbers_in is not None else [draw(numbers) for _ in range(count)]
    parts = []
    for n in nums:
        parts += draw(st.lists(words, max_size=3)) + [n]
    return " ".join(parts + draw(st.lists(words, max_size=3)))


def value(number: str) -> tuple[int, ...]:
    return tuple(int(run) for run in re.findall(r"\d+", number))


def skeleton(text: str) -> str:
    return NUMBER.sub("#", text)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_restored_numbers_are_the_sources_and_nothing_else_changes(data):
    src = data.draw(sentences())
    hyp = data.draw(sentences())
    out = restore_numbers(src, hyp)
    assert skeleton(out) == skeleton(hyp)  # only numbers are ever replaced
    if not missing_numbers(src, hyp):
        assert out == hyp  # a complete output is never touched
    elif out != hyp:
        assert not missing_numbers(src, out)  # a repair is a whole one
    assert restore_numbers(src, out) == out


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_changed_numbers_in_the_sources_order_come_back(data):
    nums = data.draw(st.lists(numbers, min_size=1, max_size=4, unique_by=value))
    src = data.draw(sentences(nums))
    hyp = data.draw(sentences(nums))  # the same numbers, other words around them
    # every other one garbled (a 5-digit first run: no source number is one)
    changed = ["99999" + n if i % 2 == 0 else n for i, n in enumerate(nums)]
    garbled = data.draw(sentences(changed))
    assert restore_numbers(src, hyp) == hyp
    out = restore_numbers(src, garbled)
    assert [m.group() for m in NUMBER.finditer(out)] == nums


def test_examples():
    assert restore_numbers("Zwei Männer laufen 15 Meter.", "Two men run 155's ground.") == \
        "Two men run 15's ground."
    assert restore_numbers("Ein Mann hat 12,5 kg.", "A man has 12255.") == "A man has 12,5."
    # another decimal mark is not a change; a dropped number has nowhere to go back to
    assert restore_numbers("Er zahlt 2,50 Euro.", "He pays 2.50 euros.") == "He pays 2.50 euros."
    assert restore_numbers("Ein Mann mit 2 Hunden.", "A man with two dogs.") == "A man with two dogs."
    # two lost, one changed: which one it was is not known, so nothing is guessed
    assert restore_numbers("3 Hunde und 4 Katzen.", "33 dogs and cats.") == "33 dogs and cats."


@pytest.fixture(scope="module")
def shipped() -> Translator:
    return Translator.from_checkpoint(SHIPPED, DecodingConfig(method="greedy"))


def test_the_shipped_model_keeps_numbers_in_a_sentence(shipped):
    texts = ["Zwei Männer und 3 Hunde laufen 15 Meter.", "Ein Mann hat 12,5 kg.",
             "Price: 3.50 EUR", "Ein Junge mit 2 Bällen.", "Eine Frau sitzt auf einer Bank."]
    raw = Translator(shipped.model, shipped.tokenizers,
                     dataclasses.replace(shipped.decoding, restore_numbers=False), None, None,
                     shipped.pair)
    before = raw.translate_full(texts)
    after = shipped.translate_full(texts)
    for b, a in zip(before, after):  # the same search; the repair alone differs
        assert a.hyp == restore_numbers(b.src, b.hyp)
        assert ("numbers" in a.flags) == missing_numbers(a.src, a.hyp)
    assert "numbers" in before[0].flags and "numbers" in before[1].flags  # the model garbles them
    assert "15" in after[0].hyp.split("'")[0].split() and "12,5" in after[1].hyp
    assert "3.50" in after[2].hyp
