"""Time the data pipeline (see ``scripts/bench/data.py``).

    python scripts/benchmark_data.py [--num-proc N] [--max-tokens 4096] [--json out.json]
        Multi30k de-en from a cold cache, then warm.
    python scripts/benchmark_data.py --sizes 1000000,5000000,10000000 --work-dir /tmp/seq2seq-scale \\
        --num-proc 2 --json data/results/benchmark_data_scale.json
        Synthetic corpora of those sizes (written to --work-dir, several GB at 10M pairs):
        preparation and one epoch of batches (pairs/s, peak RSS), time to the first training
        step from the warm cache, peak RSS of training, RSS growth per million pairs.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
sys.path.insert(0, str(ROOT))  # run from a checkout

from scripts.bench import data  # noqa: E402
from seq2seq.config import DataConfig, from_dict  # noqa: E402


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(s.replace("_", "")) for s in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated pair counts, got {text!r}") from None
    if any(n < 1 for n in sizes):
        raise argparse.ArgumentTypeError(f"pair counts must be >= 1, got {text!r}")
    return sizes


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=str(ROOT / "data" / "multi30k"))
    ap.add_argument("--num-proc", type=int, default=None, help="datasets.map workers")
    ap.add_argument("--max-tokens", type=int, default=4096, help="training batch budget (default 4096)")
    ap.add_argument("--sizes", type=_sizes, metavar="N,N,...", help="synthetic corpora of these many pairs")
    ap.add_argument("--work-dir", type=Path, default=Path("/tmp/seq2seq-scale"),
                    help="where --sizes writes its corpora and caches (default /tmp/seq2seq-scale)")
    ap.add_argument("--json", metavar="FILE", help="also write every number to FILE")
    ap.add_argument("--stage", choices=["prepare", "epoch"], help=argparse.SUPPRESS)  # one measured step
    ap.add_argument("--stage-config", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.stage:
        cfg = from_dict(DataConfig, json.loads(args.stage_config))
        result = {"prepare": data.stage_prepare, "epoch": data.stage_epoch}[args.stage](cfg)
        print(json.dumps(result))
        return result
    if args.sizes:
        result = data.scale(args.sizes, args.work_dir, args.data_dir, args.num_proc)
    else:
        result = data.run(args.data_dir, args.num_proc, args.max_tokens)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
