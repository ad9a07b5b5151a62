"""The vocab section: what the joint BPE vocabulary size costs a training step. For each
size, a tokenizer trained on Multi30k train (as ``seq2seq-train`` would), the first batches
of its shuffled epoch (``max_tokens`` each) and a fresh model of the checkpoint's
architecture with that vocabulary; one optimizer step timed as in the train section.

Target tokens/s alone misleads here: a smaller vocabulary cuts the same sentence into more
pieces, so each row also gives target pieces per sentence, sentence pairs/s and the time
one epoch of the whole training split would take at that rate."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import replace

from scripts.bench.engines import OPTIM, first_batches, ours_train_step
from scripts.bench.timing import train_row
from seq2seq.config import DataConfig, ModelConfig, TokenizerConfig, from_dict
from seq2seq.model import Seq2Seq

Log = Callable[[str], None]
SIZES = (4000, 6000, 8000, 10000)


def vocab_batches(ckpt: dict, vocab_size: int, data_dir: str | os.PathLike,
                  cache_dir: str | os.PathLike, max_tokens: int, n: int,
                  max_len: int) -> tuple[list, dict]:
    """The first ``n`` batches of epoch 0 with a ``vocab_size`` tokenizer (pairs up to
    ``max_len`` pieces), and the split's pairs and target pieces (without EOS)."""
    from seq2seq.data.datamodule import Seq2SeqDataModule  # pulls in datasets + lightning
    from seq2seq.data.prepare import column

    meta = ckpt["seq2seq"]
    dm = Seq2SeqDataModule(DataConfig(
        data_dir=str(data_dir), src_lang=meta["src_lang"], tgt_lang=meta["tgt_lang"],
        max_tokens=max_tokens, cache_dir=str(cache_dir), max_len=max_len,
        tokenizer=TokenizerConfig(vocab_size=vocab_size)))
    dm.prepare_data()
    dm.setup("fit")
    batches = first_batches(dm, n)
    split = {"pairs": len(dm.train_dataset),
             "tgt_pieces": int(column(dm.train_dataset, "tgt_len").sum())}
    return batches, split


def bench_vocab(ckpt: dict, *, sizes: Sequence[int] = SIZES, data_dir: str | os.PathLike,
                cache_dir: str | os.PathLike, max_tokens: int = 4096, n_batches: int = 8,
                repeats: int = 3, log: Log = print) -> dict:
    arch = from_dict(ModelConfig, ckpt["seq2seq"]["model_config"], "checkpoint model_config")
    rows = []
    for V in sizes:
        log(f"  vocabulary {V}: tokenizer, batches, timing ...")
        batches, split = vocab_batches(ckpt, V, data_dir, cache_dir, max_tokens, n_batches,
                                       min(DataConfig.max_len, arch.max_positions))
        model = Seq2Seq(replace(arch, src_vocab_size=V, tgt_vocab_size=V))
        row = train_row(f"joint BPE {V:,}", "fp32", ours_train_step(model, False, OPTIM),
                        batches, repeats)
        # pieces per pair over the whole split (+ EOS, as the loss counts them): the few
        # timed batches are a random draw of lengths, too few to say what a pair costs
        per_pair = split["tgt_pieces"] / split["pairs"] + 1
        row.update(vocab_size=V, sentences=sum(len(b) for b in batches),
                   tgt_pieces_per_sentence=per_pair, pairs_per_s=row["tok_per_s"] / per_pair,
                   epoch_s=split["pairs"] * per_pair / row["tok_per_s"],
                   split_pairs=split["pairs"], split_tgt_pieces_per_pair=per_pair)
        rows.append(row)
    base = next((r for r in rows if r["vocab_size"] == 8000), rows[0])
    for row in rows:
        row["pairs_gain"] = row["pairs_per_s"] / base["pairs_per_s"]
    notes = [f"each row: its own tokenizer and the first {n_batches} batches of its epoch 0 "
             f"(max_tokens {max_tokens}); a fresh model of the checkpoint's architecture with "
             "that vocabulary; fused loss, label smoothing 0, fp32",
             "tgt pieces/sent: over the whole training split, EOS included; pairs/s = tok/s / "
             "that; epoch = the split's target pieces at tok/s; gain: pairs/s over the 8,000 row"]
    return {"rows": rows, "targets": [], "skipped": [], "notes": notes}
