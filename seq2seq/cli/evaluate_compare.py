"""``seq2seq-evaluate``'s systems and their comparison: each ``-m`` model is a system, or
(``--ensemble``) all of them are one; with ``--baseline``, every other system is compared
with the baseline on the same sentences by sacreBLEU's paired tests (``seq2seq.significance``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

PAIRED_OPTIONS = ("paired_bs_n", "paired_ar_n", "paired_seed")


def add_compare_args(ap: argparse.ArgumentParser, positive_int) -> None:
    from seq2seq.significance import DEFAULT_BOOTSTRAP, DEFAULT_SEED, DEFAULT_TRIALS

    g = ap.add_argument_group("systems and significance")
    g.add_argument("--ensemble", action="store_true",
                   help="the -m models as one system, an ensemble (each step the mean of the "
                        "models' log-probabilities; they must share tokenizers): one row")
    g.add_argument("--baseline", metavar="CKPT",
                   help="one of the -m models (its path or shipped name, as given to -m): "
                        "every other one is compared with it by sacreBLEU's paired bootstrap "
                        "and approximate randomization tests, BLEU and chrF (95%% confidence "
                        "intervals, p-values)")
    g.add_argument("--paired-bs-n", type=positive_int, metavar="N",
                   help=f"bootstrap resamples (default {DEFAULT_BOOTSTRAP}, sacreBLEU's)")
    g.add_argument("--paired-ar-n", type=positive_int, metavar="N",
                   help=f"approximate randomization trials (default {DEFAULT_TRIALS}, sacreBLEU's)")
    g.add_argument("--paired-seed", type=int, metavar="N",
                   help=f"seed of both tests' samples (default {DEFAULT_SEED}, sacreBLEU's; "
                        "the same seed, the same figures as sacreBLEU's CLI with SACREBLEU_SEED=N)")


def systems_of(args) -> list[tuple[str, ...]]:
    """The systems to evaluate, each a tuple of checkpoints (more than one: an ensemble)."""
    return [tuple(args.checkpoint)] if args.ensemble else [(p,) for p in args.checkpoint]


def _same_file(path: str) -> Path | None:
    from seq2seq.shipped import find_model

    try:
        return find_model(path).resolve()
    except OSError:
        return None


def baseline_of(args, systems: list[tuple[str, ...]]) -> int | None:
    """The index of ``--baseline`` among ``systems`` (None without it); a one-line
    ``ValueError`` when it is not one of them or there is nothing to compare it with."""
    from seq2seq.significance import check_seed

    if args.baseline is None:
        given = [f"--{o.replace('_', '-')}" for o in PAIRED_OPTIONS if getattr(args, o) is not None]
        if given:
            raise ValueError(f"{', '.join(given)}: sets the paired tests, which run only with --baseline")
        return None
    if args.paired_seed is not None:
        check_seed(args.paired_seed, "--paired-seed")
    if len(systems) < 2:
        why = ("--ensemble makes the -m models one system" if args.ensemble else
               "there is one -m model; give -m BASELINE -m OTHER ...")
        raise ValueError(f"--baseline {args.baseline}: no other system to compare it with: {why}")
    wanted = _same_file(args.baseline)
    for i, (path,) in enumerate(systems):
        if wanted is not None and _same_file(path) == wanted:
            return i
    raise ValueError(f"--baseline {args.baseline}: not one of the -m models "
                     f"({', '.join(map(str, args.checkpoint))})")


def check_comparable(plan: list[tuple], baseline: int, labels: list[str], args) -> None:
    """Before any decoding: the baseline is evaluated on every test set another system is
    (a paired test compares outputs of the same sentences)."""
    keys = {test.key for system, test, *_ in plan if system == baseline}
    for system, test, *_ in plan:
        if test.key not in keys:
            raise ValueError(f"--baseline {args.baseline}: not evaluated on {test.label}, as "
                             f"{labels[system]} is (a paired test needs the same sentences): "
                             "compare models of one direction")


def compare(runs: list[tuple[int, Any, list[str], dict[str, Any]]], baseline: int, args) -> None:
    """``runs``: (system, test set, hypotheses, record) of each evaluation. Adds ``paired`` to
    every record of a test set the baseline has: the figures of ``seq2seq.significance``."""
    from seq2seq.significance import DEFAULT_BOOTSTRAP, DEFAULT_SEED, DEFAULT_TRIALS, paired_tests

    settings = {"bootstrap_resamples": args.paired_bs_n or DEFAULT_BOOTSTRAP,
                "ar_trials": args.paired_ar_n or DEFAULT_TRIALS,
                "seed": DEFAULT_SEED if args.paired_seed is None else args.paired_seed}
    for key in dict.fromkeys(test.key for _, test, _, _ in runs):
        group = [r for r in runs if r[1].key == key]
        if len(group) < 2:  # only the baseline has this direction: nothing to compare
            continue
        group.sort(key=lambda r: r[0] != baseline)  # the baseline first, then -m's order
        results, signatures = paired_tests([hyps for _, _, hyps, _ in group], group[0][1].ref,
                                           settings["bootstrap_resamples"], settings["ar_trials"],
                                           settings["seed"])
        for (_, _, _, record), figures in zip(group, results):
            record["paired"] = {"baseline": group[0][3]["checkpoint"], **settings,
                                **{name: f.as_dict() for name, f in figures.items()},
                                "signatures": signatures}
