"""Export a trained ``Seq2Seq`` to peer runtimes: Hugging Face Marian and CTranslate2.

Both targets compute exactly our network (same logits up to float rounding), so their
greedy/beam output can be compared token for token with ours.

Hugging Face Marian (``to_hf_marian`` / ``export_hf_marian``)
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

CTranslate2 (``to_ctranslate2``)
    Built directly from ``ctranslate2.specs`` (not the Marian converter, which drops the
    last vocabulary row and starts the decoder from a zero embedding). Our sinusoidal (or
    learned) table is written as ``position_encodings`` so no channel permutation is
    needed; Pre-LN maps to ``pre_norm=True`` with the stack's final norm, RMSNorm to
    ``rms_norm=True``, RoPE to ``rotary_dim=0, rotary_interleave=True`` on self-attention
    only. Tokens are strings: the vocabulary is the SentencePiece pieces (ids = our ids);
    the decoder starts from the BOS piece (``decoder_start_token``) and stops on EOS.
    CTranslate2 adds nothing to the source (no BOS/EOS): pass exactly the pieces our
    encoder sees.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from seq2seq.config import ModelConfig
from seq2seq.model import Seq2Seq
from seq2seq.specials import UNK_ID

FORMATS = ("ctranslate2", "hf-marian")
# What CTranslate2 itself accepts; the CLI offers int8, int16 and float16.
CT2_QUANTIZATIONS = (
    "int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16",
    "float32",
)


# ---------------------------------------------------------------- helpers
def _load(ckpt_or_model: Any) -> tuple[Seq2Seq, dict[str, Any] | None]:
    """A model in eval mode and the checkpoint dict (None when given a bare model)."""
    from seq2seq.checkpoint import build_model, load_checkpoint

    if isinstance(ckpt_or_model, Seq2Seq):
        return ckpt_or_model.eval(), None
    if isinstance(ckpt_or_model, (str, os.PathLike)):
        ckpt_or_model = load_checkpoint(ckpt_or_model)
    if isinstance(ckpt_or_model, dict):
        return build_model(ckpt_or_model), ckpt_or_model
    raise TypeError(
        f"expected a Seq2Seq, a checkpoint dict or a checkpoint path, got {type(ckpt_or_model).__name__}"
    )


def _refuse(fmt: str, problems: list[str]) -> None:
    if problems:
        raise ValueError(f"{fmt} cannot represent " + "; ".join(problems))


def _prepare_dir(out_dir: str | os.PathLike, overwrite: bool) -> Path:
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"output {out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise ValueError(f"output directory {out} is not empty (use overwrite/--force)")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    return out


def _np(t: Tensor):
    """A float32 numpy *copy*: CTranslate2's quantizer scales arrays in place, which would
    otherwise write through to the model's own parameters."""
    return t.detach().to(device="cpu", dtype=torch.float32).numpy().copy()


def channel_permutation(d_model: int) -> Tensor:
    """``P`` with ``marian[..., c] = ours[..., P[c]]``: even channels (sin) then odd (cos)."""
    return torch.cat((torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)))


# ---------------------------------------------------------------- vocabularies
def pieces_from_state(state: dict[str, Any]) -> list[str]:
    """The SentencePiece pieces (index = id) of a tokenizer state ``{"model": bytes, ...}``."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_proto=bytes(state["model"]))
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())]


def default_vocabulary(size: int, arch: ModelConfig) -> list[str]:
    """Placeholder token strings for a model without tokenizers: ``<pad> <unk> <s> </s>``
    at their ids and ``<id{i}>`` elsewhere, so ``tokens = [vocab[i] for i in ids]``."""
    vocab = [f"<id{i}>" for i in range(size)]
    names = {UNK_ID: "<unk>", arch.pad_id: "<pad>", arch.bos_id: "<s>", arch.eos_id: "</s>"}
    for i, name in names.items():
        if i < size:
            vocab[i] = name
    return vocab


def _fit_vocabulary(pieces: Sequence[str], size: int, side: str) -> list[str]:
    """Pieces of exactly ``size`` unique strings (extra model rows get ``<extra{i}>``)."""
    pieces = list(pieces)
    if len(pieces) > size:
        raise ValueError(
            f"{side} tokenizer has {len(pieces)} pieces but model.{side}_vocab_size={size}"
        )
    taken = set(pieces)
    for i in range(len(pieces), size):
        name = f"<extra{i}>"
        while name in taken:
            name = f"<{name}>"
        pieces.append(name)
        taken.add(name)
    seen: dict[str, int] = {}
    for i, p in enumerate(pieces):
        if p in seen:
            raise ValueError(
                f"{side} vocabulary has the piece {p!r} twice (ids {seen[p]} and {i}); "
                "token strings must be unique"
            )
        seen[p] = i
    return pieces


def vocabularies(
    model: Seq2Seq, ckpt: dict[str, Any] | None = None
) -> tuple[list[str], list[str]]:
    """Source and target token strings (index = id): the checkpoint's SentencePiece pieces,
    or :func:`default_vocabulary` when there is no checkpoint or it has no tokenizers."""
    arch = model.arch
    toks = (ckpt or {}).get("seq2seq", {}).get("tokenizers")
    if toks:
        src = _fit_vocabulary(pieces_from_state(toks["src"]), arch.src_vocab_size, "src")
        tgt = _fit_vocabulary(pieces_from_state(toks["tgt"]), arch.tgt_vocab_size, "tgt")
    else:
        src = default_vocabulary(arch.src_vocab_size, arch)
        tgt = default_vocabulary(arch.tgt_vocab_size, arch)
    return src, tgt


# ---------------------------------------------------------------- Hugging Face Marian
def hf_marian_problems(arch: ModelConfig) -> list[str]:
    """Options of ``arch`` that MarianMTModel cannot represent (empty = exportable)."""
    problems = []
    if arch.norm_position != "post":
        problems.append(f"model.norm_position={arch.norm_position!r} (Marian layers are Post-LN)")
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

    _refuse("hf-marian", hf_marian_problems(arch))
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


def _hf_state_dict(model: Seq2Seq) -> dict[str, Tensor]:
    """Our weights renamed and channel-permuted into MarianMTModel's state-dict layout."""
    arch = model.arch
    P = channel_permutation(arch.d_model)
    sd: dict[str, Tensor] = {}

    def put(name: str, t: Tensor) -> None:
        sd[name] = t.detach().clone().contiguous()

    def linear_in(name: str, lin: nn.Linear, rows: slice = slice(None)) -> None:
        """A Linear reading the residual stream: permute its input columns."""
        put(f"{name}.weight", lin.weight[rows][:, P])
        put(f"{name}.bias", lin.bias[rows])

    def linear_out(name: str, lin: nn.Linear) -> None:
        """A Linear writing the residual stream: permute its output rows."""
        put(f"{name}.weight", lin.weight[P])
        put(f"{name}.bias", lin.bias[P])

    def norm(name: str, ln: nn.Module) -> None:
        put(f"{name}.weight", ln.weight[P])
        put(f"{name}.bias", ln.bias[P])

    def attention(name: str, mha) -> None:
        hk = mha.h * mha.d_k
        linear_in(f"{name}.q_proj", mha.w_q)
        linear_in(f"{name}.k_proj", mha.w_kv, slice(0, hk))
        linear_in(f"{name}.v_proj", mha.w_kv, slice(hk, None))
        linear_out(f"{name}.out_proj", mha.w_o)

    def ffn(name: str, ff) -> None:
        linear_in(f"{name}.fc1", ff.w1)
        linear_out(f"{name}.fc2", ff.w2)

    src_tokens = model.src_embed.tokens.weight[:, P]
    tgt_tokens = model.tgt_embed.tokens.weight[:, P]
    if arch.share_embeddings:
        put("model.shared.weight", src_tokens)
        put("model.encoder.embed_tokens.weight", src_tokens)
        put("model.decoder.embed_tokens.weight", src_tokens)
    else:
        put("model.encoder.embed_tokens.weight", src_tokens)
        put("model.decoder.embed_tokens.weight", tgt_tokens)
    put("lm_head.weight", model.output.weight[:, P])
    for i, layer in enumerate(model.encoder.layers):
        p = f"model.encoder.layers.{i}"
        attention(f"{p}.self_attn", layer.self_attn)
        norm(f"{p}.self_attn_layer_norm", layer.attn_block.norm)
        ffn(p, layer.ff)
        norm(f"{p}.final_layer_norm", layer.ff_block.norm)
    for i, layer in enumerate(model.decoder.layers):
        p = f"model.decoder.layers.{i}"
        attention(f"{p}.self_attn", layer.self_attn)
        norm(f"{p}.self_attn_layer_norm", layer.self_block.norm)
        attention(f"{p}.encoder_attn", layer.cross_attn)
        norm(f"{p}.encoder_attn_layer_norm", layer.cross_block.norm)
        ffn(p, layer.ff)
        norm(f"{p}.final_layer_norm", layer.ff_block.norm)
    return sd


def to_hf_marian(model: Seq2Seq):
    """An equivalent ``transformers.MarianMTModel`` (eval mode, fp32) of ``model``.

    ``marian(input_ids=src, attention_mask=src != pad, decoder_input_ids=tgt_in).logits``
    equals ``model(src, tgt_in)``; ``generate`` starts from our BOS and stops on our EOS.
    Raises ValueError naming the option when the model cannot be represented.
    """
    from transformers import GenerationConfig, MarianMTModel

    arch = model.arch
    hf_cfg = hf_marian_config(arch)
    marian = MarianMTModel(hf_cfg)
    state = _hf_state_dict(model)
    missing, unexpected = marian.load_state_dict(state, strict=False)
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
    marian.generation_config = GenerationConfig(
        decoder_start_token_id=arch.bos_id,
        bos_token_id=arch.bos_id,
        eos_token_id=arch.eos_id,
        pad_token_id=arch.pad_id,
        # Our search rules: pad and BOS are never outputs; at the length limit only EOS.
        suppress_tokens=[arch.pad_id, arch.bos_id],
        forced_eos_token_id=arch.eos_id,
        num_beams=1,
        do_sample=False,
    )
    return marian.eval()


def export_hf_marian(
    ckpt: Any, out_dir: str | os.PathLike, overwrite: bool = False
) -> Path:
    """Save ``MarianMTModel.save_pretrained`` files, plus (for a checkpoint) the
    SentencePiece models as ``source.spm``/``target.spm`` and ``vocab.json`` (piece -> our
    id; ``target_vocab.json`` too when the vocabularies differ) so ``MarianTokenizer`` loads
    from the same folder. Note ``MarianTokenizer`` appends ``</s>`` to every sequence and
    may Moses-normalize punctuation (if ``sacremoses`` is installed)."""
    model, ck = _load(ckpt)
    marian = to_hf_marian(model)  # validate before touching the output folder
    out = _prepare_dir(out_dir, overwrite)
    marian.save_pretrained(out)
    toks = (ck or {}).get("seq2seq", {}).get("tokenizers")
    if toks:
        src_vocab, tgt_vocab = vocabularies(model, ck)
        (out / "source.spm").write_bytes(bytes(toks["src"]["model"]))
        (out / "target.spm").write_bytes(bytes(toks["tgt"]["model"]))
        separate = src_vocab != tgt_vocab
        (out / "vocab.json").write_text(
            json.dumps({p: i for i, p in enumerate(src_vocab)}, ensure_ascii=False, indent=0)
        )
        tok_cfg = {
            "tokenizer_class": "MarianTokenizer",
            "source_lang": ck["seq2seq"].get("src_lang"),
            "target_lang": ck["seq2seq"].get("tgt_lang"),
            "unk_token": src_vocab[UNK_ID],
            "eos_token": tgt_vocab[model.arch.eos_id],
            "pad_token": tgt_vocab[model.arch.pad_id],
            "model_max_length": model.arch.max_positions,
            "separate_vocabs": separate,
        }
        if separate:
            (out / "target_vocab.json").write_text(
                json.dumps({p: i for i, p in enumerate(tgt_vocab)}, ensure_ascii=False, indent=0)
            )
        (out / "tokenizer_config.json").write_text(json.dumps(tok_cfg, ensure_ascii=False, indent=2))
    return out


# ---------------------------------------------------------------- CTranslate2
def ct2_problems(arch: ModelConfig) -> list[str]:
    """Options of ``arch`` that CTranslate2's Transformer spec cannot represent."""
    problems = []
    if arch.head_dim_k != arch.head_dim_v:
        problems.append(
            f"model.d_k={arch.head_dim_k} != model.d_v={arch.head_dim_v} "
            "(CTranslate2 has one head_dim for queries, keys and values)"
        )
    return problems


def ct2_spec(
    model: Seq2Seq,
    src_vocab: Sequence[str],
    tgt_vocab: Sequence[str],
    add_source_bos: bool = False,
    add_source_eos: bool = False,
):
    """A validated ``ctranslate2.specs.TransformerSpec`` holding ``model``'s weights.

    ``add_source_bos/eos``: let CTranslate2 wrap each source in ``<s> .. </s>`` itself
    (set them to match how our data pipeline builds encoder inputs)."""
    from ctranslate2.specs import common_spec, transformer_spec

    arch = model.arch
    _refuse("ctranslate2", ct2_problems(arch))
    src_vocab = _fit_vocabulary(src_vocab, arch.src_vocab_size, "src")
    tgt_vocab = _fit_vocabulary(tgt_vocab, arch.tgt_vocab_size, "tgt")

    pre = arch.norm_position == "pre"
    act = common_spec.Activation.RELU if arch.activation == "relu" else common_spec.Activation.GELU
    rope = arch.positional == "rope"
    head_dim = arch.head_dim_k if arch.head_dim_k * arch.n_heads != arch.d_model else None
    common = dict(
        pre_norm=pre,
        activation=act,
        rms_norm=arch.norm == "rmsnorm",
        head_dim=head_dim,
        **(dict(rotary_dim=0, rotary_interleave=True, rotary_base=10000.0) if rope else {}),
    )
    encoder = transformer_spec.TransformerEncoderSpec(arch.encoder_layers, arch.n_heads, **common)
    decoder = transformer_spec.TransformerDecoderSpec(arch.decoder_layers, arch.n_heads, **common)
    spec = transformer_spec.TransformerSpec(encoder, decoder)

    def linear(s, lin: nn.Linear, rows: slice = slice(None)) -> None:
        s.weight = _np(lin.weight[rows])
        if lin.bias is not None:
            s.bias = _np(lin.bias[rows])

    def norm(s, module: nn.Module) -> None:
        s.gamma = _np(module.weight)
        if arch.norm == "layernorm":
            s.beta = _np(module.bias)

    def fused_qkv(s, mha) -> None:
        s.weight = _np(torch.cat((mha.w_q.weight, mha.w_kv.weight)))
        s.bias = _np(torch.cat((mha.w_q.bias, mha.w_kv.bias)))

    def embeddings(stack_spec, embed) -> None:
        emb = stack_spec.embeddings[0] if isinstance(stack_spec.embeddings, list) else stack_spec.embeddings
        emb.weight = _np(embed.tokens.weight)
        stack_spec.scale_embeddings = True  # multiply by sqrt(d_model), as ours
        if rope:
            return
        stack_spec.position_encodings.encodings = _np(embed.positions)

    def self_attention_and_ffn(s, layer, attn_norm) -> None:
        """The sublayers encoder and decoder layers share."""
        fused_qkv(s.self_attention.linear[0], layer.self_attn)
        linear(s.self_attention.linear[1], layer.self_attn.w_o)
        norm(s.self_attention.layer_norm, attn_norm)
        linear(s.ffn.linear_0, layer.ff.w1)
        linear(s.ffn.linear_1, layer.ff.w2)
        norm(s.ffn.layer_norm, layer.ff_block.norm)

    embeddings(encoder, model.src_embed)
    for s, layer in zip(encoder.layer, model.encoder.layers):
        self_attention_and_ffn(s, layer, layer.attn_block.norm)
    if pre:
        norm(encoder.layer_norm, model.encoder.final_norm)

    embeddings(decoder, model.tgt_embed)
    for s, layer in zip(decoder.layer, model.decoder.layers):
        self_attention_and_ffn(s, layer, layer.self_block.norm)
        linear(s.attention.linear[0], layer.cross_attn.w_q)
        linear(s.attention.linear[1], layer.cross_attn.w_kv)  # K rows then V rows, as CT2's
        linear(s.attention.linear[2], layer.cross_attn.w_o)
        norm(s.attention.layer_norm, layer.cross_block.norm)
    if pre:
        norm(decoder.layer_norm, model.decoder.final_norm)
    decoder.projection.weight = _np(model.output.weight)

    spec.register_source_vocabulary(list(src_vocab))
    spec.register_target_vocabulary(list(tgt_vocab))
    spec.config.unk_token = src_vocab[UNK_ID] if UNK_ID < len(src_vocab) else "<unk>"
    spec.config.bos_token = tgt_vocab[arch.bos_id]
    spec.config.eos_token = tgt_vocab[arch.eos_id]
    spec.config.decoder_start_token = tgt_vocab[arch.bos_id]
    spec.config.add_source_bos = bool(add_source_bos)
    spec.config.add_source_eos = bool(add_source_eos)
    spec.config.layer_norm_epsilon = float(arch.norm_eps)
    spec.validate()
    return spec


def to_ctranslate2(
    ckpt_or_model: Any,
    out_dir: str | os.PathLike,
    quantization: str | None = None,
    *,
    src_vocab: Sequence[str] | None = None,
    tgt_vocab: Sequence[str] | None = None,
    add_source_bos: bool = False,
    add_source_eos: bool = False,
    overwrite: bool = False,
) -> Path:
    """Write a CTranslate2 model directory for a checkpoint (path or dict) or a ``Seq2Seq``.

    Vocabularies default to the checkpoint's SentencePiece pieces, or (bare model)
    :func:`default_vocabulary`. ``quantization``: None (float32) or one of
    :data:`CT2_QUANTIZATIONS`. Raises ValueError naming any option CTranslate2 lacks.
    """
    if quantization is not None and quantization not in CT2_QUANTIZATIONS:
        raise ValueError(
            f"quantization={quantization!r} is not one of {list(CT2_QUANTIZATIONS)}"
        )
    model, ckpt = _load(ckpt_or_model)
    if src_vocab is None or tgt_vocab is None:
        default_src, default_tgt = vocabularies(model, ckpt)
        src_vocab = default_src if src_vocab is None else src_vocab
        tgt_vocab = default_tgt if tgt_vocab is None else tgt_vocab
    spec = ct2_spec(model, src_vocab, tgt_vocab, add_source_bos, add_source_eos)
    spec.optimize(quantization=quantization)  # aliases tied/shared weights, quantizes
    out = _prepare_dir(out_dir, overwrite)
    spec.save(str(out))
    return out


# ---------------------------------------------------------------- entry point
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
        return export_hf_marian(ckpt_path, output_dir, overwrite=overwrite)
    return to_ctranslate2(ckpt_path, output_dir, quantization, overwrite=overwrite)
