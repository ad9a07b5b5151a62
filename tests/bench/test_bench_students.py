"""The benchmark's students section (``scripts/bench/students.py``) on tiny random models: every
row in its own process, the ratio is the teacher's beam seconds over the row's, and each row's
scores are sacreBLEU's on exactly the outputs that model's search gives on its own tokenization."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from scripts.bench import engines as E
from scripts.bench import report as R
from scripts.bench import students as S
from seq2seq.checkpoint import build_model, load_checkpoint, save_model
from seq2seq.config import ModelConfig, TokenizerConfig
from seq2seq.data.sources import read_lines
from seq2seq.data.tokenizer import Tokenizer, TokenizerPair
from seq2seq.metrics import all_scores
from seq2seq.model import Seq2Seq

DATA = Path(__file__).resolve().parents[2] / "data" / "multi30k"


def tiny(path: Path, vocab: int, enc: int, dec: int, src: str = "de", tgt: str = "en") -> str:
    """A random d_model-32 model with its own joint tokenizer of ``vocab`` pieces."""
    texts = read_lines(DATA / "train.de.gz")[:200] + read_lines(DATA / "train.en.gz")[:200]
    tok = Tokenizer.train(texts, TokenizerConfig(vocab_size=vocab, num_threads=1))
    torch.manual_seed(vocab + enc)
    model = Seq2Seq(ModelConfig(src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=32, n_heads=4,
                                d_ff=64, encoder_layers=enc, decoder_layers=dec, max_positions=24))
    save_model(path, model, TokenizerPair(tok, tok), src, tgt)
    return str(path)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("students")
    return {"teacher": tiny(root / "teacher.ckpt", 100, 2, 2),
            "student": tiny(root / "student.ckpt", 120, 3, 1),  # another tokenizer, another shape
            "reverse": tiny(root / "reverse.ckpt", 100, 2, 1, "en", "de")}


def direct_scores(path: str, texts: list[str], refs: list[str], beam: int) -> dict[str, float]:
    """The same model's search in this process, batched by the same rule, scored."""
    ckpt = load_checkpoint(path)
    model = build_model(ckpt)
    tokenizers = TokenizerPair.from_state(ckpt["seq2seq"]["tokenizers"])
    batches = E.make_batches(E.source_ids(texts, tokenizers, model.arch), 60, model.arch)
    hyps: list = [None] * len(texts)
    for i, h in zip([i for b in batches for i in b.index], E.ours_engine(model, beam)(batches)):
        hyps[i] = h
    return {k: s.score for k, s in all_scores(tokenizers.tgt.decode(hyps), refs).items()}


def test_students_rows_ratios_and_scores_of_the_timed_outputs(models):
    texts = read_lines(DATA / "test_2016_flickr.de.gz")[:8]
    refs = read_lines(DATA / "test_2016_flickr.en.gz")[:8]
    res = S.bench_students(models["teacher"], [models["student"]], texts, refs, "de→en",
                           repeats=1, max_tokens=(60,), beam_size=2, log=lambda _: None)
    rows = res["rows"]
    assert [(r["role"], r["search"], r["layers"]) for r in rows] == [
        ("teacher", "greedy", "2+2"), ("teacher", "beam 2", "2+2"),
        ("student", "greedy", "3+1"), ("student", "beam 2", "3+1")]
    pids = [r["pid"] for r in rows]
    assert len(set(pids)) == 4 and os.getpid() not in pids  # one fresh process per row
    teacher_beam = rows[1]["seconds"]
    for row in rows:
        assert row["teacher_beam_over_this"] == pytest.approx(teacher_beam / row["seconds"])
        beam = 1 if row["search"] == "greedy" else 2
        want = direct_scores(row["model"], texts, refs, beam)
        assert {k: row[k] for k in want} == pytest.approx(want)
    assert rows[1]["teacher_beam_over_this"] == 1.0
    printed = R.students_table(res, "students")
    line = next(ln for ln in printed.splitlines() if ln.startswith("student") and "greedy" in ln)
    assert f"{rows[2]['teacher_beam_over_this']:.2f}" in line and f"{rows[2]['BLEU']:.2f}" in line
    res = S.bench_students(models["teacher"], [models["student"]], texts, refs, "de→en", repeats=1,
                           max_tokens=(60,), beam_size=2, student_beams=(3,), log=lambda _: None)
    assert [(r["role"], r["search"]) for r in res["rows"]] == [
        ("teacher", "greedy"), ("teacher", "beam 2"), ("student", "beam 3")]


def test_students_refuses_another_direction_and_no_students(models):
    texts, refs = ["Ein Hund."], ["A dog."]
    with pytest.raises(ValueError, match="reverse.ckpt translates en→de, the teacher de→en"):
        S.bench_students(models["teacher"], [models["reverse"]], texts, refs, "de→en", repeats=1,
                         log=lambda _: None)
    with pytest.raises(ValueError, match="--students"):
        S.bench_students(models["teacher"], [], texts, refs, "de→en", log=lambda _: None)
