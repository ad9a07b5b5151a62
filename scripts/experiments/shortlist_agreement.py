"""How much a vocabulary shortlist changes the shipped models' translations: for each
(K per source piece, N frequent) setting, the share of Multi30k test_2016_flickr outputs
identical to the full vocabulary's, BLEU of both, and the average candidate set per batch
against the vocabulary, greedy and beam 5. Tables are built from the train split as
``seq2seq-shortlist`` builds them.

    nice python scripts/experiments/shortlist_agreement.py --settings 20:100,50:300 > shortlist.json

``--timing`` adds a rough CPU-time ratio (1 thread, ``time.process_time``, full and
shortlist runs interleaved ``--repeats`` times): rough, not a benchmark.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import time
from pathlib import Path

import torch

from seq2seq import DecodingConfig, Translator
from seq2seq.checkpoint import load_checkpoint
from seq2seq.config import ShortlistConfig
from seq2seq.decoding.shortlist import shortlist_entry
from seq2seq.metrics import bleu
from seq2seq.shipped import multi30k_dir

TEST = "test_2016_flickr"
MODELS = {"multi30k_de_en_tiny": ("de", "en"), "multi30k_en_de_tiny": ("en", "de")}
SEARCHES = {"greedy": DecodingConfig(), "beam 5": DecodingConfig(method="beam", beam_size=5)}


def lines(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


class Counting:
    """A model's shortlist that records each batch's candidate count."""

    def __init__(self, inner):
        self.inner, self.sizes = inner, []

    def candidates(self, src: torch.Tensor) -> torch.Tensor:
        ids = self.inner.candidates(src)
        self.sizes.append(ids.numel())
        return ids


def cpu_time(translator: Translator, texts: list[str]) -> float:
    start = time.process_time()
    translator.translate(texts)
    return time.process_time() - start


def rough_ratio(full: Translator, short: Translator, texts: list[str], repeats: int) -> float:
    """Shortlist CPU time over full CPU time, medians of interleaved runs."""
    a, b = [], []
    for _ in range(repeats):
        a.append(cpu_time(full, texts))
        b.append(cpu_time(short, texts))
    return round(sorted(b)[len(b) // 2] / sorted(a)[len(a) // 2], 3)


def measure(name: str, settings: list[tuple[int, int]], args) -> list[dict]:
    src_lang, tgt_lang = MODELS[name]
    folder = multi30k_dir([f"{TEST}.{src_lang}.gz"])
    texts = lines(folder / f"{TEST}.{src_lang}.gz")[: args.limit]
    refs = lines(folder / f"{TEST}.{tgt_lang}.gz")[: args.limit]
    ckpt = load_checkpoint(name)
    entries = {s: shortlist_entry(ckpt, ShortlistConfig(per_source=s[0], frequent=s[1],
                                                        score=args.score)) for s in settings}
    rows = []
    for search, decoding in ((s, SEARCHES[s]) for s in args.searches.split(",")):
        if args.max_tokens:
            decoding = dataclasses.replace(decoding, max_tokens=args.max_tokens)
        full = Translator.from_loaded(ckpt, name, decoding)
        reference = full.translate(texts)
        for (k, n), entry in entries.items():
            ckpt["seq2seq"]["shortlist"] = entry
            short = Translator.from_loaded(ckpt, name, decoding, shortlist=True)
            counting = short.model.inference.shortlist = Counting(short.model.inference.shortlist)
            out = short.translate(texts)
            row = {"model": name, "search": search, "per_source": k, "frequent": n,
                   "score": args.score, "sentences": len(texts),
                   "agreement": round(sum(x == y for x, y in zip(reference, out)) / len(texts), 4),
                   "bleu_full": round(bleu(reference, refs).score, 2),
                   "bleu_shortlist": round(bleu(out, refs).score, 2),
                   "mean_candidates": round(sum(counting.sizes) / len(counting.sizes), 1),
                   "vocabulary": full.model.arch.tgt_vocab_size, "batches": len(counting.sizes),
                   "max_tokens": decoding.max_tokens}
            if args.timing:
                row["rough_cpu_time_ratio"] = rough_ratio(full, short, texts, args.repeats)
            rows.append(row)
            print(json.dumps(row), flush=True)
        del ckpt["seq2seq"]["shortlist"]
    return rows


def settings_of(text: str) -> list[tuple[int, int]]:
    return [tuple(int(x) for x in part.split(":")) for part in text.split(",")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS), help="shipped model names")
    ap.add_argument("--settings", type=settings_of, default=settings_of("20:100,50:300"),
                    help="K:N pairs, comma-separated")
    ap.add_argument("--score", default=ShortlistConfig().score, choices=("dice", "conditional"))
    ap.add_argument("--searches", default=",".join(SEARCHES), help="greedy, beam 5 or both")
    ap.add_argument("--max-tokens", type=int, help="padded source tokens per batch "
                    f"(default {DecodingConfig().max_tokens}): smaller batches, fewer candidates")
    ap.add_argument("--limit", type=int, help="the test set's first N lines only")
    ap.add_argument("--timing", action="store_true", help="add a rough CPU-time ratio")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = [r for name in args.models.split(",") for r in measure(name, args.settings, args)]
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
