"""``seq2seq-calibrate``'s settings (``CalibrationConfig``): where a model's "unsure"
threshold comes from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from seq2seq.fields import ConfigError, check_fields, positive

# Multi30k splits a threshold may be calibrated on (never train: the model has seen it)
CALIBRATION_SPLITS = ("val", "test_2016_flickr", "test_2017_flickr", "test_2017_mscoco")


@dataclass
class CalibrationConfig:
    """The threshold below which an output is flagged "unsure": the ``quantile`` of the
    confidences of the model's own greedy translations of a held-out Multi30k ``split``."""

    split: Literal["val", "test_2016_flickr", "test_2017_flickr", "test_2017_mscoco"] = "val"
    # share of in-domain sentences flagged: 0.02 flags 1 caption in 50 (a false alarm) and
    # most sentences unlike the captions (data/results/unsure_rates.json)
    quantile: float = 0.02
    limit: int | None = None  # the split's first N lines only (None: all)

    def __post_init__(self) -> None:
        check_fields(self)  # NaN and inf are refused here
        positive(self, "limit")
        if not 0.0 < self.quantile < 0.5:  # at 0.5 and above, most in-domain output is "unsure"
            raise ConfigError(f"CalibrationConfig.quantile must be in (0, 0.5), got {self.quantile}")
