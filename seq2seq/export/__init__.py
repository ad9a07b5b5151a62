"""Export a trained ``Seq2Seq`` to peer runtimes: one module per target.

* :mod:`seq2seq.export.marian`: Hugging Face ``MarianMTModel`` (``to_hf_marian``,
  ``export_hf_marian``); how our layout maps onto Marian's is explained there.
* :mod:`seq2seq.export.ctranslate2`: a CTranslate2 model folder (``to_ctranslate2``,
  optionally quantized).
* :mod:`seq2seq.export.common`: loading, the output folder, vocabularies.

Both targets compute exactly our network (same logits up to float rounding), so their
greedy/beam output can be compared token for token with ours. :func:`export` imports its
target lazily: ``import seq2seq.export`` needs neither transformers nor ctranslate2.
"""

from __future__ import annotations

import os
from pathlib import Path

FORMATS = ("ctranslate2", "hf-marian")


def export(
    ckpt_path: str | os.PathLike,
    to: str,
    output_dir: str | os.PathLike,
    quantization: str | None = None,
    overwrite: bool = False,
) -> Path:
    """Export checkpoint ``ckpt_path`` to ``to`` (``"ctranslate2"`` or ``"hf-marian"``)."""
    if to not in FORMATS:
        raise ValueError(f"export format {to!r} is not one of {list(FORMATS)}")
    if to == "hf-marian":
        if quantization is not None:
            raise ValueError("quantization is only supported for --to ctranslate2")
        from seq2seq.export.marian import export_hf_marian

        return export_hf_marian(ckpt_path, output_dir, overwrite=overwrite)
    from seq2seq.export.ctranslate2 import to_ctranslate2

    return to_ctranslate2(ckpt_path, output_dir, quantization, overwrite=overwrite)
