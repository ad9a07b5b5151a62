"""seq2seq: a small, correct and fast encoder-decoder Transformer for machine translation."""

from seq2seq.runtime import prepare_openmp as _prepare_openmp

_prepare_openmp()  # before anything imports torch: OpenMP reads its wait policy once

__version__ = "0.1.0"
