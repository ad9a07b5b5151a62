"""``seq2seq-calibrate``: store in a checkpoint the confidence below which its outputs are
flagged "unsure" (``seq2seq-translate`` then warns by default, the server marks them).

    seq2seq-calibrate -m run.ckpt                        # in place
    seq2seq-calibrate -m run.ckpt -o run.calibrated.ckpt --quantile 0.05

The model translates a held-out Multi30k split (``--split``, default val; greedy, the default
decoding); the threshold is the ``--quantile`` (default 0.02) of its outputs' confidences, so
that about that share of sentences like the split's are flagged. The entry is sealed under
the checkpoint's checksum and the file written atomically (a failed write leaves the old
one); the weights are written back bit for bit. A multilingual model is refused (one
threshold would not fit its directions).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from seq2seq.cli.common import (
    Parser,
    add_model_argument,
    check_output_file,
    check_replace,
    run_command,
)
from seq2seq.config import CALIBRATION_SPLITS, CalibrationConfig

PROG = "seq2seq-calibrate"


def build_parser() -> argparse.ArgumentParser:
    d = CalibrationConfig()
    ap = Parser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_argument(ap, help="the checkpoint to calibrate (.ckpt, or a shipped model's name); "
                       "written in place unless -o is given")
    ap.add_argument("--split", choices=CALIBRATION_SPLITS,
                    help=f"the Multi30k split translated (default {d.split})")
    ap.add_argument("--quantile", type=float, metavar="Q",
                    help=f"share of the split's outputs below the threshold, in (0, 0.5) "
                         f"(default {d.quantile})")
    ap.add_argument("--limit", type=int, metavar="N", help="only the split's first N lines")
    ap.add_argument("-o", "--output", metavar="FILE",
                    help="write the calibrated checkpoint here (default: in place)")
    ap.add_argument("--force", action="store_true",
                    help="let -o replace an existing checkpoint (never another kind of file)")
    return ap


def config_of(args: argparse.Namespace) -> CalibrationConfig:
    """``CalibrationConfig`` defaults overridden by the options given (errors name the option)."""
    over = {k: getattr(args, k) for k in ("split", "quantile", "limit") if getattr(args, k) is not None}
    try:
        return CalibrationConfig(**over)
    except ValueError as e:
        name = next((k for k in over if f"CalibrationConfig.{k}" in str(e)), None)
        raise ValueError(f"--{name} {over[name]}: {e}" if name else str(e)) from None


def check_target(target: Path, option: str) -> None:
    """The file to write can be replaced: never a read-only one (root may write it anyway)."""
    check_output_file(str(target), option)
    if target.exists() and not target.stat().st_mode & 0o222:
        raise ValueError(f"{option} {target}: is read-only (mode {target.stat().st_mode & 0o777:o}); "
                         "make it writable (chmod u+w) or write a copy with -o")


def run(args: argparse.Namespace) -> None:
    from seq2seq.checkpoint import is_checkpoint_file
    from seq2seq.shipped import find_model

    cfg = config_of(args)  # before anything slow
    path = find_model(args.checkpoint)  # a shipped model's name: its file, calibrated in place
    target = Path(args.output) if args.output else path
    check_target(target, "--output" if args.output else "-m")
    if args.output and not (target.exists() and os.path.samefile(target, path)):
        check_replace(target, "--output", args.force, "a checkpoint", is_checkpoint_file)
    elif args.force:
        print(f"{PROG}: warning: --force has no effect without -o", file=sys.stderr)

    from seq2seq.translation.calibration import calibrate_file  # torch: after argument errors

    entry = calibrate_file(path, cfg, target)
    print(f"{PROG}: {target}: outputs below confidence {entry['threshold']:.4f} are unsure (the "
          f"{entry['quantile']:g} quantile of {entry['n']} {entry['split']} outputs, "
          f"{entry['search']})", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    run_command(PROG, run, build_parser().parse_args(argv))


if __name__ == "__main__":
    main()
