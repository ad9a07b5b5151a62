"""Texts in, texts out: ``Translator`` (loading a model, translating texts), where a text is
cut into sentences and put back together (``segment``, ``passthrough``, ``paragraphs``),
results and their flags (``result``), and the "unsure" threshold (``calibration``). The
searches themselves (ids in, ids out) are in ``seq2seq.decoding``."""
