"""Decoding: ids in, ids out. Searches over ``Seq2Seq.encode``/``decode`` + the cache
(greedy, sampling, beam), the output rules they share, ensembles and the vocabulary
shortlist; texts in, texts out is ``seq2seq.translation``."""
