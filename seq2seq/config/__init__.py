"""Typed configuration: the only place defaults live.

Each section is a dataclass validated in ``__post_init__``; errors name the field:
``model`` (the network, the optimizer), ``data`` (corpus, tokenizer, batching),
``decoding`` (search; ``LoadConfig``: how a model is prepared when it loads), ``serve`` (the server), ``calibration`` (the "unsure" threshold), ``shortlist`` (the
vocabulary shortlist's table).
YAML round trip: ``to_dict``/``from_dict`` (unknown keys are refused by name).
"""

from seq2seq.config.calibration import CALIBRATION_SPLITS, CalibrationConfig
from seq2seq.config.data import DataConfig, TokenizerConfig
from seq2seq.config.decoding import MAX_BEAM, DecodingConfig, LoadConfig
from seq2seq.config.model import (
    Activation,
    ModelConfig,
    Norm,
    NormPosition,
    OptimConfig,
    Positional,
)
from seq2seq.config.serve import MAX_WINDOW_MS, ServeConfig
from seq2seq.config.shortlist import ShortlistConfig
from seq2seq.fields import ConfigError, from_dict, to_dict

__all__ = [
    "CALIBRATION_SPLITS", "MAX_BEAM", "MAX_WINDOW_MS", "Activation", "CalibrationConfig",
    "ConfigError", "DataConfig", "DecodingConfig", "LoadConfig", "ModelConfig", "Norm", "NormPosition",
    "OptimConfig", "Positional", "ServeConfig", "ShortlistConfig", "TokenizerConfig",
    "from_dict", "to_dict",
]
