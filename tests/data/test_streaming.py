"""A streamed hub corpus (``seq2seq.data.stream``; local JSON shards read by datasets in
streaming mode): an epoch covers the corpus in buffer-sized buckets, ranks split it, a resume
skips exactly the consumed batches (in a loader and in a Lightning run), subword sampling is
seeded."""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path

import datasets
import lightning as L
import pytest
import torch
from helpers import ROOT, numbered_lines

from seq2seq.config import ConfigError, DataConfig, TokenizerConfig
from seq2seq.data import prepare, sources
from seq2seq.data.datamodule import Seq2SeqDataModule
from seq2seq.data.stream import StreamingBatches

DATA = ROOT / "data" / "multi30k"


@pytest.fixture
def streamed(tmp_path, monkeypatch) -> DataConfig:
    """``format="hub", streaming=True`` over 4 local JSONL shards: ``load_dataset`` is the
    real one, on the ``json`` builder, since the hub cannot be reached from the tests."""
    n = 2400
    pairs = list(zip(numbered_lines("de", n), numbered_lines("en", n), strict=True))
    pairs[5] = ("", "an empty side is dropped")
    for split, rows in (("train", pairs[:2200]), ("validation", pairs[2200:])):
        for k in range(4):
            with open(tmp_path / f"{split}-{k}.jsonl", "w", encoding="utf-8") as f:
                f.writelines(json.dumps({"translation": {"de": s, "en": t}}) + "\n" for s, t in rows[k::4])
    real = datasets.load_dataset

    def local_hub(name, config, split, cache_dir=None, streaming=False):
        files = sorted(str(p) for p in tmp_path.glob(f"{split}-*.jsonl"))
        return real("json", data_files={split: files}, split=split, streaming=streaming)

    monkeypatch.setattr(sources.datasets, "load_dataset", local_hub)
    return DataConfig(corpus=None, format="hub", hub_name="org/corpus", streaming=True,
                      valid_split="validation", src_field="translation.de", tgt_field="translation.en",
                      tokenizer=TokenizerConfig(vocab_size=400), shuffle_buffer=500, max_tokens=512,
                      cache_dir=str(tmp_path / "cache"))


def _ids(batches) -> list[tuple[int, ...]]:
    return sorted(tuple(row[row != 0][:-1].tolist()) for b in batches for row in b.src)


def test_streamed_epoch_covers_the_corpus_in_buffer_sized_buckets(streamed):
    dm = Seq2SeqDataModule(streamed)
    dm.prepare_data()
    dm.setup("fit")
    assert dm.train_dataset is None and len(dm.val_dataset) == 200  # validation is stored
    stream = StreamingBatches(streamed, dm.tokenizers)
    epoch = list(stream.epoch_batches(0))
    reference = prepare.encode_pairs(
        {"src": [s for s, _ in _train_pairs(streamed)], "tgt": [t for _, t in _train_pairs(streamed)]},
        dm.tokenizers, streamed.max_len, streamed.max_len_ratio)
    assert _ids(epoch) == sorted(map(tuple, reference["src_ids"]))  # each kept pair once
    for b in epoch:
        assert len(b) == 1 or b.src.numel() <= 512 and b.tgt_in.numel() <= 512
        assert int(b.ids.max() - b.ids.min()) < streamed.shuffle_buffer  # one buffer at a time
    parts = [list(stream.epoch_batches(0, part, 2)) for part in (0, 1)]
    assert sorted(_ids(parts[0]) + _ids(parts[1])) == _ids(epoch)  # ranks: disjoint, complete
    assert _ids(stream.epoch_batches(1)) == _ids(epoch) and [len(b) for b in epoch] != [
        len(b) for b in stream.epoch_batches(1)]  # epoch 1: same pairs, other order


def _train_pairs(cfg: DataConfig) -> list[tuple[str, str]]:
    return [p for batch in sources.pair_batches(cfg, cfg.train_split) for p in zip(*batch, strict=True)]


def test_streamed_resume_skips_exactly_the_consumed_batches(streamed):
    dm = Seq2SeqDataModule(streamed)
    dm.prepare_data()
    dm.setup("fit")
    n_epoch = sum(1 for _ in StreamingBatches(streamed, dm.tokenizers).epoch_batches(0))
    whole = list(itertools.islice(StreamingBatches(streamed, dm.tokenizers), n_epoch + 5))
    for start in (3, n_epoch - 2):  # within the epoch, and across into the next
        resumed = itertools.islice(StreamingBatches(streamed, dm.tokenizers, start_batch=start), 7)
        for a, b in zip(resumed, whole[start:], strict=False):
            assert torch.equal(a.src, b.src) and torch.equal(a.tgt_out, b.tgt_out)


def test_streamed_subword_sampling_same_text_seeded(streamed):
    """subword_alpha on a stream: each epoch's pairs decode to the best segmentation's text,
    most are segmented otherwise, and a second pass draws the same ids (resume)."""
    dm = Seq2SeqDataModule(streamed)
    dm.prepare_data()
    dm.setup("fit")
    sampled = dataclasses.replace(streamed, subword_alpha=0.1)
    tok = dm.tokenizers.src

    def texts(batches):
        return sorted(tok.decode([row[row != 0][:-1].tolist()])[0] for b in batches for row in b.src)

    best = list(StreamingBatches(streamed, dm.tokenizers).epoch_batches(0))
    drawn = list(StreamingBatches(sampled, dm.tokenizers).epoch_batches(0))
    assert texts(drawn) == texts(best)
    assert len(set(_ids(drawn)) - set(_ids(best))) > len(_ids(best)) // 2
    assert _ids(StreamingBatches(sampled, dm.tokenizers).epoch_batches(0)) == _ids(drawn)


def test_streaming_needs_the_hub():
    with pytest.raises(ConfigError, match="streaming needs corpus=None and format='hub'"):
        DataConfig(streaming=True)


class _FirstTokens(L.Callback):
    def __init__(self) -> None:
        self.seen: list[list[int]] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.seen.append(batch.src[:, 0].tolist())


def _fit_streamed(cfg: DataConfig, root: Path, steps: int, ckpt_path: str | None = None) -> list[list[int]]:
    from seq2seq.config import ModelConfig, OptimConfig
    from seq2seq.training.callbacks import AtomicCheckpointIO
    from seq2seq.training.module import Seq2SeqModule

    L.seed_everything(1, verbose=False)
    seen = _FirstTokens()
    every = L.pytorch.callbacks.ModelCheckpoint(dirpath=root, every_n_train_steps=3, save_top_k=-1)
    trainer = L.Trainer(max_steps=steps, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, use_distributed_sampler=False,
                        plugins=[AtomicCheckpointIO()], callbacks=[seen, every], default_root_dir=root)
    module = Seq2SeqModule(ModelConfig(d_model=32, n_heads=2, d_ff=64, encoder_layers=1, decoder_layers=1),
                           OptimConfig(lr=1e-3, warmup_steps=5))
    trainer.fit(module, datamodule=Seq2SeqDataModule(cfg), ckpt_path=ckpt_path)
    return seen.seen


@pytest.mark.slow
def test_streamed_training_resumes_where_it_stopped(streamed, tmp_path):
    """Lightning restores its loop progress before asking for the loader, so a run resumed
    from a mid-stream checkpoint sees exactly the batches the uninterrupted run saw next."""
    whole = _fit_streamed(streamed, tmp_path / "a", 6)
    resumed = _fit_streamed(streamed, tmp_path / "b", 6, str(next((tmp_path / "a").glob("*step=3*.ckpt"))))
    assert resumed == whole[3:]
