"""Time the data pipeline on Multi30k de-en from a cold cache.

Stages: read + clean the 29k training pairs, train the joint 8000-piece tokenizer,
tokenize + length-filter + cache the training set, build one epoch of token-budget
batches (sampler + collate through the DataLoader). Then the same preparation again,
warm, which must neither retrain nor re-tokenize.

    python scripts/benchmark_data.py [--num-proc N] [--max-tokens 4096]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout

from seq2seq.config import DataConfig, TokenizerConfig  # noqa: E402
from seq2seq.data.datamodule import Seq2SeqDataModule  # noqa: E402
from seq2seq.data.prepare import load_or_train_tokenizers, tokenized_split  # noqa: E402
from seq2seq.data.sources import load_split  # noqa: E402


def timed(results: dict[str, float], name: str, fn: Callable[[], Any]) -> Any:
    start = time.perf_counter()
    out = fn()
    results[name] = time.perf_counter() - start
    print(f"{name:<44s} {results[name]:7.2f} s", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--data-dir", default=str(Path(__file__).resolve().parents[1] / "data/multi30k")
    )
    ap.add_argument("--num-proc", type=int, default=None, help="datasets.map workers")
    ap.add_argument("--max-tokens", type=int, default=4096)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)

    with tempfile.TemporaryDirectory(prefix="seq2seq-bench-") as cache:
        cfg = DataConfig(
            data_dir=args.data_dir,
            src_lang="de",
            tgt_lang="en",
            tokenizer=TokenizerConfig(vocab_size=8000, joint=True),
            max_tokens=args.max_tokens,
            num_proc=args.num_proc,
            cache_dir=cache,
        )
        r: dict[str, float] = {}
        train = timed(r, "read + clean training pairs", lambda: load_split(cfg, "train"))
        pair = timed(
            r, "train tokenizer (bpe 8000, joint)", lambda: load_or_train_tokenizers(cfg, train)
        )
        ds = timed(
            r,
            "tokenize + filter + cache train",
            lambda: tokenized_split(cfg, "train", pair, train=True),
        )
        timed(r, "tokenize + cache val", lambda: tokenized_split(cfg, "val", pair, train=False))

        dm = Seq2SeqDataModule(cfg)
        dm.use_tokenizers(pair)
        dm.setup("fit")

        def one_epoch() -> tuple[int, int, int]:
            n_batches = n_pairs = n_tokens = 0
            for batch in dm.train_dataloader():
                n_batches, n_pairs, n_tokens = (
                    n_batches + 1,
                    n_pairs + len(batch),
                    n_tokens + batch.n_tgt_tokens,
                )
            return n_batches, n_pairs, n_tokens

        n_batches, n_pairs, n_tokens = timed(
            r, "one epoch of batches (sampler + collate)", one_epoch
        )
        cold = sum(r.values())
        print(f"{'total, cold cache':<44s} {cold:7.2f} s")

        warm: dict[str, float] = {}
        timed(warm, "warm: prepare_data + setup (cache hits)", lambda: _warm(cfg))
        print(
            f"\n{len(ds)} training pairs kept, vocab {pair.src.vocab_size}; {n_batches} batches, "
            f"{n_pairs} pairs, {n_tokens} target tokens per epoch at max_tokens={args.max_tokens}"
        )


def _warm(cfg: DataConfig) -> None:
    dm = Seq2SeqDataModule(cfg)
    dm.prepare_data()
    dm.setup("fit")


if __name__ == "__main__":
    main()
