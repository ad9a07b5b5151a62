"""Decoding: searches over ``Seq2Seq.encode``/``decode`` + the cache, and ``Translator``
(texts in, texts out)."""
