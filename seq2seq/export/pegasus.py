"""Export Pre-LN models to Hugging Face Pegasus (``to_hf_pegasus`` / ``export_hf_pegasus``).

``PegasusForConditionalGeneration`` is Marian's layout with pre-norm layers and a final
LayerNorm after each stack: exactly our Pre-LN model. The weight mapping and generation
config are shared with Marian (:mod:`seq2seq.export.hf`). Pegasus has one embedding table
for encoder and decoder, so it needs ``share_embeddings``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from seq2seq.config import DecodingConfig, ModelConfig
from seq2seq.export.common import refuse
from seq2seq.export.hf import common_config, layout_problems, load_into
from seq2seq.export.marian import save_hf
from seq2seq.model import Seq2Seq
from seq2seq.model.norms import norm_placement


def hf_pegasus_problems(arch: ModelConfig) -> list[str]:
    """Options of ``arch`` that PegasusForConditionalGeneration cannot represent."""
    problems = []
    placement = norm_placement(arch)
    if not placement.pre or not placement.final_norm:
        problems.append(f"model.norm_position={arch.norm_position!r} (Pegasus layers are "
                        "Pre-LN with a final norm; --to hf exports Post-LN models to Marian)")
    if not arch.share_embeddings:
        problems.append("model.share_embeddings=False (Pegasus has one embedding table for "
                        "encoder and decoder)")
    return problems + layout_problems("Pegasus", arch)


def hf_pegasus_config(arch: ModelConfig):
    """The ``PegasusConfig`` of our ``ModelConfig`` (raises ValueError if unrepresentable)."""
    from transformers import PegasusConfig

    refuse("hf-pegasus", hf_pegasus_problems(arch))
    return PegasusConfig(vocab_size=arch.tgt_vocab_size, **common_config(arch))


def to_hf_pegasus(model: Seq2Seq, decoding: DecodingConfig | None = None):
    """An equivalent ``PegasusForConditionalGeneration`` (eval mode, fp32) of ``model``."""
    from transformers import PegasusForConditionalGeneration

    hf_model = PegasusForConditionalGeneration(hf_pegasus_config(model.arch))
    return load_into("hf-pegasus", hf_model, model, decoding)


def export_hf_pegasus(ckpt: Any, out_dir: str | os.PathLike, overwrite: bool = False) -> Path:
    """``save_pretrained`` files plus, for a checkpoint, the MarianTokenizer files."""
    return save_hf("hf-pegasus", to_hf_pegasus, ckpt, out_dir, overwrite)
