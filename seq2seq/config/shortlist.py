"""``seq2seq-shortlist``'s settings (``ShortlistConfig``): the lexical table that restricts a
model's output vocabulary per batch at decoding (``--shortlist``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from seq2seq.fields import check_fields, positive


@dataclass
class ShortlistConfig:
    """For each source piece its ``per_source`` most associated target pieces, plus the
    ``frequent`` most frequent target pieces (and every special id) always, counted on the
    Multi30k ``split`` of the model's direction (or given files)."""

    # the smallest measured setting that keeps >= 99% of the shipped models' greedy outputs
    # on test_2016_flickr (De->En 99.9%, En->De 99.4%; 20/100: 97.8%, 91.3%: the table misses
    # word-inner pieces). Beam 5 keeps ~96% at any size measured: the log-softmax over the
    # candidates moves near-tied hypotheses (docs/speed.md "Vocabulary shortlist")
    per_source: int = 50
    frequent: int = 300
    # "dice": 2 c(s,t) / (c(s) + c(t)) over sentence co-occurrence (favours specific
    # translations over frequent words); "conditional": p(t | s) = c(s,t) / c(s)
    score: Literal["dice", "conditional"] = "dice"
    split: Literal["train", "val"] = "train"
    limit: int | None = None  # the first N pairs only (None: all)

    def __post_init__(self) -> None:
        check_fields(self)
        positive(self, "per_source", "frequent", "limit")
