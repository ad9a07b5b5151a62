"""What ``seq2seq-evaluate`` prints: the scores of every system, and with ``--baseline`` the
paired tests' table (each system's score, the bootstrap mean ± the 95% interval's half-width
and the p-values of its difference from the baseline, as sacreBLEU formats them)."""

from __future__ import annotations

import sys
from typing import Any

LC_TOK_NOTE = "lowercased, 13a-tokenized BLEU: only for comparison with papers that score that way"
METRICS = ("BLEU", "chrF")


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else "..." + text[-(width - 3):]


def print_columns(head: tuple[str, ...], rows: list[tuple[str, ...]], left: int, out) -> None:
    """``head`` and ``rows`` aligned: the first ``left`` columns to the left, numbers right."""
    widths = [max(len(c) for c in col) for col in zip(head, *rows)]
    for row in (head, *rows):
        cells = [c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))]
        print("  ".join(cells).rstrip(), file=out)


def print_table(results: list[dict[str, Any]], out=None) -> None:
    out = out or sys.stdout
    rows = [(_cut(r["checkpoint"], 48), _cut(r["test_set"], 48), str(r["sentences"]),
             f"{r['BLEU']['score']:.2f}", f"{r['chrF']['score']:.2f}",
             f"{r['BLEU-lc-tok']['score']:.2f}") for r in results]
    print_columns(("checkpoint", "test set", "sents", "BLEU", "chrF", "lc-tok BLEU*"), rows, 2, out)
    first = results[0]
    print(f"BLEU signature:         {first['BLEU']['signature']}  (cased, detokenized: report this)", file=out)
    print(f"chrF signature:         {first['chrF']['signature']}", file=out)
    print(f"lc-tok BLEU* signature: {first['BLEU-lc-tok']['signature']}", file=out)
    print(f"* {LC_TOK_NOTE}", file=out)
    for r in results:
        print(f"hypotheses: {r['hypotheses']}", file=out)


def _p(value: float | None) -> str:
    # sacreBLEU's marking: 4 digits, "*" where the difference is significant at 0.05
    return "-" if value is None else f"{value:.4f}" + ("*" if value <= 0.05 else "")


def print_comparison(results: list[dict[str, Any]], out=None) -> None:
    """One table per test set that has paired tests, the baseline's row first."""
    out = out or sys.stdout
    for test in dict.fromkeys(r["test_set"] for r in results if "paired" in r):
        group = sorted((r for r in results if r["test_set"] == test and "paired" in r),
                       key=lambda r: r["checkpoint"] != r["paired"]["baseline"])
        first = group[0]["paired"]
        print(f"\npaired tests against the baseline {first['baseline']} on {test} (sacreBLEU: "
              f"{first['bootstrap_resamples']} bootstrap resamples, {first['ar_trials']} "
              f"approximate randomization trials, seed {first['seed']}):", file=out)
        head = ("system", *(h for m in METRICS for h in (f"{m} (μ ± 95% CI)", "p (bs)", "p (ar)")))
        rows = [(_cut(r["checkpoint"], 48),
                 *(cell for m in METRICS for f in [r["paired"][m]] for cell in (
                     f"{f['score']:.2f} ({f['mean']:.2f} ± {f['ci']:.2f})",
                     _p(f["p_bootstrap"]), _p(f["p_randomization"])))) for r in group]
        print_columns(head, rows, 1, out)
        print("p: the chance of a difference from the baseline at least this large if both "
              "came from the same system; * at 0.05 or below", file=out)
        for m in METRICS:
            print(f"{m} signatures: {first['signatures'][m]['bootstrap']} (bs), "
                  f"{first['signatures'][m]['randomization']} (ar)", file=out)
