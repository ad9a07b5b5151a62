"""Is a system's score different from a baseline's by more than chance? sacreBLEU's own paired
tests on the reported metrics (``metrics.REPORTED``: BLEU and chrF), so the figures are the
ones ``sacrebleu REF -i BASE SYS --paired-bs`` / ``--paired-ar`` prints for the same lines:

- paired bootstrap resampling (Koehn 2004): each system's score, the mean of its resampled
  scores with the 95% confidence interval's half-width (``mean ± ci``), and the p-value of
  its difference from the baseline;
- approximate randomization (Riezler and Maxwell 2005): the p-value of the same difference.

Both draw from sacreBLEU's seeded generator: the same seed, the same figures.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sacrebleu.significance import PairedTest

from seq2seq.metrics import REPORTED, check_lines

DEFAULT_BOOTSTRAP = PairedTest._DEFAULT_SAMPLES["bs"]  # sacreBLEU's: 1000 resamples
DEFAULT_TRIALS = PairedTest._DEFAULT_SAMPLES["ar"]  # sacreBLEU's: 10000 trials
DEFAULT_SEED = 12345  # sacreBLEU's, when $SACREBLEU_SEED is not set


@dataclass(frozen=True)
class Paired:
    """One system's figures for one metric; the baseline's p-values are None."""

    score: float
    mean: float  # of the bootstrap resamples
    ci: float  # half-width of the 95% interval around ``mean``, as sacreBLEU gives it
    p_bootstrap: float | None
    p_randomization: float | None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)  # unrounded: a table rounds once, as sacreBLEU's does


@contextmanager
def _seeded(seed: int):
    """sacreBLEU reads its seed only from $SACREBLEU_SEED (when a test is set up and for the
    baseline's resamples), so the seed is put there for the duration, and put back."""
    before = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)
    try:
        yield
    finally:
        if before is None:
            del os.environ["SACREBLEU_SEED"]
        else:
            os.environ["SACREBLEU_SEED"] = before


def check_seed(seed: int, option: str = "seed") -> None:
    # sacreBLEU draws the systems' samples unseeded for 0 (``seed if seed else None``).
    if seed < 1:
        raise ValueError(f"{option} {seed}: must be >= 1 (sacreBLEU takes 0 as 'no seed': "
                         "other figures every run)")


def paired_tests(systems: list[list[str]], refs: list[str], bootstrap: int = DEFAULT_BOOTSTRAP,
                 trials: int = DEFAULT_TRIALS, seed: int = DEFAULT_SEED
                 ) -> tuple[list[dict[str, Paired]], dict[str, dict[str, str]]]:
    """Each system (``systems[0]`` is the baseline; one hypothesis per reference) against the
    baseline: ``[{metric name: Paired}]`` in the systems' order, and each metric's sacreBLEU
    signatures, ``{"bootstrap": ..., "randomization": ...}`` (seed, resamples, trials)."""
    check_seed(seed)
    if len(systems) < 2:
        raise ValueError("a paired test needs a baseline and at least one other system")
    for hyps in systems:
        check_lines(hyps, refs)
    named = [(str(i), list(hyps)) for i, hyps in enumerate(systems)]
    runs = {}
    with _seeded(seed):
        for test, kind, n in (("bootstrap", "bs", bootstrap), ("randomization", "ar", trials)):
            metrics = {name: make() for name, make in REPORTED.items()}
            runs[test] = PairedTest(named, metrics, references=[list(refs)], test_type=kind,
                                    n_samples=n)()
    # sacreBLEU keys its results by each metric's own name (chrF2), in the metrics' order
    (bs_sigs, bs), (ar_sigs, ar) = runs["bootstrap"], runs["randomization"]
    theirs = dict(zip(REPORTED, [m for m in bs if m != "System"]))
    out = [{name: Paired(float(bs[m][i].score), float(bs[m][i].mean), float(bs[m][i].ci),
                         bs[m][i].p_value, ar[m][i].p_value) for name, m in theirs.items()}
           for i in range(len(systems))]
    signatures = {name: {"bootstrap": bs_sigs[m].format(), "randomization": ar_sigs[m].format()}
                  for name, m in theirs.items()}
    return out, signatures
