"""One sentence at a time under ``--compile``: its own package (fixed rows, single-threaded
kernels) against the any-batch package, paired sentence by sentence in one process.

    python scripts/experiments/lone_package.py                   # greedy and beam 5, 2 threads
    python scripts/experiments/lone_package.py --threads 1 --limit 100

Each test_2016_flickr sentence (after 10 untimed) is translated twice, text in and text out,
once through each package, the order alternating; the figure is the median of the
per-sentence time ratios (one sentence's ÷ any batch's), which a machine whose speed drifts
between runs moves far less than two separate runs' p50s. Both packages are the cached ones
``--compile`` makes (made first if missing). docs/speed.md "One sentence at a time".
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from seq2seq.config import DecodingConfig  # noqa: E402
from seq2seq.data.sources import read_lines  # noqa: E402
from seq2seq.translation.translator import Translator  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SEARCHES = {"greedy": DecodingConfig(method="greedy"),
            "beam 5": DecodingConfig(method="beam", beam_size=5, stopping="patience")}


def paired(translator: Translator, texts: list[str]) -> tuple[list[float], list[float]]:
    """Seconds per text through the one-sentence package and through the any-batch one."""
    step = translator.model.inference.compiled_step
    for text in texts[:10]:  # warm-up; makes or loads both packages
        translator.translate([text])
    lone, batch = dict(step.lone), dict(step.loaders)
    times: dict[bool, list[float]] = {True: [], False: []}
    for i, text in enumerate(texts[10:]):
        for use_lone in ((True, False) if i % 2 == 0 else (False, True)):
            step.lone = lone if use_lone else batch  # the any-batch package for one sentence
            start = time.perf_counter()
            translator.translate([text])
            times[use_lone].append(time.perf_counter() - start)
    step.lone = lone
    return times[True], times[False]


def arguments(description: str, parts: tuple[str, ...] = ()) -> tuple[argparse.Namespace,
                                                                      list[str]]:
    """The paired studies' options (model, threads, sentences, ``--part`` among ``parts``;
    torch's threads set) and their texts: the 10 untimed test_2016_flickr sentences, then
    the timed ones."""
    ap = argparse.ArgumentParser(description=description)
    if parts:
        ap.add_argument("--part", choices=parts, default=parts[0])
    ap.add_argument("-m", "--model", default=str(ROOT / "data/models/multi30k_de_en_tiny.ckpt"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--limit", type=int, default=200, help="sentences timed")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    return args, read_lines(ROOT / "data/multi30k/test_2016_flickr.de.gz")[: args.limit + 10]


def main() -> None:
    args, texts = arguments(__doc__.split("\n\n")[0])
    for name, decoding in SEARCHES.items():
        translator = Translator.from_checkpoint(args.model, decoding, compile=True)
        # greedy's whole step has its own package (greedy_package.py): the step packages here
        translator.model.inference.compiled_greedy = None
        lone, batch = paired(translator, texts)
        ratio = statistics.median(a / b for a, b in zip(lone, batch))
        print(f"{name}, {args.threads} thread(s): p50 {statistics.median(lone) * 1e3:.2f} ms "
              f"one sentence's package, {statistics.median(batch) * 1e3:.2f} ms any batch's; "
              f"median paired ratio {ratio:.3f} ({len(lone)} sentences)")


if __name__ == "__main__":
    main()
