"""Time the data pipeline on Multi30k de-en from a cold cache (see ``scripts/bench/data.py``).

    python scripts/benchmark_data.py [--num-proc N] [--max-tokens 4096] [--json out.json]
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


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=str(ROOT / "data" / "multi30k"))
    ap.add_argument("--num-proc", type=int, default=None, help="datasets.map workers")
    ap.add_argument("--max-tokens", type=int, default=4096, help="training batch budget (default 4096)")
    ap.add_argument("--json", metavar="FILE", help="also write every number to FILE")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    result = data.run(args.data_dir, args.num_proc, args.max_tokens)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
