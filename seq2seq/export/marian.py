"""Export to Hugging Face Marian (``to_hf_marian`` / ``export_hf_marian``).

The exported model computes exactly our network (same logits up to float rounding), so
its greedy/beam output can be compared token for token with ours.

MarianMTModel is a Post-LN, LayerNorm (eps 1e-5), sinusoidal Transformer whose layout
differs from ours in two places, both handled here:

* Its fixed sinusoidal table is ``[sin | cos]`` (halves) where ours interleaves
  ``sin, cos`` on even/odd channels. The table is a non-learnable buffer that Marian
  recomputes on load, so we cannot overwrite it; instead every weight touching the
  residual stream is permuted by ``P = [0, 2, 4, ..., 1, 3, 5, ...]`` (embedding
  columns, input columns of W^Q/W^K/W^V/W1, output rows and biases of W^O/W2, LayerNorm
  weights and biases). LayerNorm is permutation-equivariant and the tied output layer
  uses the same permuted table, so the network is exactly equivalent.
* Our fused ``w_kv`` (K rows then V rows) is split into ``k_proj``/``v_proj``.

``scale_embedding=True`` gives the same sqrt(d_model) scale; ``final_logits_bias`` is
zero (we have no output bias); ``decoder_start_token_id`` is our BOS, so ``generate``
starts from BOS like our search. The generation config mirrors our search rules:
``suppress_tokens=[pad, bos]`` (never outputs) and ``forced_eos_token_id=eos`` (the
last allowed step emits EOS), so ``generate(max_new_tokens=N + 1, num_beams=1)`` equals
our greedy with ``max_len = N``.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from seq2seq.config import ModelConfig
from seq2seq.export.common import (
    load,
    prepare_dir,
    refuse,
    source_path,
    tokenizer_states,
    vocabularies,
)
from seq2seq.model import Seq2Seq
from seq2seq.model.norms import norm_placement
from seq2seq.specials import UNK_ID

# Files ``export_hf_marian`` writes (save_pretrained may shard the weights).
_PRODUCTS = {
    "config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json",
    "source.spm", "target.spm", "vocab.json", "target_vocab.json", "tokenizer_config.json",
}
_SHARD = re.compile(r"model-\d+-of-\d+\.safetensors")


def is_product(name: str) -> bool:
    """Whether ``name`` is a file :func:`export_hf_marian` writes (``--force`` replaces it)."""
    return name in _PRODUCTS or _SHARD.fullmatch(name) is not None


def channel_permutation(d_model: int) -> Tensor:
    """``P`` with ``marian[..., c] = ours[..., P[c]]``: even channels (sin) then odd (cos)."""
    return torch.cat((torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)))


# ---------------------------------------------------------------- config
def hf_marian_problems(arch: ModelConfig) -> list[str]:
    """Options of ``arch`` that MarianMTModel cannot represent (empty = exportable)."""
    problems = []
    placement = norm_placement(arch)
    if placement.pre or placement.final_norm:
        problems.append(
            f"model.norm_position={arch.norm_position!r} (Marian layers are Post-LN, no final norm)"
        )
    if arch.norm != "layernorm":
        problems.append(f"model.norm={arch.norm!r} (Marian uses LayerNorm)")
    if arch.norm_eps != 1e-5:
        problems.append(f"model.norm_eps={arch.norm_eps!r} (Marian's LayerNorm eps is fixed at 1e-5)")
    if arch.positional != "sinusoidal":
        problems.append(
            f"model.positional={arch.positional!r} (Marian has fixed sinusoidal positions only)"
        )
    if arch.head_dim_k * arch.n_heads != arch.d_model:
        problems.append(f"model.d_k={arch.d_k!r} (Marian needs d_k = d_model / n_heads)")
    if arch.head_dim_v * arch.n_heads != arch.d_model:
        problems.append(f"model.d_v={arch.d_v!r} (Marian needs d_v = d_model / n_heads)")
    return problems


def hf_marian_config(arch: ModelConfig):
    """The ``MarianConfig`` of our ``ModelConfig`` (raises ValueError if unrepresentable)."""
    from transformers import MarianConfig

    refuse("hf-marian", hf_marian_problems(arch))
    return MarianConfig(
        vocab_size=arch.src_vocab_size,
        decoder_vocab_size=arch.tgt_vocab_size,
        share_encoder_decoder_embeddings=arch.share_embeddings,
        tie_word_embeddings=arch.tie_output,
        max_position_embeddings=arch.max_positions,
        d_model=arch.d_model,
        encoder_layers=arch.encoder_layers,
        decoder_layers=arch.decoder_layers,
        encoder_attention_heads=arch.n_heads,
        decoder_attention_heads=arch.n_heads,
        encoder_ffn_dim=arch.d_ff,
        decoder_ffn_dim=arch.d_ff,
        activation_function=arch.activation,  # "relu" | "gelu" (exact erf), as ours
        dropout=arch.dropout,
        attention_dropout=arch.attention_dropout,
        activation_dropout=arch.activation_dropout,
        scale_embedding=True,
        pad_token_id=arch.pad_id,
        bos_token_id=arch.bos_id,
        eos_token_id=arch.eos_id,
        decoder_start_token_id=arch.bos_id,
        forced_eos_token_id=arch.eos_id,
    )


def _generation_config(arch: ModelConfig):
    """Our search rules: pad and BOS are never outputs; at the length limit only EOS."""
    from transformers import GenerationConfig

    return GenerationConfig(
        decoder_start_token_id=arch.bos_id,
        bos_token_id=arch.bos_id,
        eos_token_id=arch.eos_id,
        pad_token_id=arch.pad_id,
        suppress_tokens=[arch.pad_id, arch.bos_id],
        forced_eos_token_id=arch.eos_id,
        num_beams=1,
        do_sample=False,
    )


# ---------------------------------------------------------------- weights
class _MarianState:
    """Our weights renamed and channel-permuted into MarianMTModel's state-dict layout."""

    def __init__(self, d_model: int):
        self.P = channel_permutation(d_model)
        self.sd: dict[str, Tensor] = {}

    def put(self, name: str, t: Tensor) -> None:
        self.sd[name] = t.detach().clone().contiguous()

    def linear_in(self, name: str, lin: nn.Linear, rows: slice = slice(None)) -> None:
        """A Linear reading the residual stream: permute its input columns."""
        self.put(f"{name}.weight", lin.weight[rows][:, self.P])
        self.put(f"{name}.bias", lin.bias[rows])

    def linear_out(self, name: str, lin: nn.Linear) -> None:
        """A Linear writing the residual stream: permute its output rows."""
        self.put(f"{name}.weight", lin.weight[self.P])
        self.put(f"{name}.bias", lin.bias[self.P])

    def norm(self, name: str, ln: nn.Module) -> None:
        self.put(f"{name}.weight", ln.weight[self.P])
        self.put(f"{name}.bias", ln.bias[self.P])

    def attention(self, name: str, mha) -> None:
        hk = mha.h * mha.d_k
        self.linear_in(f"{name}.q_proj", mha.w_q)
        self.linear_in(f"{name}.k_proj", mha.w_kv, slice(0, hk))
        self.linear_in(f"{name}.v_proj", mha.w_kv, slice(hk, None))
        self.linear_out(f"{name}.out_proj", mha.w_o)

    def ffn(self, name: str, ff) -> None:
        self.linear_in(f"{name}.fc1", ff.w1)
        self.linear_out(f"{name}.fc2", ff.w2)

    def embeddings(self, model: Seq2Seq) -> None:
        src_tokens = model.src_embed.tokens.weight[:, self.P]
        tgt_tokens = model.tgt_embed.tokens.weight[:, self.P]
        if model.arch.share_embeddings:
            self.put("model.shared.weight", src_tokens)
        self.put("model.encoder.embed_tokens.weight", src_tokens)
        self.put("model.decoder.embed_tokens.weight", tgt_tokens)
        self.put("lm_head.weight", model.output.weight[:, self.P])


def _hf_state_dict(model: Seq2Seq) -> dict[str, Tensor]:
    """MarianMTModel's state dict of ``model`` (less its own positional buffers)."""
    state = _MarianState(model.arch.d_model)
    state.embeddings(model)
    for i, layer in enumerate(model.encoder.layers):
        p = f"model.encoder.layers.{i}"
        state.attention(f"{p}.self_attn", layer.self_attn)
        state.norm(f"{p}.self_attn_layer_norm", layer.attn_block.norm)
        state.ffn(p, layer.ff)
        state.norm(f"{p}.final_layer_norm", layer.ff_block.norm)
    for i, layer in enumerate(model.decoder.layers):
        p = f"model.decoder.layers.{i}"
        state.attention(f"{p}.self_attn", layer.self_attn)
        state.norm(f"{p}.self_attn_layer_norm", layer.self_block.norm)
        state.attention(f"{p}.encoder_attn", layer.cross_attn)
        state.norm(f"{p}.encoder_attn_layer_norm", layer.cross_block.norm)
        state.ffn(p, layer.ff)
        state.norm(f"{p}.final_layer_norm", layer.ff_block.norm)
    return state.sd


# ---------------------------------------------------------------- model and files
def to_hf_marian(model: Seq2Seq):
    """An equivalent ``transformers.MarianMTModel`` (eval mode, fp32) of ``model``.

    ``marian(input_ids=src, attention_mask=src != pad, decoder_input_ids=tgt_in).logits``
    equals ``model(src, tgt_in)``; ``generate`` starts from our BOS and stops on our EOS.
    Raises ValueError naming the option when the model cannot be represented.
    """
    from transformers import MarianMTModel

    arch = model.arch
    marian = MarianMTModel(hf_marian_config(arch))
    missing, unexpected = marian.load_state_dict(_hf_state_dict(model), strict=False)
    # Positional tables and the (zero) logits bias are Marian's own buffers.
    missing = [
        k for k in missing
        if not k.endswith("embed_positions.weight") and k != "final_logits_bias"
    ]
    if missing or unexpected:
        raise RuntimeError(
            f"hf-marian mapping is incomplete: missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    with torch.no_grad():
        marian.final_logits_bias.zero_()
    marian.generation_config = _generation_config(arch)
    return marian.eval()


def export_hf_marian(
    ckpt: Any, out_dir: str | os.PathLike, overwrite: bool = False
) -> Path:
    """Save ``MarianMTModel.save_pretrained`` files, plus (for a checkpoint) the
    SentencePiece models as ``source.spm``/``target.spm`` and ``vocab.json`` (piece -> our
    id; ``target_vocab.json`` too when the vocabularies differ) so ``MarianTokenizer`` loads
    from the same folder. Note ``MarianTokenizer`` appends ``</s>`` to every sequence and
    may Moses-normalize punctuation (if ``sacremoses`` is installed)."""
    import transformers  # noqa: F401  (missing package: fail before reading anything)

    model, ck = load(ckpt)
    marian = to_hf_marian(model)  # validate before touching the output folder
    out = prepare_dir(out_dir, overwrite, "hf-marian", is_product, source_path(ckpt))
    marian.save_pretrained(out)
    if tokenizer_states(ck):
        _write_tokenizer_files(out, model, ck)
    return out


def _write_tokenizer_files(out: Path, model: Seq2Seq, ck: dict[str, Any]) -> None:
    """What ``MarianTokenizer.from_pretrained(out)`` reads."""
    toks = tokenizer_states(ck)
    src_vocab, tgt_vocab = vocabularies(model, ck)
    (out / "source.spm").write_bytes(bytes(toks["src"]["model"]))
    (out / "target.spm").write_bytes(bytes(toks["tgt"]["model"]))
    separate = src_vocab != tgt_vocab
    _write_json(out / "vocab.json", {p: i for i, p in enumerate(src_vocab)}, indent=0)
    if separate:
        _write_json(out / "target_vocab.json", {p: i for i, p in enumerate(tgt_vocab)}, indent=0)
    arch = model.arch
    _write_json(out / "tokenizer_config.json", {
        "tokenizer_class": "MarianTokenizer",
        "source_lang": ck["seq2seq"].get("src_lang"),
        "target_lang": ck["seq2seq"].get("tgt_lang"),
        "unk_token": src_vocab[UNK_ID],
        "eos_token": tgt_vocab[arch.eos_id],
        "pad_token": tgt_vocab[arch.pad_id],
        "model_max_length": arch.max_positions,
        "separate_vocabs": separate,
    }, indent=2)


def _write_json(path: Path, obj: Any, indent: int) -> None:
    path.write_text(json.dumps(obj, ensure_ascii=False, indent=indent), encoding="utf-8")
