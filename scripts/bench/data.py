"""Time the data pipeline on Multi30k de-en from a cold cache (``scripts/benchmark_data.py``).

Stages: read + clean the 29k training pairs, train the joint 8000-piece tokenizer,
tokenize + length-filter + cache the training set, build one epoch of token-budget
batches (sampler + collate through the DataLoader). Then the same preparation again,
warm, which must neither retrain nor re-tokenize.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

from scripts.bench.timing import check_load
from seq2seq.config import DataConfig, TokenizerConfig
from seq2seq.data.datamodule import Seq2SeqDataModule
from seq2seq.data.prepare import load_or_train_tokenizers, load_split, tokenized_split

Log = Callable[[str], None]


def timed(results: dict[str, float], name: str, fn: Callable[[], Any], log: Log = print) -> Any:
    """Run ``fn`` once, store its seconds under ``name`` and print them."""
    start = time.perf_counter()
    out = fn()
    results[name] = time.perf_counter() - start
    log(f"{name:<44s} {results[name]:7.2f} s")
    return out


def one_epoch(dm: Seq2SeqDataModule) -> tuple[int, int, int]:
    """Batches, pairs and target tokens of one training epoch."""
    n_batches = n_pairs = n_tokens = 0
    for batch in dm.train_dataloader():
        n_batches, n_pairs, n_tokens = n_batches + 1, n_pairs + len(batch), n_tokens + batch.n_tgt_tokens
    return n_batches, n_pairs, n_tokens


def warm_setup(data: DataConfig) -> None:
    dm = Seq2SeqDataModule(data)
    dm.prepare_data()
    dm.setup("fit")


def cold_stages(data: DataConfig, log: Log = print) -> dict[str, Any]:
    """Every stage once from an empty cache; seconds per stage and what came out."""
    r: dict[str, float] = {}
    train = timed(r, "read + clean training pairs", lambda: load_split(data, "train"), log)
    tokenizers = timed(r, "train tokenizer (bpe 8000, joint)",
                       lambda: load_or_train_tokenizers(data, train), log)
    ds = timed(r, "tokenize + filter + cache train",
               lambda: tokenized_split(data, "train", tokenizers, train=True), log)
    timed(r, "tokenize + cache val", lambda: tokenized_split(data, "val", tokenizers, train=False), log)
    dm = Seq2SeqDataModule(data)
    dm.use_tokenizers(tokenizers)
    dm.setup("fit")
    n_batches, n_pairs, n_tokens = timed(r, "one epoch of batches (sampler + collate)",
                                         lambda: one_epoch(dm), log)
    return {"seconds": r, "pairs_kept": len(ds), "vocab_size": tokenizers.src.vocab_size,
            "batches": n_batches, "pairs": n_pairs, "target_tokens": n_tokens}


def run(data_dir: str | os.PathLike, num_proc: int | None = None, max_tokens: int = 4096,
        log: Log = print) -> dict[str, Any]:
    """Cold stages, then a warm ``prepare_data`` + ``setup``; the load average around both."""
    before = check_load("before", log)
    with tempfile.TemporaryDirectory(prefix="seq2seq-bench-") as cache:
        data = DataConfig(data_dir=str(data_dir), src_lang="de", tgt_lang="en",
                          tokenizer=TokenizerConfig(vocab_size=8000, joint=True),
                          max_tokens=max_tokens, num_proc=num_proc, cache_dir=cache)
        cold = cold_stages(data, log)
        log(f"{'total, cold cache':<44s} {sum(cold['seconds'].values()):7.2f} s")
        warm: dict[str, float] = {}
        timed(warm, "warm: prepare_data + setup (cache hits)", lambda: warm_setup(data), log)
    log(f"\n{cold['pairs_kept']} training pairs kept, vocab {cold['vocab_size']}; "
        f"{cold['batches']} batches, {cold['pairs']} pairs, {cold['target_tokens']} target "
        f"tokens per epoch at max_tokens={max_tokens}")
    after = check_load("after", log)
    return {"cold": cold, "warm": warm, "load_1min_before": before, "load_1min_after": after}
