"""``seq2seq-average``: average checkpoints into one self-contained checkpoint.

    seq2seq-average -o avg.ckpt a.ckpt b.ckpt ...
    seq2seq-average -o avg.ckpt --last 10 runs/X/checkpoints     # the 10 newest step checkpoints
    seq2seq-average -o avg.ckpt --best 5 runs/X/checkpoints      # the 5 with the highest val BLEU
    seq2seq-average -o small.ckpt --dtype float16 a.ckpt         # one checkpoint, half the size
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from seq2seq.checkpoint import STORAGE_DTYPES, CheckpointError, average

_BLEU = re.compile(r"bleu(\d+(?:\.\d+)?)")
_STEP = re.compile(r"step(\d+)")


def select(folder: Path, last: int | None, best: int | None) -> list[Path]:
    """Checkpoints of ``folder`` (``last.ckpt`` excluded: it duplicates a step checkpoint)."""
    files = [p for p in folder.glob("*.ckpt") if p.name != "last.ckpt"]
    if best:
        scored = [(float(m.group(1)), p) for p in files if (m := _BLEU.search(p.name))]
        return [p for _, p in sorted(scored)[-best:]]
    stepped = [(int(m.group(1)), p) for p in files if (m := _STEP.search(p.name))]
    return [p for _, p in sorted(stepped)[-last:]]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="seq2seq-average", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", help="checkpoint files, or one folder with --last/--best")
    ap.add_argument("-o", "--output", required=True)
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--last", type=int, help="average the N checkpoints with the highest step")
    group.add_argument("--best", type=int, help="average the N checkpoints with the highest val BLEU")
    ap.add_argument("--dtype", choices=list(STORAGE_DTYPES),
                    help="store the weights in this precision (default: as the inputs)")
    args = ap.parse_args(argv)
    paths = [Path(p) for p in args.inputs]
    if args.last or args.best:
        if len(paths) != 1 or not paths[0].is_dir():
            ap.error("--last/--best take exactly one folder of checkpoints")
        paths = select(paths[0], args.last, args.best)
    try:
        average(paths, args.output, args.dtype)
    except CheckpointError as e:
        print(f"seq2seq-average: error: {e}", file=sys.stderr)
        sys.exit(2)
    print(f"averaged {len(paths)} checkpoints -> {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
