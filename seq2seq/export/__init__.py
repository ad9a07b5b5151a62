"""Export a trained ``Seq2Seq`` to peer runtimes: one module per target.

* :mod:`seq2seq.export.marian`: Hugging Face ``MarianMTModel`` for Post-LN models
  (``to_hf_marian``, ``export_hf_marian``); :mod:`seq2seq.export.pegasus`:
  ``PegasusForConditionalGeneration`` for Pre-LN ones; what both share (the weight
  mapping, the generation config, the tokenizer files): :mod:`seq2seq.export.hf`.
  ``--to hf`` picks the one that holds the model.
* :mod:`seq2seq.export.ctranslate2`: a CTranslate2 model folder (``to_ctranslate2``,
  optionally quantized).
* :mod:`seq2seq.export.argos`: an Argos Translate package (``to_argos``, a ``.argosmodel``
  file: the CTranslate2 folder, the joint SentencePiece model, a blank spaCy pipeline),
  which LibreTranslate serves.
* :mod:`seq2seq.export.common`: loading, the output folder, vocabularies.

Both targets compute exactly our network (same logits up to float rounding), so their
greedy/beam output can be compared token for token with ours. :func:`export` imports its
target lazily: ``import seq2seq.export`` needs neither transformers nor ctranslate2.
"""

from __future__ import annotations

import os
from pathlib import Path

FORMATS = ("ctranslate2", "argos", "hf", "hf-marian", "hf-pegasus")


def export(
    ckpt_path: str | os.PathLike,
    to: str,
    output_dir: str | os.PathLike,
    quantization: str | None = None,
    overwrite: bool = False,
) -> Path:
    """Export checkpoint ``ckpt_path`` to ``to`` (one of :data:`FORMATS`; ``"hf"``: Marian
    for a Post-LN model, Pegasus for a Pre-LN one; ``"argos"``: ``output_dir`` is the
    ``.argosmodel`` file)."""
    if to not in FORMATS:
        raise ValueError(f"export format {to!r} is not one of {list(FORMATS)}")
    if to.startswith("hf"):
        if quantization is not None:
            raise ValueError("quantization is only supported for --to ctranslate2")
        from seq2seq.export.marian import export_hf_marian
        from seq2seq.export.pegasus import export_hf_pegasus

        if to == "hf":
            to = hf_format(ckpt_path)
        save = export_hf_pegasus if to == "hf-pegasus" else export_hf_marian
        return save(ckpt_path, output_dir, overwrite=overwrite)
    if to == "argos":
        from seq2seq.export.argos import to_argos

        return to_argos(ckpt_path, output_dir, quantization, overwrite=overwrite)
    from seq2seq.export.ctranslate2 import to_ctranslate2

    return to_ctranslate2(ckpt_path, output_dir, quantization, overwrite=overwrite)


def hf_format(ckpt_or_model) -> str:
    """The HF architecture that holds the model: ``hf-pegasus`` (Pre-LN) or ``hf-marian``."""
    from seq2seq.export.common import load
    from seq2seq.model.norms import norm_placement

    model, _ = load(ckpt_or_model)
    return "hf-pegasus" if norm_placement(model.arch).pre else "hf-marian"


def to_hf(model, decoding=None):
    """The equivalent HF model of a ``Seq2Seq``: ``MarianMTModel`` (Post-LN) or
    ``PegasusForConditionalGeneration`` (Pre-LN); ValueError naming what neither holds."""
    from seq2seq.export.marian import to_hf_marian
    from seq2seq.export.pegasus import to_hf_pegasus

    convert = to_hf_pegasus if hf_format(model) == "hf-pegasus" else to_hf_marian
    return convert(model, decoding)
