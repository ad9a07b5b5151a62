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

    # Shipped models, test_2016_flickr: K 20 / N 100 keeps 100% of greedy and beam-5 outputs
    # of En->De and 99.9% / 100% of De->En, with a candidate set of ~15% of the vocabulary
    # per batch (docs/speed.md "Vocabulary shortlist")
    per_source: int = 20
    frequent: int = 100
    # "dice": 2 c(s,t) / (c(s) + c(t)) over sentence co-occurrence (favours specific
    # translations over frequent words); "conditional": p(t | s) = c(s,t) / c(s)
    score: Literal["dice", "conditional"] = "dice"
    split: Literal["train", "val"] = "train"
    limit: int | None = None  # the first N pairs only (None: all)

    def __post_init__(self) -> None:
        check_fields(self)
        positive(self, "per_source", "frequent", "limit")
