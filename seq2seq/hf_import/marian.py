"""A Hugging Face MarianMT model as our ``Seq2Seq``: the config mapped field by field, the
weights mapped back through the export's channel permutation (:mod:`seq2seq.export.hf`).

What OPUS-MT needs of our architecture, each an option of ``ModelConfig``: the SiLU
("swish") feed-forward activation (``activation="silu"``), Marian's ``final_logits_bias``
(``output_bias``), the decoder starting from the pad token (``bos_id = pad_id``: our BOS
*is* the decoder's start token, never an output), ``max_position_embeddings``
(``max_positions``). The source ends with ``</s>`` in both (our ``collate_src``,
``MarianTokenizer``). Anything else MarianMTModel can hold but we cannot is refused by
:func:`model_config`, naming the ``config.json`` field.
"""

from __future__ import annotations

import torch
from torch import Tensor

from seq2seq.config import ConfigError, ModelConfig
from seq2seq.export.hf import channel_permutation
from seq2seq.hf_import.folder import layer_counts
from seq2seq.model import Seq2Seq

ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "silu", "silu": "silu"}


def _get(config, name: str, default=None):
    return getattr(config, name, default)


def model_config(config, where: str = "config.json") -> ModelConfig:
    """Our ``ModelConfig`` of a ``MarianConfig``; ValueError naming the field we cannot hold."""
    def refuse(field: str, why: str):
        raise ValueError(f"{where}: {field}={_get(config, field)!r} cannot be imported ({why})")

    if _get(config, "model_type") != "marian":
        refuse("model_type", "only MarianMT models are imported")
    for enc, dec in (("encoder_attention_heads", "decoder_attention_heads"),
                     ("encoder_ffn_dim", "decoder_ffn_dim")):
        if _get(config, enc) != _get(config, dec):
            refuse(dec, f"our encoder and decoder share it; {enc}={_get(config, enc)!r}")
    if _get(config, "activation_function") not in ACTIVATIONS:
        refuse("activation_function", f"one of {sorted(ACTIVATIONS)} is supported")
    if not _get(config, "scale_embedding", False):
        refuse("scale_embedding", "our embeddings are scaled by sqrt(d_model)")
    for name in ("encoder_layerdrop", "decoder_layerdrop"):
        if _get(config, name, 0.0):
            refuse(name, "layer drop is not implemented")
    share = bool(_get(config, "share_encoder_decoder_embeddings", True))
    vocab = config.vocab_size
    try:
        return ModelConfig(
            src_vocab_size=vocab,
            tgt_vocab_size=vocab if share else (_get(config, "decoder_vocab_size") or vocab),
            d_model=config.d_model,
            n_heads=config.encoder_attention_heads,
            d_ff=config.encoder_ffn_dim,
            encoder_layers=config.encoder_layers,
            decoder_layers=config.decoder_layers,
            dropout=float(config.dropout),
            attention_dropout=float(config.attention_dropout),
            activation_dropout=float(config.activation_dropout),
            activation=ACTIVATIONS[config.activation_function],
            norm_position="post",
            positional="sinusoidal",
            max_positions=config.max_position_embeddings,
            share_embeddings=share,
            tie_output=bool(_get(config, "tie_word_embeddings", True)),
            output_bias=True,
            pad_id=config.pad_token_id,
            bos_id=config.decoder_start_token_id,
            eos_id=config.eos_token_id,
        )
    except ConfigError as e:
        raise ValueError(f"{where}: cannot be imported: {e}") from None


class _FromHF:
    """HF tensors back into our layout: the inverse permutation of the export's."""

    def __init__(self, hf_state: dict[str, Tensor], d_model: int):
        self.hf = hf_state
        self.Q = torch.argsort(channel_permutation(d_model))  # ours[..., c] = hf[..., Q[c]]
        self.sd: dict[str, Tensor] = {}

    def linear_in(self, ours: str, *theirs: str) -> None:
        self.sd[f"{ours}.weight"] = torch.cat([self.hf[f"{t}.weight"] for t in theirs])[:, self.Q]
        self.sd[f"{ours}.bias"] = torch.cat([self.hf[f"{t}.bias"] for t in theirs])

    def linear_out(self, ours: str, theirs: str) -> None:
        self.sd[f"{ours}.weight"] = self.hf[f"{theirs}.weight"][self.Q]
        self.sd[f"{ours}.bias"] = self.hf[f"{theirs}.bias"][self.Q]

    def attention(self, ours: str, theirs: str) -> None:
        self.linear_in(f"{ours}.w_q", f"{theirs}.q_proj")
        self.linear_in(f"{ours}.w_kv", f"{theirs}.k_proj", f"{theirs}.v_proj")
        self.linear_out(f"{ours}.w_o", f"{theirs}.out_proj")

    def norm(self, ours: str, theirs: str) -> None:
        self.sd[f"{ours}.weight"] = self.hf[f"{theirs}.weight"][self.Q]
        self.sd[f"{ours}.bias"] = self.hf[f"{theirs}.bias"][self.Q]

    def ffn(self, ours: str, theirs: str) -> None:
        self.linear_in(f"{ours}.w1", f"{theirs}.fc1")
        self.linear_out(f"{ours}.w2", f"{theirs}.fc2")


def hf_config(fields: dict, where: str = "config.json"):
    """A ``MarianConfig`` of ``config.json``'s checked fields (:func:`folder.check_config`)."""
    from transformers import MarianConfig

    try:
        return MarianConfig(**fields)
    except Exception as e:  # transformers' own checks of values
        raise ValueError(f"{where}: transformers refuses it ({type(e).__name__}: "
                         f"{' '.join(str(e).split())[:160]})") from None


def check_state(config, state: dict[str, Tensor], where: str) -> None:
    """The names and shapes of ``state`` (from the weights file ``where``) must be those
    ``config`` needs (a ``MarianMTModel`` on the meta device: nothing allocated): a one-line
    ``ValueError`` naming the tensor and the config fields otherwise."""
    from transformers import MarianMTModel

    for side, count in layer_counts(list(state)).items():
        if count != getattr(config, f"{side}_layers"):
            raise ValueError(f"{where}: holds {count} {side} layers, config.json's "
                             f"{side}_layers={getattr(config, f'{side}_layers')}")
    try:
        with torch.device("meta"):  # shapes only: nothing allocated
            expected = MarianMTModel(config)
    except Exception as e:  # e.g. a pad id outside a vocabulary
        raise ValueError(f"config.json: transformers cannot build it ({type(e).__name__}: "
                         f"{' '.join(str(e).split())[:160]})") from None
    shapes = {k: list(v.shape) for k, v in expected.state_dict().items()}
    sizes = ", ".join(f"{k}={getattr(config, k)}" for k in (
        "d_model", "vocab_size", "decoder_vocab_size", "encoder_ffn_dim", "decoder_ffn_dim",
        "max_position_embeddings"))
    for name, tensor in state.items():
        if name not in shapes:
            raise ValueError(f"{where}: tensor {name} is not part of a MarianMTModel")
        if list(tensor.shape) != shapes[name]:
            raise ValueError(f"{where}: tensor {name} has shape {list(tensor.shape)}, but "
                             f"config.json ({sizes}) needs {shapes[name]}")
    aliases: dict[int, list[str]] = {}  # tied parameters: one name of each group is enough
    for name, param in expected.named_parameters(remove_duplicate=False):
        aliases.setdefault(id(param), []).append(name)
    for name in [*aliases.values(), *([b] for b, _ in expected.named_buffers() if b in shapes)]:
        if not any(n in state for n in name) and "embed_positions" not in name[0]:
            raise ValueError(f"{where}: has no tensor {name[0]} (config.json: {sizes})")


def marian_model(config, state: dict[str, Tensor]):
    """``MarianMTModel(config)`` holding ``state`` (checked by :func:`check_state`), eval mode."""
    from transformers import MarianMTModel

    marian = MarianMTModel(config)
    marian.load_state_dict({k: v for k, v in state.items() if "embed_positions" not in k},
                           strict=False)  # positions: the sinusoidal table, computed
    return marian.eval()


def to_seq2seq(marian) -> Seq2Seq:
    """Our ``Seq2Seq`` (eval mode, fp32) computing what ``marian`` (a ``MarianMTModel``) does."""
    arch = model_config(marian.config)
    hf = {k: v.detach().float() for k, v in marian.state_dict().items()}
    hf["lm_head.weight"] = marian.get_output_embeddings().weight.detach().float()
    state = _FromHF(hf, arch.d_model)
    sd = state.sd
    sd["src_embed.tokens.weight"] = hf["model.encoder.embed_tokens.weight"][:, state.Q]
    sd["tgt_embed.tokens.weight"] = hf["model.decoder.embed_tokens.weight"][:, state.Q]
    sd["output.weight"] = hf["lm_head.weight"][:, state.Q]
    sd["output.bias"] = hf["final_logits_bias"].reshape(-1)
    for i in range(arch.encoder_layers):
        ours, theirs = f"encoder.layers.{i}", f"model.encoder.layers.{i}"
        state.attention(f"{ours}.self_attn", f"{theirs}.self_attn")
        state.norm(f"{ours}.attn_block.norm", f"{theirs}.self_attn_layer_norm")
        state.ffn(f"{ours}.ff", theirs)
        state.norm(f"{ours}.ff_block.norm", f"{theirs}.final_layer_norm")
    for i in range(arch.decoder_layers):
        ours, theirs = f"decoder.layers.{i}", f"model.decoder.layers.{i}"
        state.attention(f"{ours}.self_attn", f"{theirs}.self_attn")
        state.norm(f"{ours}.self_block.norm", f"{theirs}.self_attn_layer_norm")
        state.attention(f"{ours}.cross_attn", f"{theirs}.encoder_attn")
        state.norm(f"{ours}.cross_block.norm", f"{theirs}.encoder_attn_layer_norm")
        state.ffn(f"{ours}.ff", theirs)
        state.norm(f"{ours}.ff_block.norm", f"{theirs}.final_layer_norm")
    model = Seq2Seq(arch)
    tied = _tied_keys(arch)
    missing, unexpected = model.load_state_dict({k: v for k, v in sd.items() if k not in tied},
                                                strict=False)
    if set(missing) != tied or unexpected:
        raise RuntimeError(f"Marian import mapping is incomplete: missing {missing[:5]}, "
                           f"unexpected {unexpected[:5]}")
    return model.eval()


def _tied_keys(arch: ModelConfig) -> set[str]:
    """Our parameters that are another one (loaded through it)."""
    tied = {"tgt_embed.tokens.weight"} if arch.share_embeddings else set()
    return tied | ({"output.weight"} if arch.tie_output else set())
