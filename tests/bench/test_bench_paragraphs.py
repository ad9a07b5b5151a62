"""The paragraph measurement (``scripts/bench/paragraphs.py``) on the shipped De->En model:
test sentences joined 3 a line and translated whole lose nothing against the same
sentences one by one, and translating them unsplit does worse."""

from __future__ import annotations

import gzip
import itertools
from pathlib import Path

from scripts.bench.paragraphs import join_groups, measure
from seq2seq.config import DecodingConfig
from seq2seq.translation.translator import Translator

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "data" / "models" / "multi30k_de_en_tiny.ckpt"
TEST = ROOT / "data" / "multi30k" / "test_2016_flickr"


def _lines(lang: str, n: int) -> list[str]:
    with gzip.open(f"{TEST}.{lang}.gz", "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in itertools.islice(f, n)]


def test_groups_are_consecutive_lines_and_a_short_last_group_is_dropped():
    lines = [f"s{i}." for i in range(8)]
    groups = join_groups(lines, 3)
    assert groups == [" ".join(lines[0:3]), " ".join(lines[3:6])]
    assert join_groups(lines, 1) == lines and join_groups(lines[:2], 3) == []


def test_three_sentence_paragraphs_lose_nothing():
    shipped = Translator.from_checkpoint(SHIPPED, DecodingConfig(method="greedy"))
    result = measure(shipped, _lines("de", 30), _lines("en", 30))
    assert result["paragraphs"] == 10 and result["split"]["lost"] == 0
    assert abs(result["split"]["BLEU"] - result["sentence_by_sentence"]["BLEU"]) <= 0.5
    assert result["no_split"]["BLEU"] < result["split"]["BLEU"]
    assert shipped.decoding.split_sentences  # the translator's decoding is put back
