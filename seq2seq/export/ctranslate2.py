"""Export to CTranslate2 (``to_ctranslate2``).

The exported model computes exactly our network (same log-probs up to float rounding in
float32), so its greedy/beam output can be compared token for token with ours.

Built directly from ``ctranslate2.specs`` (not the Marian converter, which drops the
last vocabulary row and starts the decoder from a zero embedding). Our sinusoidal (or
learned) table is written as ``position_encodings`` so no channel permutation is
needed; the norm placement (``seq2seq.model.norms.norm_placement``) maps to ``pre_norm``
and to the stack's final norm, RMSNorm to ``rms_norm=True``, RoPE to ``rotary_dim=0,
rotary_interleave=True`` on self-attention only. Tokens are strings: the vocabulary is
the SentencePiece pieces (ids = our ids); the decoder starts from the BOS piece
(``decoder_start_token``) and stops on EOS.

Exported from a checkpoint, the folder is self-sufficient: it ships the SentencePiece
models (``source.model``, ``target.model``) and CTranslate2 appends the EOS our encoder
was trained with (``add_source_eos``), so
``translator.translate_batch([sp.encode(text, out_type=str)])`` works as is. Exported from
a bare model or with given vocabularies there is no tokenizer to ship: CTranslate2 then
adds nothing to the source, and callers pass exactly the pieces our encoder sees.

A multilingual checkpoint (:mod:`seq2seq.directions`): its tags are ordinary vocabulary
pieces here. A source-tag model takes the tag as the first source token
(``[["<2de>", *pieces]]``); a decoder-tag model gets no ``decoder_start_token``, so the
tag given as ``target_prefix=[["<2de>"]]`` starts the decoder as it does ours.
``directions.json`` (:data:`DIRECTIONS_FILE`) records the directions, tags and usage.

Searching as we do (:func:`ct2_translate_kwargs`, :func:`ct2_translate`): our max-length
rule is per sentence (``a * source + b``), CTranslate2's ``max_decoding_length`` per call,
so sentences are translated in groups of equal source length; EOS may come first
(``min_decoding_length=0``); sources are cut at the model's positions as ours are
(``max_input_length``); an empty source is an empty output, as ours (CTranslate2 would
translate the bare EOS).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from seq2seq.config import DecodingConfig, ModelConfig
from seq2seq.decoding.rules import length_limits
from seq2seq.directions import tag_piece
from seq2seq.export.common import (
    fit_vocabulary,
    load,
    model_directions,
    prepare_dir,
    refuse,
    source_path,
    tokenizer_states,
    unk_token,
    vocabularies,
)
from seq2seq.model import Seq2Seq
from seq2seq.model.norms import NormPlacement, norm_placement

# What CTranslate2 itself accepts; the CLI offers OFFERED_QUANTIZATIONS.
CT2_QUANTIZATIONS = (
    "int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16",
    "float32",
)
OFFERED_QUANTIZATIONS = ("int8", "int16", "float16")

# Files ``spec.save`` writes for a TransformerSpec (one shared or two vocabularies), and
# the SentencePiece models shipped with a checkpoint's export.
SENTENCEPIECE_FILES = {"src": "source.model", "tgt": "target.model"}
DIRECTIONS_FILE = "directions.json"  # a multilingual model's directions and how to ask for one
_PRODUCTS = {
    "model.bin", "config.json", "shared_vocabulary.json", "source_vocabulary.json",
    "target_vocabulary.json", DIRECTIONS_FILE, *SENTENCEPIECE_FILES.values(),
}


def is_product(name: str) -> bool:
    """Whether ``name`` is a file :func:`to_ctranslate2` writes (``--force`` replaces it)."""
    return name in _PRODUCTS


def ct2_problems(arch: ModelConfig) -> list[str]:
    """Options of ``arch`` that CTranslate2's Transformer spec cannot represent."""
    problems = []
    if arch.head_dim_k != arch.head_dim_v:
        problems.append(
            f"model.d_k={arch.head_dim_k} != model.d_v={arch.head_dim_v} "
            "(CTranslate2 has one head_dim for queries, keys and values)"
        )
    placement = norm_placement(arch)
    if placement.final_norm and not placement.pre:
        problems.append(
            f"model.norm_position={arch.norm_position!r} with a final norm "
            "(CTranslate2 has a stack's final norm only with pre_norm)"
        )
    return problems


# ---------------------------------------------------------------- weights
def _numpy(t: Tensor):
    """A float32 numpy *copy*: CTranslate2's quantizer scales arrays in place, which would
    otherwise write through to the model's own parameters."""
    return t.detach().to(device="cpu", dtype=torch.float32).numpy().copy()


def _linear(s, lin: nn.Linear, rows: slice = slice(None)) -> None:
    s.weight = _numpy(lin.weight[rows])
    if lin.bias is not None:
        s.bias = _numpy(lin.bias[rows])


def _norm(s, module: nn.Module) -> None:
    s.gamma = _numpy(module.weight)
    if isinstance(module, nn.LayerNorm):  # RMSNorm has no bias
        s.beta = _numpy(module.bias)


def _embeddings(stack_spec, embed) -> None:
    emb = stack_spec.embeddings
    emb = emb[0] if isinstance(emb, list) else emb
    emb.weight = _numpy(embed.tokens.weight)
    stack_spec.scale_embeddings = True  # multiply by sqrt(d_model), as ours
    if embed.kind != "rope":  # RoPE rotates queries and keys instead of adding a table
        stack_spec.position_encodings.encodings = _numpy(embed.positions)


def _self_attention_and_ffn(s, layer, attn_norm: nn.Module) -> None:
    """The sublayers encoder and decoder layers share (CT2 fuses Q, K, V in one linear)."""
    attn = layer.self_attn
    qkv = s.self_attention.linear[0]
    qkv.weight = _numpy(torch.cat((attn.w_q.weight, attn.w_kv.weight)))
    qkv.bias = _numpy(torch.cat((attn.w_q.bias, attn.w_kv.bias)))
    _linear(s.self_attention.linear[1], attn.w_o)
    _norm(s.self_attention.layer_norm, attn_norm)
    _linear(s.ffn.linear_0, layer.ff.w1)
    _linear(s.ffn.linear_1, layer.ff.w2)
    _norm(s.ffn.layer_norm, layer.ff_block.norm)


def _write_encoder(spec, model: Seq2Seq, placement: NormPlacement) -> None:
    _embeddings(spec, model.src_embed)
    for s, layer in zip(spec.layer, model.encoder.layers):
        _self_attention_and_ffn(s, layer, layer.attn_block.norm)
    if placement.final_norm:
        _norm(spec.layer_norm, model.encoder.final_norm)


def _write_decoder(spec, model: Seq2Seq, placement: NormPlacement) -> None:
    _embeddings(spec, model.tgt_embed)
    for s, layer in zip(spec.layer, model.decoder.layers):
        _self_attention_and_ffn(s, layer, layer.self_block.norm)
        cross = layer.cross_attn
        _linear(s.attention.linear[0], cross.w_q)
        _linear(s.attention.linear[1], cross.w_kv)  # K rows then V rows, as CT2's
        _linear(s.attention.linear[2], cross.w_o)
        _norm(s.attention.layer_norm, layer.cross_block.norm)
    if placement.final_norm:
        _norm(spec.layer_norm, model.decoder.final_norm)
    _linear(spec.projection, model.output)  # with Marian's logits bias when there is one


# ---------------------------------------------------------------- spec
def _empty_spec(arch: ModelConfig, placement: NormPlacement):
    """A ``TransformerSpec`` of ``arch``'s shape, weights unset."""
    from ctranslate2.specs import common_spec, transformer_spec

    activation = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU,
                  "silu": common_spec.Activation.SWISH}[arch.activation]
    options = dict(
        pre_norm=placement.pre,
        no_final_norm=not placement.final_norm,
        activation=activation,
        rms_norm=arch.norm == "rmsnorm",
        head_dim=arch.head_dim_k if arch.head_dim_k * arch.n_heads != arch.d_model else None,
    )
    if arch.positional == "rope":
        options.update(rotary_dim=0, rotary_interleave=True, rotary_base=10000.0)
    return transformer_spec.TransformerSpec(
        transformer_spec.TransformerEncoderSpec(arch.encoder_layers, arch.n_heads, **options),
        transformer_spec.TransformerDecoderSpec(arch.decoder_layers, arch.n_heads, **options),
    )


def _set_vocabularies(spec, arch: ModelConfig, src_vocab: list[str], tgt_vocab: list[str]) -> None:
    spec.register_source_vocabulary(src_vocab)
    spec.register_target_vocabulary(tgt_vocab)
    spec.config.unk_token = unk_token(src_vocab)
    spec.config.bos_token = tgt_vocab[arch.bos_id]
    spec.config.eos_token = tgt_vocab[arch.eos_id]
    spec.config.decoder_start_token = tgt_vocab[arch.bos_id]


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
    arch = model.arch
    refuse("ctranslate2", ct2_problems(arch))
    src_vocab = fit_vocabulary(src_vocab, arch.src_vocab_size, "src")
    tgt_vocab = fit_vocabulary(tgt_vocab, arch.tgt_vocab_size, "tgt")
    placement = norm_placement(arch)
    spec = _empty_spec(arch, placement)
    _write_encoder(spec.encoder, model, placement)
    _write_decoder(spec.decoder, model, placement)
    _set_vocabularies(spec, arch, src_vocab, tgt_vocab)
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
    add_source_eos: bool | None = None,
    overwrite: bool = False,
) -> Path:
    """Write a CTranslate2 model directory for a checkpoint (path or dict) or a ``Seq2Seq``.

    Vocabularies default to the checkpoint's SentencePiece pieces, or (bare model)
    :func:`~seq2seq.export.common.default_vocabulary`. With the checkpoint's own pieces the
    folder also gets its SentencePiece models (:data:`SENTENCEPIECE_FILES`), and
    ``add_source_eos`` (None) becomes True: CTranslate2 then appends the EOS our data
    pipeline appends, so users feed ``sp.encode(text, out_type=str)``. Otherwise (None)
    False: callers pass the exact encoder pieces. ``quantization``: None (float32) or one of
    :data:`CT2_QUANTIZATIONS`. Raises ValueError naming any option CTranslate2 lacks.
    """
    if quantization is not None and quantization not in CT2_QUANTIZATIONS:
        raise ValueError(
            f"quantization={quantization!r} is not one of {list(CT2_QUANTIZATIONS)}"
        )
    import ctranslate2  # noqa: F401  (missing package: fail before reading anything)

    model, ckpt = load(ckpt_or_model)
    # Ship the tokenizers only when the vocabularies are theirs (ids = pieces).
    shipped = tokenizer_states(ckpt) if src_vocab is None and tgt_vocab is None else None
    if src_vocab is None or tgt_vocab is None:
        default_src, default_tgt = vocabularies(model, ckpt)
        src_vocab = default_src if src_vocab is None else src_vocab
        tgt_vocab = default_tgt if tgt_vocab is None else tgt_vocab
    if add_source_eos is None:
        add_source_eos = bool(shipped)  # our encoder input is pieces + EOS (data.batch.collate_src)
    spec = ct2_spec(model, src_vocab, tgt_vocab, add_source_bos, add_source_eos)
    multilingual = model_directions(ckpt)
    if multilingual is not None and multilingual.tag_position == "decoder":
        spec.config.decoder_start_token = None  # the tag, given as target_prefix, starts it
    spec.optimize(quantization=quantization)  # aliases tied/shared weights, quantizes
    out = prepare_dir(out_dir, overwrite, "ctranslate2", is_product, source_path(ckpt_or_model))
    spec.save(str(out))
    if shipped:  # both files even when joint: users need not know which one to load
        for side, name in SENTENCEPIECE_FILES.items():
            (out / name).write_bytes(bytes(shipped[side]["model"]))
    if multilingual is not None:
        write_directions(out / DIRECTIONS_FILE, multilingual)
    return out


# CTranslate2 normalises a hypothesis's log-prob by length ** length_penalty
_CT2_LENGTH_PENALTY = {"average": 1.0, "none": 0.0}


NEVER_OUTPUT = ("<pad>", "<s>")  # our tokenizers' pad and BOS pieces: never in an output


def ct2_translate_kwargs(source_tokens: int, decoding: DecodingConfig | None = None,
                         max_positions: int | None = None,
                         never: Sequence[str] = NEVER_OUTPUT) -> dict[str, Any]:
    """``translate_batch`` keyword arguments with which CTranslate2 searches as
    ``seq2seq-translate`` does with ``decoding`` (default: ``DecodingConfig()``), for
    sources of ``source_tokens`` tokens as given to CTranslate2 (a source tag included,
    the EOS it appends not); ``max_positions``: the model's (``ModelConfig.max_positions``;
    None = no cap); ``never``: the pad and BOS pieces (an imported OPUS-MT model has only
    ``<pad>``). ``ValueError`` naming the setting CTranslate2 cannot reproduce."""
    d = decoding or DecodingConfig()
    if d.method == "sample":
        raise ValueError("DecodingConfig.method='sample': CTranslate2's random draws are not "
                         "ours; use greedy or beam")
    if d.length_penalty not in _CT2_LENGTH_PENALTY:
        raise ValueError(f"DecodingConfig.length_penalty={d.length_penalty!r}: CTranslate2 has "
                         "only length ** penalty; use 'average' or 'none'")
    beam = d.method == "beam"
    if beam and d.stopping != "patience":
        raise ValueError(f"DecodingConfig.stopping={d.stopping!r}: CTranslate2's beam stops "
                         "by 'patience' only; use stopping='patience'")
    cap = max_positions if max_positions is not None else 2**31 - 1
    src = min(source_tokens, cap - 1) + 1  # our truncation, then EOS
    max_len = int(length_limits(torch.tensor([src]), d, cap)[0])
    kwargs: dict[str, Any] = {
        "beam_size": d.beam_size if beam else 1, "num_hypotheses": d.nbest if beam else 1,
        "length_penalty": _CT2_LENGTH_PENALTY[d.length_penalty],
        "no_repeat_ngram_size": d.no_repeat_ngram_size,
        "max_decoding_length": max_len, "min_decoding_length": min(d.min_len, max_len),
    }
    if never:
        kwargs["suppress_sequences"] = [[piece] for piece in never]
    if beam:
        kwargs["patience"] = d.patience
    if max_positions is not None:
        kwargs["max_input_length"] = max_positions
    return kwargs


def ct2_translate(translator, pieces: Sequence[Sequence[str]],
                  decoding: DecodingConfig | None = None, max_positions: int | None = None,
                  tag: str | None = None, tag_position: str = "source",
                  never: Sequence[str] = NEVER_OUTPUT) -> list[list[str]]:
    """The best output pieces of CTranslate2's ``translator`` for each source's ``pieces``
    (``sp.encode(text, out_type=str)``), searched as ``seq2seq-translate`` searches: in
    groups of equal source length (:func:`ct2_translate_kwargs`); a source without pieces
    gives an empty output, as ours. A multilingual model's target-language ``tag`` goes
    where ``tag_position`` (``directions.json``) says: first in the source, or as the
    decoder's ``target_prefix``; ``never``: see :func:`ct2_translate_kwargs`."""
    if tag_position not in ("source", "decoder"):
        raise ValueError(f"tag_position must be 'source' or 'decoder', got {tag_position!r}")
    lead = [tag] if tag is not None and tag_position == "source" else []
    prefix = [tag] if tag is not None and tag_position == "decoder" else None
    out: list[list[str]] = [[] for _ in pieces]
    groups: dict[int, list[int]] = {}
    for i, source in enumerate(pieces):
        if source:
            groups.setdefault(len(lead) + len(source), []).append(i)
    for length, rows in groups.items():
        results = translator.translate_batch(
            [[*lead, *pieces[i]] for i in rows],
            target_prefix=None if prefix is None else [prefix] * len(rows),
            **ct2_translate_kwargs(length, decoding, max_positions, never))
        for i, result in zip(rows, results):
            out[i] = list(result.hypotheses[0])
    return out


def usage(directions) -> str:
    """What a CTranslate2 user passes to get ``directions``' first direction."""
    src, tgt = directions.pairs[0]
    tag = tag_piece(tgt)
    pieces = 'sp.encode(text, out_type=str)'
    if directions.tag_position == "source":
        return f'translator.translate_batch([["{tag}", *{pieces}]])  # {src}-{tgt}: the tag first'
    return (f'translator.translate_batch([{pieces}], target_prefix=[["{tag}"]])  '
            f"# {src}-{tgt}: the tag starts the decoder")


def write_directions(path: Path, directions) -> None:
    """``directions.json``: the directions, each target language's tag and where it goes."""
    info = {**directions.to_state(),
            "tags": {lang: tag_piece(lang) for lang in directions.targets},
            "usage": usage(directions)}
    path.write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
