"""seq2seq: a small, correct and fast encoder-decoder Transformer for machine translation."""

__version__ = "0.1.0"
