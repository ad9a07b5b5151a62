"""Export to Hugging Face Marian (``to_hf_marian`` / ``export_hf_marian``): Post-LN models.

MarianMTModel is a Post-LN, LayerNorm (eps 1e-5), sinusoidal Transformer; how our layout
maps onto it (a channel permutation, ``w_kv`` split) and the generation config written
with it: :mod:`seq2seq.export.hf`. ``scale_embedding=True`` gives our sqrt(d_model) scale;
``final_logits_bias`` is our output bias (zeros without one); ``decoder_start_token_id``
is our BOS, so ``generate`` starts like our search, and
``generate(max_new_tokens=N + 1, num_beams=1)`` equals our greedy with ``max_len = N``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from seq2seq.config import DecodingConfig, ModelConfig
from seq2seq.export.common import (
    load,
    prepare_dir,
    refuse,
    refuse_multilingual,
    source_path,
    tokenizer_states,
)
from seq2seq.export.hf import (  # noqa: F401  (channel_permutation, is_product: public here too)
    channel_permutation,
    common_config,
    is_product,
    layout_problems,
    load_into,
    write_tokenizer_files,
)
from seq2seq.model import Seq2Seq
from seq2seq.model.norms import norm_placement


def hf_marian_problems(arch: ModelConfig) -> list[str]:
    """Options of ``arch`` that MarianMTModel cannot represent (empty = exportable)."""
    problems = []
    placement = norm_placement(arch)
    if placement.pre or placement.final_norm:
        problems.append(
            f"model.norm_position={arch.norm_position!r} (Marian layers are Post-LN, no final "
            "norm; --to hf exports Pre-LN models to Pegasus)"
        )
    return problems + layout_problems("Marian", arch)


def hf_marian_config(arch: ModelConfig):
    """The ``MarianConfig`` of our ``ModelConfig`` (raises ValueError if unrepresentable)."""
    from transformers import MarianConfig

    refuse("hf-marian", hf_marian_problems(arch))
    return MarianConfig(
        vocab_size=arch.src_vocab_size,
        decoder_vocab_size=arch.tgt_vocab_size,
        share_encoder_decoder_embeddings=arch.share_embeddings,
        **common_config(arch),
    )


def to_hf_marian(model: Seq2Seq, decoding: DecodingConfig | None = None):
    """An equivalent ``transformers.MarianMTModel`` (eval mode, fp32) of ``model``.

    ``marian(input_ids=src, attention_mask=src != pad, decoder_input_ids=tgt_in).logits``
    equals ``model(src, tgt_in)``; ``generate`` starts from our BOS and stops on our EOS.
    Raises ValueError naming the option when the model cannot be represented.
    """
    from transformers import MarianMTModel

    return load_into("hf-marian", MarianMTModel(hf_marian_config(model.arch)), model, decoding)


def export_hf_marian(ckpt: Any, out_dir: str | os.PathLike, overwrite: bool = False) -> Path:
    """``MarianMTModel.save_pretrained`` files plus, for a checkpoint, the tokenizer files
    (:func:`seq2seq.export.hf.write_tokenizer_files`)."""
    return save_hf("hf-marian", to_hf_marian, ckpt, out_dir, overwrite)


def _follow_umask(out: Path) -> None:
    """The weights as ``open()`` would have made them: safetensors writes through a
    temporary file (mode 0o600) while every other file follows the umask."""
    from seq2seq.files import new_file_mode

    for p in out.iterdir():
        if is_product(p.name) and p.is_file() and not p.is_symlink():
            os.chmod(p, new_file_mode())


def save_hf(fmt: str, convert, ckpt: Any, out_dir: str | os.PathLike, overwrite: bool) -> Path:
    """Convert (validating before the output folder is touched), then save model and tokenizer."""
    import transformers  # noqa: F401  (missing package: fail before reading anything)

    model, ck = load(ckpt)
    refuse_multilingual(fmt, ck)
    hf_model = convert(model)
    out = prepare_dir(out_dir, overwrite, fmt, is_product, source_path(ckpt))
    hf_model.save_pretrained(out)
    _follow_umask(out)
    if tokenizer_states(ck):
        write_tokenizer_files(out, model, ck)
    return out
