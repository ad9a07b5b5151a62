"""seq2seq: a small, correct and fast encoder-decoder Transformer for machine translation.

The public API, at the top level::

    from seq2seq import DecodingConfig, Translator

    translator = Translator.from_checkpoint("multi30k_de_en_tiny",  # a shipped model, or a path
                                            decoding=DecodingConfig(method="beam", beam_size=5))
    translator.translate(["Ein Hund rennt durch den Schnee."])

Each name is imported on first use (PEP 562 ``__getattr__``), so ``import seq2seq`` itself
costs nothing: torch loads with the first name that needs it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

# name -> the module that is its one home
_EXPORTS = {
    "Translator": "seq2seq.translation.translator",
    "TranslationResult": "seq2seq.translation.result",
    "load_checkpoint": "seq2seq.checkpoint",
    "CheckpointError": "seq2seq.checkpoint",
    "ModelConfig": "seq2seq.config",
    "DecodingConfig": "seq2seq.config",
    "DataConfig": "seq2seq.config",
    "TokenizerConfig": "seq2seq.config",
    "OptimConfig": "seq2seq.config",
    "ServeConfig": "seq2seq.config",
    "ConfigError": "seq2seq.config",
    "Seq2Seq": "seq2seq.model",
    "all_scores": "seq2seq.metrics",
    "plot_attention": "seq2seq.plotting",
}
__all__ = [  # the names of _EXPORTS, spelled out for linters and type checkers
    "__version__", "Translator", "TranslationResult", "load_checkpoint", "CheckpointError",
    "ModelConfig", "DecodingConfig", "DataConfig", "TokenizerConfig", "OptimConfig",
    "ServeConfig", "ConfigError", "Seq2Seq", "all_scores", "plot_attention",
]

if TYPE_CHECKING:  # for type checkers and editors; at run time __getattr__ imports
    from seq2seq.checkpoint import CheckpointError, load_checkpoint
    from seq2seq.config import (
        ConfigError,
        DataConfig,
        DecodingConfig,
        ModelConfig,
        OptimConfig,
        ServeConfig,
        TokenizerConfig,
    )
    from seq2seq.metrics import all_scores
    from seq2seq.model import Seq2Seq
    from seq2seq.plotting import plot_attention
    from seq2seq.translation.result import TranslationResult
    from seq2seq.translation.translator import Translator


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'seq2seq' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
