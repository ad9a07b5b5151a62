"""Corpora beyond memory (``seq2seq.data.sources``, ``prepare``, ``cache``): shards, globs and gzip
read as one corpus; bad file specs are one-line errors; preparing takes memory bounded by a
constant; loader workers get file references, not data; the tokenizer trains on a seeded
sample; the cache follows the user, not the working directory."""

from __future__ import annotations

import dataclasses
import gzip
import pickle
import tracemalloc
from pathlib import Path

import pytest
from helpers import ROOT, text_config, write_corpus

from seq2seq.config import DataConfig, TokenizerConfig
from seq2seq.data import prepare
from seq2seq.data.cache import cache_root
from seq2seq.data.datamodule import Seq2SeqDataModule
from seq2seq.data.prepare import load_split
from seq2seq.data.tokenizer import Tokenizer

DATA = ROOT / "data" / "multi30k"


def test_shards_globs_and_gz_read_as_one_corpus(tmp_path):
    """A corpus split into shards (plain and gzip mixed), given as a glob or a list, reads
    exactly like the single file; the pairs are stored once, memory-mapped."""
    src, tgt = write_corpus(tmp_path, 1000)
    lines = {p: p.read_text().splitlines(keepends=True) for p in (src, tgt)}
    for path, side in lines.items():
        for k in range(3):
            shard = "".join(side[k * 400:(k + 1) * 400]).encode()
            name = tmp_path / "shards" / f"part{k}.{path.suffix[1:]}"
            name.parent.mkdir(exist_ok=True)
            if k == 1:
                name.with_suffix(name.suffix + ".gz").write_bytes(gzip.compress(shard))
            else:
                name.write_bytes(shard)
    one = load_split(text_config(str(src), str(tgt), tmp_path / "c1"), "train")
    shards = sorted((tmp_path / "shards").glob("*.de*")), sorted((tmp_path / "shards").glob("*.en*"))
    for spec in [(str(tmp_path / "shards/*.de*"), str(tmp_path / "shards/*.en*")),
                 tuple([str(p) for p in side] for side in shards)]:
        ds = load_split(text_config(*spec, tmp_path / "c2"), "train")
        assert ds[:] == one[:]
        assert all(f["filename"].startswith(str(tmp_path / "c2")) for f in ds.cache_files)


@pytest.mark.parametrize("src,tgt,message", [
    ("shards/*.de", "shards/*.en", "DataConfig.train_tgt: no file matches"),
    ("shards/*.de", ["a.en", "b.en"], "train_src gives 1 file(s) but train_tgt gives 2"),
    ("missing.de", "a.en", "data file not found"),
])
def test_bad_file_specs_are_one_line_errors(tmp_path, src, tgt, message):
    (tmp_path / "shards").mkdir()
    (tmp_path / "shards" / "x.de").write_text("eins\n")
    (tmp_path / "a.en").write_text("one\n")
    (tmp_path / "b.en").write_text("two\n")
    def local(spec):
        return str(tmp_path / spec) if isinstance(spec, str) else [str(tmp_path / s) for s in spec]

    cfg = text_config(local(src), local(tgt), tmp_path / "c")
    with pytest.raises((ValueError, OSError)) as exc:
        load_split(cfg, "train")
    assert message in str(exc.value) and "\n" not in str(exc.value)


def _traced_peak_of_preparing(root: Path, n: int) -> int:
    src, tgt = write_corpus(root, n, f"c{n}")
    cfg = text_config(str(src), str(tgt), root / f"cache{n}",
                      tokenizer=TokenizerConfig(vocab_size=500, input_sentence_size=4000))
    tracemalloc.start()
    try:
        Seq2SeqDataModule(cfg).prepare_data()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.slow
def test_preparing_3x_the_corpus_takes_no_more_memory(tmp_path):
    """Peak Python/numpy allocations while reading, training the tokenizer on its sample,
    tokenizing and filtering: the same for 40k and 120k pairs (batches, not corpora; the
    bound, ~36 MB, is reached once a corpus spans a few 10k-pair batches)."""
    small, large = (_traced_peak_of_preparing(tmp_path, n) for n in (40_000, 120_000))
    assert large < 1.1 * small, (small, large)


def test_loader_workers_get_file_references_not_data(tmp_path):
    """What the DataLoader hands to a worker pickles to a few KB for a corpus of MBs: the
    token ids stay in the memory-mapped Arrow files every process shares."""
    src, tgt = write_corpus(tmp_path, 20_000)
    dm = Seq2SeqDataModule(text_config(str(src), str(tgt), tmp_path / "cache"))
    dm.prepare_data()
    dm.setup("fit")
    loader = dm.train_dataloader()
    data_bytes = dm.train_dataset.data.nbytes
    assert data_bytes > 2_000_000
    assert len(pickle.dumps(loader.dataset)) < data_bytes / 100
    assert all(f["filename"].startswith(str(tmp_path / "cache")) for f in dm.train_dataset.cache_files)
    batch = next(iter(loader))
    row = dm.train_dataset[int(batch.ids[0])]
    assert batch.src[0, : len(row["src_ids"])].tolist() == row["src_ids"]


def test_tokenizer_trains_on_a_seeded_sample_of_input_sentence_size(tmp_path, monkeypatch):
    src, tgt = write_corpus(tmp_path, 3000)
    train = load_split(text_config(str(src), str(tgt), tmp_path / "c"), "train")
    seen = []
    real_train = Tokenizer.train.__func__

    def counting(cls, texts, cfg):
        texts = list(texts)
        seen.append(texts)
        return real_train(cls, texts, cfg)

    monkeypatch.setattr(Tokenizer, "train", classmethod(counting))
    cfg = TokenizerConfig(vocab_size=300, input_sentence_size=1000)
    first = prepare.train_tokenizers(train, cfg)
    again = prepare.train_tokenizers(train, cfg)
    other = prepare.train_tokenizers(train, dataclasses.replace(cfg, seed=2))
    assert len(seen[0]) == 1000 and seen[0] == seen[1] != seen[2]
    assert first.src == again.src and first.src != other.src
    pairs = set(zip(train["src"], train["tgt"], strict=True))
    assert all((s, t) in pairs for s, t in zip(seen[0][::2], seen[0][1::2], strict=True))  # whole pairs
    prepare.train_tokenizers(train, dataclasses.replace(cfg, input_sentence_size=6000))
    assert seen[-1] == [x for pair in zip(train["src"], train["tgt"], strict=True) for x in pair]


@pytest.mark.parametrize("cache_dir,env,expected", [
    ("given", {}, "given"),
    (None, {"SEQ2SEQ_CACHE_DIR": "ours"}, "ours"),
    (None, {"XDG_CACHE_HOME": "xdg"}, "xdg/seq2seq"),
    (None, {"HOME": "home"}, "home/.cache/seq2seq"),
    (None, {"SEQ2SEQ_CACHE_DIR": "ours", "XDG_CACHE_HOME": "xdg"}, "ours"),
])
def test_cache_root_follows_the_user_not_the_working_directory(tmp_path, monkeypatch, cache_dir, env, expected):
    for name in ("SEQ2SEQ_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, str(tmp_path / value))
    cfg = DataConfig(cache_dir=None if cache_dir is None else str(tmp_path / cache_dir))
    assert cache_root(cfg) == tmp_path / expected


def test_default_cache_is_not_in_the_working_directory(tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("SEQ2SEQ_CACHE_DIR", str(tmp_path / "user-cache"))
    src, tgt = write_corpus(tmp_path / "corpus", 500)
    cfg = text_config(str(src), str(tgt), tmp_path)
    Seq2SeqDataModule(dataclasses.replace(cfg, cache_dir=None)).prepare_data()
    assert not any(work.iterdir())
    assert (tmp_path / "user-cache" / "datasets").is_dir()
