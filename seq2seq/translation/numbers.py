"""Numbers inside a sentence: whether they came through the model (``missing_numbers``) and
putting them back where the model changed them (``restore_numbers``).

A small model copies digits poorly: ``15 Meter`` -> ``155's``, ``12,5 kg`` -> ``12255``. Where
the output holds as many changed numbers as the source lost, each changed one is the
model's attempt at a lost one (numbers keep their order between the languages we translate
far more often than not), so each is replaced by the source's number as it was written.
A number the output dropped, or wrote as a word (``2`` -> ``two``), has no place to go back
to: it stays missing and the output is flagged (``result.output_flags``).
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter

_DIGITS = re.compile(r"\d+")
# a number as written: digit runs joined by one separator each ("3,50", "1.000.000", "12:30")
_NUMBER = re.compile(r"\d+(?:[.,:]\d+)*")


def _value(run: str) -> str:
    """A digit run as ASCII, leading zeros dropped: any script's digits compare equal."""
    return "".join(str(unicodedata.decimal(c)) for c in run).lstrip("0") or "0"


def _numbers(text: str) -> Counter:
    """The digit runs of ``text`` by value: ``3,50`` and ``3.50`` both hold 3 and 50, so a
    decimal comma's translation matches."""
    return Counter(_value(run) for run in _DIGITS.findall(text))


def missing_numbers(src: str, hyp: str) -> bool:
    """Whether a number of ``src`` is not in ``hyp`` (as many times): dropped or changed
    (``2,50 Euro`` -> ``20s``), or written as a word (``2`` -> ``two``)."""
    return bool(_numbers(src) - _numbers(hyp))


def _key(number: str) -> tuple[str, ...]:
    return tuple(_value(run) for run in _DIGITS.findall(number))


def _unmatched(found: list[re.Match], other: Counter) -> list[re.Match]:
    """The numbers of ``found`` (in order) that ``other`` (keys, as many times) does not hold."""
    left, out = Counter(other), []
    for m in found:
        k = _key(m.group())
        if left[k]:
            left[k] -= 1
        else:
            out.append(m)
    return out


def restore_numbers(src: str, hyp: str) -> str:
    """``hyp`` with each number the model changed replaced by the source number it lost, in
    order, where the counts agree (``"Zwei Männer laufen 15 Meter."``, ``"Two men run 155
    meters."`` -> ``"Two men run 15 meters."``); otherwise ``hyp`` unchanged. A number
    written with another decimal mark (``2,50`` -> ``2.50``) is not a change."""
    if not missing_numbers(src, hyp):
        return hyp
    src_numbers = list(_NUMBER.finditer(src))
    hyp_numbers = list(_NUMBER.finditer(hyp))
    lost = _unmatched(src_numbers, Counter(_key(m.group()) for m in hyp_numbers))
    changed = _unmatched(hyp_numbers, Counter(_key(m.group()) for m in src_numbers))
    if not lost or len(lost) != len(changed):
        return hyp
    pieces, at = [], 0
    for old, new in zip(changed, lost):
        pieces += [hyp[at:old.start()], new.group()]
        at = old.end()
    return "".join(pieces) + hyp[at:]
