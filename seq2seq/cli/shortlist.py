"""``seq2seq-shortlist``: store in a checkpoint the lexical table of its vocabulary shortlist
(``--shortlist`` in seq2seq-translate, seq2seq-evaluate and seq2seq-serve then decodes each
batch over the target pieces its source pieces can produce, not the whole vocabulary).

    seq2seq-shortlist -m run.ckpt -o run.shortlist.ckpt
    seq2seq-shortlist -m run.ckpt --in-place --per-source 50 --frequent 300
    seq2seq-shortlist -m run.ckpt -o out.ckpt --source train.de --target train.en

For each source piece, the ``--per-source`` K target pieces that co-occur with it most in a
parallel corpus (by sentence; ``--score`` dice or conditional p(t|s)), plus the
``--frequent`` N most frequent target pieces and every special id. The corpus is the
shipped Multi30k ``--split`` (default train) of the model's direction, or line-aligned
``--source``/``--target`` files (plain or .gz), tokenized with the checkpoint's tokenizers.
The entry is sealed under the checkpoint's checksum and the file written atomically; the
input is never changed unless ``--in-place``.
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
from seq2seq.config import ShortlistConfig

PROG = "seq2seq-shortlist"
OPTIONS = {"per_source": "--per-source", "frequent": "--frequent", "score": "--score",
           "split": "--split", "limit": "--limit"}


def build_parser() -> argparse.ArgumentParser:
    d = ShortlistConfig()
    ap = Parser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_argument(ap, help="the checkpoint to add the table to (.ckpt, or a shipped "
                       "model's name)")
    out = ap.add_mutually_exclusive_group(required=True)
    out.add_argument("-o", "--output", metavar="FILE", help="write the checkpoint with its table here")
    out.add_argument("--in-place", action="store_true", help="add the table to the input checkpoint")
    ap.add_argument("--force", action="store_true",
                    help="let -o replace an existing checkpoint (never another kind of file)")
    ap.add_argument("--source", metavar="FILE", help="source side of a line-aligned corpus "
                    "(with --target; default: the shipped Multi30k --split)")
    ap.add_argument("--target", metavar="FILE", help="target side of that corpus")
    ap.add_argument("--per-source", type=int, metavar="K",
                    help=f"target pieces kept per source piece (default {d.per_source})")
    ap.add_argument("--frequent", type=int, metavar="N",
                    help=f"most frequent target pieces always kept (default {d.frequent})")
    ap.add_argument("--score", choices=("dice", "conditional"),
                    help=f"association of a source and a target piece (default {d.score})")
    ap.add_argument("--split", choices=("train", "val"),
                    help=f"the Multi30k split counted (default {d.split})")
    ap.add_argument("--limit", type=int, metavar="N", help="only the corpus's first N pairs")
    return ap


def config_of(args: argparse.Namespace) -> ShortlistConfig:
    """``ShortlistConfig`` defaults overridden by the options given (errors name the option)."""
    over = {k: getattr(args, k) for k in OPTIONS if getattr(args, k) is not None}
    try:
        return ShortlistConfig(**over)
    except ValueError as e:
        name = next((k for k in over if f"ShortlistConfig.{k}" in str(e)), None)
        raise ValueError(f"{OPTIONS[name]} {over[name]}: {e}" if name else str(e)) from None


def corpus_of(args: argparse.Namespace) -> tuple[Path, Path] | None:
    """``--source``/``--target`` checked (both or neither, regular files); None: default."""
    from seq2seq.files import check_regular_file

    if (args.source is None) != (args.target is None):
        raise ValueError("--source and --target go together: give both files, or neither "
                         "(the shipped Multi30k split)")
    if args.source is None:
        return None
    if args.split is not None:
        raise ValueError("--split chooses a Multi30k split; it has no effect with --source/--target")
    return (check_regular_file(args.source, "--source"), check_regular_file(args.target, "--target"))


def target_of(args: argparse.Namespace, path: Path) -> Path:
    """Where the checkpoint goes: the input with ``--in-place``, else ``-o``, never the input."""
    from seq2seq.checkpoint import is_checkpoint_file

    if args.in_place:
        if args.force:
            print(f"{PROG}: warning: --force has no effect with --in-place", file=sys.stderr)
        target, option = path, "-m"
    else:
        target, option = Path(args.output), "--output"
    check_output_file(str(target), option)
    if target.exists() and not target.stat().st_mode & 0o222:
        raise ValueError(f"{option} {target}: is read-only (mode {target.stat().st_mode & 0o777:o})")
    if args.in_place:
        return target
    if target.exists() and os.path.samefile(target, path):
        raise ValueError(f"--output {target}: is the input checkpoint; writing it would change "
                         "the input: choose another name, or use --in-place")
    check_replace(target, "--output", args.force, "a checkpoint", is_checkpoint_file)
    return target


def run(args: argparse.Namespace) -> None:
    from seq2seq.shipped import find_model

    cfg = config_of(args)  # before anything slow
    files = corpus_of(args)
    path = find_model(args.checkpoint)
    target = target_of(args, path)

    from seq2seq.decoding.shortlist import shortlist_file  # torch: after argument errors

    entry = shortlist_file(path, target, cfg, files)
    print(f"{PROG}: {target}: {entry['per_source']} target pieces per source piece and "
          f"{len(entry['frequent'])} always ({entry['score']}, {entry['pairs']} pairs of "
          f"{entry['data']})", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    run_command(PROG, run, build_parser().parse_args(argv))


if __name__ == "__main__":
    main()
