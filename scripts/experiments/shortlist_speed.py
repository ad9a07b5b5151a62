"""Wall time of one decoding setting, with or without the vocabulary shortlist, for a
quiet-machine comparison: run it once per setting, each in a fresh process (one engine per
process), alternating, and compare the best-of-``--repeats`` seconds.

    seq2seq-shortlist -m data/models/multi30k_de_en_tiny.ckpt -o de_en.shortlist.ckpt
    for round in 1 2; do for search in greedy beam; do for sl in "" --shortlist; do
      python scripts/experiments/shortlist_speed.py -m de_en.shortlist.ckpt --search $search $sl; done; done; done

Prints one JSON line: search, shortlist, threads, best seconds over all 1,000
test_2016_flickr sentences (after a 100-sentence warm-up).
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from seq2seq import DecodingConfig, Translator
from seq2seq.shipped import multi30k_lines


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", required=True, help="a checkpoint with a shortlist table")
    ap.add_argument("--lang", default="de", help="the model's source language (test_2016_flickr.LANG.gz)")
    ap.add_argument("--search", choices=("greedy", "beam"), default="greedy")
    ap.add_argument("--shortlist", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    decoding = DecodingConfig(method="beam", beam_size=5) if args.search == "beam" else DecodingConfig()
    t = Translator.from_checkpoint(args.model, decoding=decoding, shortlist=args.shortlist)
    name = f"test_2016_flickr.{args.lang}.gz"
    src = multi30k_lines(name)
    t.translate(src[:100])
    best = float("inf")
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        t.translate(src)
        best = min(best, time.perf_counter() - t0)
    result = {"search": args.search, "shortlist": args.shortlist, "threads": torch.get_num_threads(),
              "sentences": len(src), "seconds": round(best, 3)}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
