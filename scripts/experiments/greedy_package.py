"""One sentence at a time, greedy, under ``--compile``: the whole step in one package
(``decoding.compiled_greedy``: decoder step, projection, rules, arg-max) against the decoder
step's package with the rest around it in Python, paired sentence by sentence in one process.

    python scripts/experiments/greedy_package.py                  # 2 threads, 200 sentences
    python scripts/experiments/greedy_package.py --threads 1

Each test_2016_flickr sentence (after 10 untimed) is translated twice, text in and text out,
once each way, the order alternating; the figure is the median of the per-sentence time
ratios (whole step's / step package's), which a machine whose speed drifts between runs
moves far less than two runs' p50s. Prints the CPU, the 1-minute load before and the cores
other processes used during the run. docs/speed.md "One sentence at a time".
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

LOAD_BEFORE = os.getloadavg()[0]  # before this process's own imports load the CPU

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scripts.bench import timing  # noqa: E402
from scripts.experiments.lone_package import arguments  # noqa: E402
from seq2seq.config import DecodingConfig  # noqa: E402
from seq2seq.translation.translator import Translator  # noqa: E402


def paired(translator: Translator, texts: list[str]) -> tuple[list[float], list[float], bool]:
    """Seconds per text with the whole greedy step compiled and without it (the step
    package then runs each step), and whether both gave the same lines."""
    features = translator.model.inference
    whole = features.compiled_greedy
    for text in texts[:10]:  # warm-up; makes or loads the packages
        translator.translate([text])
        features.compiled_greedy = None
        translator.translate([text])
        features.compiled_greedy = whole
    times: dict[bool, list[float]] = {True: [], False: []}
    lines: dict[bool, list[str]] = {True: [], False: []}
    for i, text in enumerate(texts[10:]):
        for use in ((True, False) if i % 2 == 0 else (False, True)):
            features.compiled_greedy = whole if use else None
            start = time.perf_counter()
            lines[use].append(translator.translate([text])[0])
            times[use].append(time.perf_counter() - start)
    features.compiled_greedy = whole
    return times[True], times[False], lines[True] == lines[False]


def main() -> None:
    args, texts = arguments(__doc__.split("\n\n")[0])
    print(f"CPU: {timing.cpu_label(timing.cpu_model())}; 1-minute load before {LOAD_BEFORE:.2f}")
    translator = Translator.from_checkpoint(args.model, DecodingConfig(method="greedy"),
                                            compile=True)
    other = timing.OtherWork()
    other.start()
    whole, steps, same = paired(translator, texts)
    ratio = statistics.median(a / b for a, b in zip(whole, steps))
    print(f"greedy, {args.threads} thread(s): p50 {statistics.median(whole) * 1e3:.2f} ms "
          f"whole step compiled, {statistics.median(steps) * 1e3:.2f} ms step package; median "
          f"paired ratio {ratio:.3f} ({len(whole)} sentences, same lines: {same}); other "
          f"processes {other.cores():.2f} cores")


if __name__ == "__main__":
    main()
