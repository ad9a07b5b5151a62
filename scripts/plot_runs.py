"""Compare training runs on one figure: ``python scripts/plot_runs.py -o out.png [--json out.json] NAME=LOGDIR ...``

LOGDIR is a run's log folder holding ``curves.json`` (written by the ``TrainingCurves``
callback), e.g. ``runs/ln_study/pre/lightning_logs/version_0``. ``--json`` also writes the
plotted histories, ``{NAME: curves}``.
"""

import argparse
import json
from pathlib import Path

from seq2seq.plotting import plot_training_curves


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("runs", nargs="+", help="NAME=LOGDIR")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--json", help="also write the plotted histories here")
    args = ap.parse_args()
    runs = {}
    for item in args.runs:
        name, _, folder = item.partition("=")
        runs[name] = json.loads((Path(folder) / "curves.json").read_text())
    print(plot_training_curves(runs, args.output))
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1) + "\n")
        print(args.json)


if __name__ == "__main__":
    main()
