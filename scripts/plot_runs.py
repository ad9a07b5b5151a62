"""Compare training runs on one figure: ``python scripts/plot_runs.py -o out.png NAME=LOGDIR ...``

LOGDIR is a run's log folder holding ``curves.json`` (written by the ``TrainingCurves``
callback), e.g. ``runs/ln_study/pre/lightning_logs/version_0``.
"""

import argparse
import json
from pathlib import Path

from seq2seq.plotting import plot_training_curves


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("runs", nargs="+", help="NAME=LOGDIR")
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args()
    runs = {}
    for item in args.runs:
        name, _, folder = item.partition("=")
        runs[name] = json.loads((Path(folder) / "curves.json").read_text())
    print(plot_training_curves(runs, args.output))


if __name__ == "__main__":
    main()
