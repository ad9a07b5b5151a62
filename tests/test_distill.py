"""Sequence-level distillation (``seq2seq.distill``, ``seq2seq-distill``): the distilled
corpus is the teacher's own translations, line-aligned with its sources; a stopped run
continues to the same corpus; a folder started otherwise is refused; the corpus is an
ordinary data source that training configs list beside the original."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from helpers import multi30k_lines, run_main, save_tiny_checkpoint, tiny_tokenizers

from seq2seq.cli.distill import main as distill_main
from seq2seq.config import DataConfig, DecodingConfig
from seq2seq.data.sources import pair_batches
from seq2seq.distill import DistillPlan, corpus_files, distill, sha256
from seq2seq.translation.segment import split_text
from seq2seq.translation.translator import Translator

LINES = 23  # three shards of 10, the last one short


@pytest.fixture(scope="module")
def teacher(tmp_path_factory) -> Path:
    return save_tiny_checkpoint(tmp_path_factory.mktemp("teacher") / "t.ckpt", tiny_tokenizers())


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("src") / "train.de"
    lines = multi30k_lines("de", LINES - 1) + [""]  # a blank line stays a (blank) pair
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _plan(teacher, source, out, **kw) -> DistillPlan:
    decoding = kw.pop("decoding", DecodingConfig(max_len_b=8))
    return DistillPlan((str(teacher),), str(source), str(out), decoding, shard_lines=10, **kw)


def _read(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return f.read().split("\n")[:-1]


def test_the_corpus_is_the_teachers_translations_with_provenance(teacher, source, tmp_path):
    summary = distill(_plan(teacher, source, tmp_path / "d"))
    src_file, tgt_file = corpus_files(tmp_path / "d", "de", "en")
    src, tgt = _read(src_file), _read(tgt_file)
    lines = source.read_text(encoding="utf-8").split("\n")[:-1]
    expected = Translator.from_checkpoint(teacher, DecodingConfig(max_len_b=8)).translate(lines)
    assert src == lines and tgt == expected and summary["corpus"]["pairs"] == LINES
    meta = json.loads((tmp_path / "d" / "provenance.json").read_text())
    assert meta["teachers"][0]["sha256"] == sha256(teacher)
    assert meta["source"]["sha256"] == sha256(source) and meta["decoding"]["max_len_b"] == 8


class _StopAfter:
    """A teacher that is stopped (KeyboardInterrupt) at its ``n``-th call; counts calls."""

    def __init__(self, translator: Translator, n: int | None):
        self.translator, self.n, self.calls = translator, n, 0

    def __getattr__(self, name):
        return getattr(self.translator, name)

    def translate_full(self, texts, **kw):
        self.calls += 1
        if self.n is not None and self.calls == self.n:
            raise KeyboardInterrupt
        return self.translator.translate_full(texts, **kw)


def test_a_stopped_run_continues_where_it_was_to_the_same_corpus(teacher, source, tmp_path):
    whole = distill(_plan(teacher, source, tmp_path / "whole"))
    real = Translator.from_checkpoint(teacher, DecodingConfig(max_len_b=8))
    stopped = _StopAfter(real, n=2)
    with pytest.raises(KeyboardInterrupt):
        distill(_plan(teacher, source, tmp_path / "d"), translator=stopped)
    assert not corpus_files(tmp_path / "d", "de", "en")[0].exists()  # no half corpus
    again = _StopAfter(real, n=None)
    resumed = distill(_plan(teacher, source, tmp_path / "d"), translator=again)
    assert again.calls == 2  # shards 2 and 3 only: shard 1 was kept
    assert resumed["corpus"]["pairs"] == whole["corpus"]["pairs"]
    for a, b in zip(corpus_files(tmp_path / "d", "de", "en"), corpus_files(tmp_path / "whole", "de", "en")):
        assert _read(a) == _read(b)


def test_a_folder_started_with_other_settings_or_not_ours_is_refused(teacher, source, tmp_path):
    distill(_plan(teacher, source, tmp_path / "d"))
    other = DecodingConfig(max_len_b=8, method="beam", beam_size=2)
    with pytest.raises(ValueError, match="other decoding"):
        distill(_plan(teacher, source, tmp_path / "d", decoding=other))
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="not a distillation folder"):
        distill(_plan(teacher, source, tmp_path / "mine"))
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_nbest_gives_each_source_once_per_hypothesis(teacher, source, tmp_path):
    decoding = DecodingConfig(max_len_b=8, method="beam", beam_size=3, nbest=2)
    summary = distill(_plan(teacher, source, tmp_path / "d", decoding=decoding))
    src, tgt = (_read(p) for p in corpus_files(tmp_path / "d", "de", "en"))
    lines = source.read_text(encoding="utf-8").split("\n")[:-1]
    results = Translator.from_checkpoint(teacher, decoding).translate_full(lines)
    assert src == [r.src for r in results for _ in r.nbest]
    assert tgt == [h for r in results for h, _ in r.nbest]
    assert summary["corpus"]["pairs"] == sum(len(r.nbest) for r in results) > LINES


def test_nbest_gives_a_line_of_two_sentences_n_pairs_too(teacher, tmp_path):
    """``--nbest 2``: two pairs a source line, however many sentences the line holds (it is
    translated a sentence at a time)."""
    one = multi30k_lines("de", 10)
    lines = [f"{a} {b}" for a, b in zip(one[::2], one[1::2])]
    assert all(len(split_text(line, "de").sentences) == 2 for line in lines)
    source = tmp_path / "two.de"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, stdout, err = run_main(distill_main, ["-m", str(teacher), "--source", str(source), "-o",
                                                str(tmp_path / "d"), "--beam", "3", "--nbest", "2",
                                                "--max-len-b", "8", "--no-progress"])
    assert code in (0, None) and json.loads(stdout)["pairs"] == 2 * len(lines), err
    src, tgt = (_read(p) for p in corpus_files(tmp_path / "d", "de", "en"))
    assert src == [line for line in lines for _ in range(2)]
    best = Translator.from_checkpoint(teacher, DecodingConfig(
        max_len_b=8, method="beam", beam_size=3, nbest=2)).translate(lines)
    assert tgt[::2] == best


def test_the_corpus_is_a_data_source_mixed_with_the_original(teacher, source, tmp_path):
    distill(_plan(teacher, source, tmp_path / "d"))
    src_d, tgt_d = corpus_files(tmp_path / "d", "de", "en")
    orig_src, orig_tgt = tmp_path / "o.de", tmp_path / "o.en"
    orig_src.write_text("Ein Hund.\nZwei Katzen.\n")
    orig_tgt.write_text("A dog.\nTwo cats.\n")
    both = DataConfig(corpus=None, format="text", train_src=[str(orig_src), str(src_d)],
                      train_tgt=[str(orig_tgt), str(tgt_d)], valid_src=str(orig_src),
                      valid_tgt=str(orig_tgt))
    pairs = [p for src, tgt in pair_batches(both, "train") for p in zip(src, tgt)]
    distilled = list(zip(_read(src_d), _read(tgt_d)))
    kept = [(s.strip(), t.strip()) for s, t in distilled if s.strip() and t.strip()]  # cleaned
    assert pairs[:2] == [("Ein Hund.", "A dog."), ("Zwei Katzen.", "Two cats.")]
    assert pairs[2:] == kept


def test_the_command_writes_the_corpus_and_refuses_bad_input(teacher, source, tmp_path):
    out = tmp_path / "d"
    code, stdout, err = run_main(distill_main, ["-m", str(teacher), "--source", str(source), "-o",
                                                str(out), "--max-len-b", "8", "--shard-lines", "10",
                                                "--no-progress"])
    assert code in (0, None) and json.loads(stdout)["pairs"] == LINES, err
    code, _, err = run_main(distill_main, ["-m", str(teacher), "--source", str(tmp_path / "nope"),
                                           "-o", str(tmp_path / "e"), "--no-progress"])
    assert code == 2 and err.count("\n") == 1 and "nope" in err
    code, _, err = run_main(distill_main, ["-m", str(teacher), "--source", str(source), "-o",
                                           str(out), "--beam", "2", "--no-progress"])
    assert code == 2 and "other decoding" in err and "Traceback" not in err

