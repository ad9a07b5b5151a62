"""``seq2seq-average``: average checkpoints into one self-contained checkpoint.

    seq2seq-average -o avg.ckpt a.ckpt b.ckpt ...
    seq2seq-average -o avg.ckpt --last 10 runs/X/checkpoints     # the 10 newest step checkpoints
    seq2seq-average -o avg.ckpt --best 5 runs/X/checkpoints      # the 5 with the highest val BLEU
    seq2seq-average -o small.ckpt --dtype float16 a.ckpt         # one checkpoint, half the size

Nothing is written unless every input loads, passes its checks and agrees with the others
(config, tokenizers, language pair, weight names, shapes, dtypes). The output never replaces
an input, and replaces an existing checkpoint only with ``--force``. Snapshots of the same step
(``step000008.ckpt`` and the ``step000008-v1.ckpt`` a resumed run wrote again) count once.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from seq2seq.cli.common import Parser, check_replace, run_command

PROG = "seq2seq-average"
_BLEU = re.compile(r"bleu(\d+(?:\.\d+)?)")
_STEP = re.compile(r"step(\d+)")
_VERSION = re.compile(r"-v(\d+)\.ckpt$")


def _one_per_step(files: list[Path]) -> dict[int, Path]:
    """Step -> its checkpoint; of several of one step the latest version (``-vN``) wins,
    then one with a val BLEU in its name (what ``--best`` reads)."""
    by_step: dict[int, tuple[tuple[int, bool], Path]] = {}
    for p in files:
        if m := _STEP.search(p.name):
            v = _VERSION.search(p.name)
            rank = (int(v.group(1)) if v else 0, bool(_BLEU.search(p.name)))
            step = int(m.group(1))
            if step not in by_step or rank > by_step[step][0]:
                by_step[step] = (rank, p)
    return {step: p for step, (_, p) in by_step.items()}


def select(folder: Path, last: int | None, best: int | None) -> list[Path]:
    """Checkpoints of ``folder`` (``last.ckpt`` excluded: it duplicates a step checkpoint),
    oldest step first, one per step."""
    files = sorted(p for p in folder.glob("*.ckpt") if p.name != "last.ckpt" and p.is_file())
    steps = _one_per_step(files)
    if best:
        scored = [(float(m.group(1)), step, p) for step, p in steps.items()
                  if (m := _BLEU.search(p.name))]
        return [p for _, _, p in sorted(sorted(scored)[-best:], key=lambda x: x[1])]
    return [p for _, p in sorted(steps.items())[-last:]]


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    from seq2seq.averaging import STORAGE_DTYPES

    ap = Parser(prog=PROG, description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", help="checkpoint files, or one folder with --last/--best")
    ap.add_argument("-o", "--output", required=True, help="the averaged checkpoint (a file)")
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--last", type=_positive, metavar="N",
                       help="average the N checkpoints with the highest step")
    group.add_argument("--best", type=_positive, metavar="N",
                       help="average the N checkpoints with the highest val BLEU")
    ap.add_argument("--dtype", choices=list(STORAGE_DTYPES),
                    help="store the weights in this precision (default: as the inputs)")
    ap.add_argument("--force", action="store_true",
                    help="replace an existing output checkpoint (never one of the inputs, "
                         "nor a file that is not a checkpoint)")
    return ap


def _each_once(paths: list[Path]) -> None:
    """A file named twice (``a.ckpt ./a.ckpt``) would silently get twice the weight."""
    seen: dict[tuple[int, int], Path] = {}
    for p in paths:
        try:
            st = p.stat()
        except OSError:
            continue  # missing or unreadable: load_checkpoint says so, naming it
        if (st.st_dev, st.st_ino) in seen:
            raise ValueError(f"{p} is the same file as {seen[st.st_dev, st.st_ino]}: each "
                             "checkpoint counts once in an average; name it once")
        seen[st.st_dev, st.st_ino] = p


def inputs(args: argparse.Namespace) -> list[Path]:
    """The checkpoint files to average (one line on stderr when fewer than asked for)."""
    paths = [Path(p) for p in args.inputs]
    n = args.last or args.best
    if not n:
        folders = [p for p in paths if p.is_dir()]
        if folders:
            raise ValueError(f"{folders[0]} is a directory: give checkpoint files, or the folder "
                             "with --last N or --best N")
        _each_once(paths)
        return paths
    if len(paths) == 1 and not paths[0].exists():
        raise ValueError(f"{paths[0]}: no such folder{_run_folder_hint(paths[0])}")
    if len(paths) != 1 or not paths[0].is_dir():
        raise ValueError(f"--{'last' if args.last else 'best'} takes exactly one folder of "
                         f"checkpoints, got {' '.join(args.inputs)}")
    chosen = select(paths[0], args.last, args.best)
    kind = "step checkpoints (stepNNNNNN*.ckpt)" if args.last else "checkpoints with a val BLEU in their name"
    if not chosen:
        raise ValueError(f"{paths[0]} holds no {kind}")
    if len(chosen) < n:
        print(f"{PROG}: warning: --{'last' if args.last else 'best'} {n}: {paths[0]} holds only "
              f"{len(chosen)} {kind}; averaging {len(chosen)}", file=sys.stderr)
    if note := window_note(paths[0], chosen):
        print(f"{PROG}: warning: {note}", file=sys.stderr)
    return chosen


def _run_folder_hint(missing: Path) -> str:
    """Where the checkpoints of the run that ``missing`` points into are, if they exist."""
    for folder in missing.parents:
        if (folder / "checkpoints").is_dir():
            return f" (this run's checkpoints are in {folder / 'checkpoints'})"
    return ""


# An average should cover the tail of a run, where the weights move little. Reaching back
# over half of it mixes in much earlier weights (the 1,000-update quickstart run averaged
# over its 3 snapshots scored 31.46 BLEU, its last checkpoint 34.26).
WINDOW_SHARE = 0.5


def window_note(folder: Path, chosen: list[Path]) -> str | None:
    """A warning when the chosen snapshots span at least :data:`WINDOW_SHARE` of the run
    (the newest step in ``folder``), each counted with the interval before it."""
    steps = sorted(_one_per_step(list(folder.glob("*.ckpt"))))
    picked = sorted(int(_STEP.search(p.name).group(1)) for p in chosen)
    if len(picked) < 2 or not steps or steps[-1] <= 0:
        return None
    gap = min((b - a for a, b in zip(steps, steps[1:])), default=steps[0]) or 1
    share = (picked[-1] - picked[0] + gap) / steps[-1]
    if share < WINDOW_SHARE:
        return None
    return (f"the {len(picked)} checkpoints averaged (steps {picked[0]}-{picked[-1]}) span "
            f"{min(share, 1.0):.0%} of this run's {steps[-1]} updates; an average reaching "
            "that far back usually scores below the last checkpoint: average fewer (--last K) "
            "or the tail of a longer run")


def run(args: argparse.Namespace) -> None:
    from seq2seq.averaging import average  # after argument errors: importing torch is slow
    from seq2seq.checkpoint import is_checkpoint_file
    from seq2seq.files import check_output

    paths = inputs(args)
    out = Path(args.output)
    check_output(out, paths, force=True, what="--output")  # never an input, only a regular file
    check_replace(out, "--output", args.force, "a checkpoint", is_checkpoint_file)
    average(paths, out, args.dtype)
    noun = "checkpoint" if len(paths) == 1 else "checkpoints"
    print(f"averaged {len(paths)} {noun} -> {out}", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    run_command(PROG, run, build_parser().parse_args(argv))


if __name__ == "__main__":
    main()
