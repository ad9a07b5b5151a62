"""The data benchmark (``scripts/bench/data.py``), at a size that takes seconds: its stages count
what they measure."""

from __future__ import annotations

import pytest
from helpers import ROOT

from seq2seq.data.sources import read_lines

DATA = ROOT / "data" / "multi30k"


def test_data_benchmark_stages_count_what_they_measure(tmp_path):
    from scripts.bench import data as bench

    n = 30_500  # a little over one Multi30k: the repeat is numbered
    bench.synthetic_corpus(tmp_path / "corpus", n, DATA)
    pairs = list(zip(*(read_lines(tmp_path / "corpus" / f"train.{lang}") for lang in ("de", "en")), strict=True))
    assert len(pairs) == n and pairs[29_000][0].endswith(" (1)") and pairs[29_000][1].endswith(" (1)")
    assert len(set(pairs)) == len(set(pairs[:29_000])) + n - 29_000  # repeats are new pairs
    cfg = bench.scale_config(tmp_path / "corpus", tmp_path / "cache", DATA, num_proc=None)
    prepared = bench.stage_prepare(cfg)
    assert prepared["pairs"] == n and 0.99 * n < prepared["pairs_kept"] <= n
    assert prepared["pairs_per_s"] == pytest.approx(n / prepared["seconds"], rel=0.01)
    epoch = bench.stage_epoch(cfg)
    assert epoch["pairs"] == prepared["pairs_kept"] and epoch["batches"] > n * 15 // 4096
    assert bench.growth_per_million([1_000_000, 5_000_000, 10_000_000], [700, 740, 790]) == 10.0
