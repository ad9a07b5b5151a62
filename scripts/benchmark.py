"""Speed of decoding, training and attention against Hugging Face Marian and CTranslate2.

    python scripts/benchmark.py -c CKPT [--limit N] [--repeats 3] [--threads T]
                                [--sections decode,train,attention] [--json out.json]

Prints one table per section (medians of --repeats timed runs after a warm-up, the thread
count, ratios with PASS/FAIL against the targets); peers that are not installed are
skipped with a message. See ``seq2seq/benchmark.py`` for what each number measures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(ROOT))  # run from a checkout

from scripts.bench import core as B  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-c", "--checkpoint", required=True, help="a seq2seq checkpoint (.ckpt)")
    ap.add_argument("--sections", default=",".join(B.SECTIONS),
                    help=f"comma-separated subset of {','.join(B.SECTIONS)} (default: all), "
                         "plus 'profile' (torch.profiler of our beam search on 2 batches)")
    ap.add_argument("--limit", type=int, default=None,
                    help="decode only the first N test sentences (default: all 1,000)")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per number (median; default 3)")
    ap.add_argument("--threads", type=int, default=None,
                    help="threads for torch and CTranslate2 (default: torch.get_num_threads())")
    ap.add_argument("--batch-size", type=int, default=100, help="sentences per decoding batch (default 100)")
    ap.add_argument("--beam", type=int, default=5, help="beam size (default 5)")
    ap.add_argument("--force-length", type=int, default=50,
                    help="output length of the forced-length greedy rows (default 50)")
    ap.add_argument("--uncached-limit", type=int, default=200,
                    help="sentences for the cached-vs-uncached rows (default 200; 0 = all)")
    ap.add_argument("--train-batches", type=int, default=8,
                    help="training batches per timed run (default 8)")
    ap.add_argument("--max-tokens", type=int, default=4096, help="training batch budget (default 4096)")
    ap.add_argument("--attention-iters", type=int, default=50,
                    help="attention calls per timed run (default 50)")
    ap.add_argument("--data-dir", default=str(ROOT / "data" / "multi30k"))
    ap.add_argument("--cache-dir", default=str(ROOT / ".cache" / "seq2seq"),
                    help="tokenized-data cache (training batches)")
    ap.add_argument("--json", metavar="FILE", help="also write every number to FILE")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats must be >= 1 (use >= 3 for reported numbers)")
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    import torch

    threads = args.threads or torch.get_num_threads()
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    result = B.run(
        args.checkpoint, sections=sections, limit=args.limit, repeats=args.repeats,
        threads=threads, batch_size=args.batch_size, beam=args.beam,
        force_length=args.force_length, uncached_limit=args.uncached_limit or None,
        train_batches=args.train_batches, max_tokens=args.max_tokens,
        attention_iters=args.attention_iters, data_dir=args.data_dir, cache_dir=args.cache_dir,
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
        print(f"\nwrote {args.json}")
    return result


if __name__ == "__main__":
    main()
