"""One sentence at a time, greedy, under ``--compile``: a part of ``decoding.compiled_greedy``
with and without its package, paired sentence by sentence in one process. ``--part step``:
the whole step in one package (decoder step, projection, rules, arg-max) against the decoder
step's package with the rest around it in Python; ``--part source``: the source side in one
package (``model.inference.compiled_source``: encoder, cross K/V, layout) against the
compiled encoder with the rest eager (the whole step's package both ways); ``--part cross``:
the whole step's package as built (cross-attention scores as a ``bmm`` plus the bias, in
Inductor's kernels) against one built with them as ATen's ``baddbmm`` (made here, in a
temporary directory); ``--part beam``: beam 5 (patience), one sentence's step scored in one
package (``decoding.compiled_beam``) against the step package with the scoring in Python.

    python scripts/experiments/greedy_package.py                  # the step, 2 threads
    python scripts/experiments/greedy_package.py --part source --threads 1
    python scripts/experiments/greedy_package.py --part cross
    python scripts/experiments/greedy_package.py --part beam

Each test_2016_flickr sentence (after 10 untimed) is translated twice, text in and text out,
once each way, the order alternating; the figure is the median of the per-sentence time
ratios (with the part's package / without), which a machine whose speed drifts between runs
moves far less than two runs' p50s. Prints the CPU, the 1-minute load before and the cores
other processes used during the run. docs/speed.md "One sentence at a time".
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

LOAD_BEFORE = os.getloadavg()[0]  # before this process's own imports load the CPU

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scripts.bench import timing  # noqa: E402
from scripts.experiments.lone_package import arguments  # noqa: E402
from seq2seq.config import DecodingConfig  # noqa: E402
from seq2seq.translation.translator import Translator  # noqa: E402


def switch(translator: Translator, part: str) -> Callable[[bool], None]:
    """``use(on)``: decode with the part's package (True) or without it (False)."""
    features = translator.model.inference
    whole = features.compiled_greedy
    translator.translate(["ein Test ."])  # makes or loads the packages
    source, beam, loaders = features.compiled_source, features.compiled_beam, {True: whole.loader}
    if part == "cross":
        loaders[False] = baddbmm_package(translator.model)

    def use(on: bool) -> None:
        if part == "step":
            features.compiled_greedy = whole if on else None
        elif part == "source":
            features.compiled_source = source if on else None
        elif part == "beam":
            features.compiled_beam = beam if on else None
        else:
            whole.loader = loaders[on]
    return use


def baddbmm_package(model):
    """The whole greedy step's package with the cross-attention scores as ``baddbmm`` (the
    any-batch packages' form), made in a temporary directory and loaded."""
    import tempfile

    import torch

    from seq2seq.decoding import compiled_greedy

    class Baddbmm(compiled_greedy.GreedyStep):
        def __init__(self, model):
            super().__init__(model)
            self.lone = False  # step.cross_attention's ATen form

    with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
        path = Path(tmp) / "greedy.pt2"
        original = compiled_greedy.GreedyStep
        compiled_greedy.GreedyStep = Baddbmm
        try:
            compiled_greedy.make(model, path, {})
        finally:
            compiled_greedy.GreedyStep = original
        return torch._C._aoti.AOTIModelPackageLoader(str(path), "model", False, 1, -1)


def paired(translator: Translator, texts: list[str],
           use: Callable[[bool], None]) -> tuple[list[float], list[float], bool]:
    """Seconds per text with the part's package and without, and whether both gave the
    same lines."""
    for text in texts[:10]:  # warm-up
        for on in (True, False):
            use(on)
            translator.translate([text])
    times: dict[bool, list[float]] = {True: [], False: []}
    lines: dict[bool, list[str]] = {True: [], False: []}
    for i, text in enumerate(texts[10:]):
        for on in ((True, False) if i % 2 == 0 else (False, True)):
            use(on)
            start = time.perf_counter()
            lines[on].append(translator.translate([text])[0])
            times[on].append(time.perf_counter() - start)
    use(True)
    return times[True], times[False], lines[True] == lines[False]


def main() -> None:
    args, texts = arguments(__doc__.split("\n\n")[0], parts=("step", "source", "cross", "beam"))
    print(f"CPU: {timing.cpu_label(timing.cpu_model())}; 1-minute load before {LOAD_BEFORE:.2f}")
    decoding = (DecodingConfig(method="beam", beam_size=5, stopping="patience")
                if args.part == "beam" else DecodingConfig(method="greedy"))
    translator = Translator.from_checkpoint(args.model, decoding,
                                            compile=True)
    other = timing.OtherWork()
    other.start()
    on, off, same = paired(translator, texts, switch(translator, args.part))
    ratio = statistics.median(a / b for a, b in zip(on, off))
    print(f"{decoding.method}, {args.threads} thread(s), the {args.part}: p50 "
          f"{statistics.median(on) * 1e3:.2f} ms with its package, "
          f"{statistics.median(off) * 1e3:.2f} ms without; median paired ratio {ratio:.3f} "
          f"({len(on)} sentences, same lines: {same}); other processes {other.cores():.2f} cores")


if __name__ == "__main__":
    main()
