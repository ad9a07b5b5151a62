"""What the Hugging Face exports share (``--to hf``: MarianMT for Post-LN, Pegasus for Pre-LN).

Both are BART-family layouts whose fixed sinusoidal table is ``[sin | cos]`` (halves) where
ours interleaves ``sin, cos`` on even/odd channels. The table is a buffer HF recomputes on
load, so instead every weight touching the residual stream is permuted by
``P = [0, 2, 4, ..., 1, 3, 5, ...]`` (embedding columns, input columns of W^Q/W^K/W^V/W1,
output rows and biases of W^O/W2, LayerNorm weights and biases). LayerNorm is
permutation-equivariant and the tied output layer uses the same permuted table, so the
network is exactly equivalent. Our fused ``w_kv`` (K rows, then V rows) is split into
``k_proj``/``v_proj``. Parameter names are the same in both architectures; Pegasus adds
``model.encoder.layer_norm`` and ``model.decoder.layer_norm`` (the stacks' final norms).

The generation config mirrors our search (``seq2seq.decoding.rules``) as far as HF can
express it: the decoder starts from our BOS, pad and BOS are never outputs
(``suppress_tokens``), the last allowed step emits EOS (``forced_eos_token_id``), the
output rules (no repeated n-gram, min length) are the ``DecodingConfig``'s, and the
length limit is our cap, ``max_positions - 1`` tokens before EOS: HF has no per-sentence
``a * |src| + b``, so pass ``max_new_tokens`` to bound a call tighter. :data:`HELD_BY_HF`
and :data:`NOT_HELD_BY_HF` place every ``DecodingConfig`` field. Beam settings are
the ``DecodingConfig``'s (by default :data:`EXPORT_DECODING`, our beam search, so
``generate()`` without arguments runs ``seq2seq-translate --beam 5``): ``num_beams``, ``length_penalty`` 1.0 for our ``average``
(log-prob / length) or 0.0 for ``none``, and ``early_stopping`` False for our
``heuristic`` stopping (the same rule) or ``"never"`` for ``exact``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from seq2seq.config import DecodingConfig, ModelConfig
from seq2seq.export.common import tokenizer_states, unk_token, vocabularies
from seq2seq.model import Seq2Seq

# Files an HF export writes (save_pretrained may shard the weights).
_PRODUCTS = {
    "config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json",
    "source.spm", "target.spm", "vocab.json", "target_vocab.json", "tokenizer_config.json",
}
_SHARD = re.compile(r"model-\d+-of-\d+\.safetensors")


def is_product(name: str) -> bool:
    """Whether ``name`` is a file an HF export writes (``--force`` replaces it)."""
    return name in _PRODUCTS or _SHARD.fullmatch(name) is not None


def channel_permutation(d_model: int) -> Tensor:
    """``P`` with ``hf[..., c] = ours[..., P[c]]``: even channels (sin) then odd (cos)."""
    return torch.cat((torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)))


def common_config(arch: ModelConfig) -> dict[str, Any]:
    """The ``PretrainedConfig`` fields MarianConfig and PegasusConfig share."""
    return dict(
        max_position_embeddings=arch.max_positions,
        d_model=arch.d_model,
        encoder_layers=arch.encoder_layers,
        decoder_layers=arch.decoder_layers,
        encoder_attention_heads=arch.n_heads,
        decoder_attention_heads=arch.n_heads,
        encoder_ffn_dim=arch.d_ff,
        decoder_ffn_dim=arch.d_ff,
        activation_function=arch.activation,  # "relu" | "gelu" (exact erf) | "silu", as ours
        dropout=arch.dropout,
        attention_dropout=arch.attention_dropout,
        activation_dropout=arch.activation_dropout,
        scale_embedding=True,
        tie_word_embeddings=arch.tie_output,
        pad_token_id=arch.pad_id,
        bos_token_id=arch.bos_id,
        eos_token_id=arch.eos_id,
        decoder_start_token_id=arch.bos_id,
        forced_eos_token_id=arch.eos_id,
    )


def layout_problems(fmt: str, arch: ModelConfig) -> list[str]:
    """What neither BART-family layout holds: LayerNorm eps 1e-5, fixed sinusoidal
    positions, d_k = d_v = d_model / n_heads, an activation HF names like us."""
    problems = []
    if arch.norm != "layernorm":
        problems.append(f"model.norm={arch.norm!r} ({fmt} uses LayerNorm)")
    if arch.norm_eps != 1e-5:
        problems.append(f"model.norm_eps={arch.norm_eps!r} ({fmt}'s LayerNorm eps is fixed at 1e-5)")
    if arch.positional != "sinusoidal":
        problems.append(
            f"model.positional={arch.positional!r} ({fmt} has fixed sinusoidal positions only)"
        )
    for name, width in (("d_k", arch.head_dim_k), ("d_v", arch.head_dim_v)):
        if width * arch.n_heads != arch.d_model:
            problems.append(f"model.{name}={getattr(arch, name)!r} ({fmt} needs "
                            f"{name} = d_model / n_heads)")
    return problems


# ---------------------------------------------------------------- generation config
EXPORT_DECODING = DecodingConfig(method="beam")  # what an exported generate() does by default
_EARLY_STOPPING = {"heuristic": False, "exact": "never"}
_LENGTH_PENALTY = {"average": 1.0, "none": 0.0}
# Every DecodingConfig field is either written into the generation config (field -> the
# GenerationConfig fields that carry it) or named here with why HF cannot hold it: a new
# search option must be placed in one of the two (tests/export/test_export_hf.py checks it).
HELD_BY_HF = {
    "method": ("num_beams", "do_sample"),
    "beam_size": ("num_beams",),
    "nbest": ("num_return_sequences",),
    "length_penalty": ("length_penalty",),  # gnmt refused: HF divides by length ** p
    "min_len": ("min_new_tokens",),  # tokens before EOS, the start token not counted: ours
    "no_repeat_ngram_size": ("no_repeat_ngram_size",),
    "stopping": ("early_stopping",),  # patience refused: HF has no such rule
    "temperature": ("temperature",),  # sampling only, as ours
    "top_k": ("top_k",),
    "top_p": ("top_p",),
}
NOT_HELD_BY_HF = {
    "alpha": "the exponent of the gnmt length penalty, which HF has not (refused)",
    "max_len_a": "HF has one length limit per call, not a * |src| + b: our cap is written "
                 "(max_length); pass max_new_tokens for a tighter one",
    "max_len_b": "as max_len_a",
    "patience": "fairseq/CTranslate2's stopping rule, which HF has not (refused)",
    "seed": "generate() samples from torch's global generator: seed it before the call",
    "max_tokens": "how sentences are batched, which is the caller's in HF",
    "split_sentences": "cutting texts into sentences happens before the model (Translator)",
    "max_sentence_tokens": "as split_sentences: clause cuts before the model",
    "skip_ratio": "flags outputs after the search; it changes none",
    "restore_numbers": "puts numbers back after the search (Translator)",
}


def generation_config(arch: ModelConfig, decoding: DecodingConfig | None = None):
    """A ``GenerationConfig`` doing our search (module docstring; :data:`HELD_BY_HF`);
    ValueError naming the ``DecodingConfig`` field HF cannot express."""
    from transformers import GenerationConfig

    d = decoding or EXPORT_DECODING
    if d.length_penalty not in _LENGTH_PENALTY:
        raise ValueError(f"DecodingConfig.length_penalty={d.length_penalty!r} has no HF "
                         f"equivalent (HF divides by length ** p); use one of {list(_LENGTH_PENALTY)}")
    if d.stopping not in _EARLY_STOPPING:
        raise ValueError(f"DecodingConfig.stopping={d.stopping!r} has no HF equivalent; "
                         f"use one of {list(_EARLY_STOPPING)}")
    # HF checks that sampling options go with do_sample: write them only there (ours
    # ignores them in greedy and beam search too)
    sampling = dict(temperature=d.temperature, top_k=d.top_k, top_p=d.top_p) \
        if d.method == "sample" else {}
    return GenerationConfig(
        decoder_start_token_id=arch.bos_id,
        bos_token_id=arch.bos_id,
        eos_token_id=arch.eos_id,
        pad_token_id=arch.pad_id,
        suppress_tokens=sorted({arch.pad_id, arch.bos_id}),
        forced_eos_token_id=arch.eos_id,
        # the start token + at most max_positions - 1 tokens + EOS: our cap
        max_length=arch.max_positions + 1,
        min_new_tokens=d.min_len,
        no_repeat_ngram_size=d.no_repeat_ngram_size,
        num_beams=d.beam_size if d.method == "beam" else 1,
        num_return_sequences=d.nbest if d.method != "greedy" else 1,
        length_penalty=_LENGTH_PENALTY[d.length_penalty],
        early_stopping=_EARLY_STOPPING[d.stopping],
        do_sample=d.method == "sample",
        **sampling,
    )


# ---------------------------------------------------------------- weights
class _HFState:
    """Our weights renamed and channel-permuted into the HF state-dict layout."""

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
        bias = model.output.bias
        self.put("final_logits_bias", (model.output.weight.new_zeros(model.arch.tgt_vocab_size)
                                       if bias is None else bias)[None])


def hf_state_dict(model: Seq2Seq) -> dict[str, Tensor]:
    """The HF state dict of ``model`` (less HF's own positional buffers); the stacks'
    final norms when ``model`` has them (Pre-LN)."""
    state = _HFState(model.arch.d_model)
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
    for side in ("encoder", "decoder"):
        final = getattr(model, side).final_norm
        if not isinstance(final, nn.Identity):
            state.norm(f"model.{side}.layer_norm", final)
    return state.sd


def load_into(fmt: str, hf_model, model: Seq2Seq, decoding: DecodingConfig | None):
    """``hf_model`` with ``model``'s weights and our generation config, in eval mode."""
    missing, unexpected = hf_model.load_state_dict(hf_state_dict(model), strict=False)
    missing = [k for k in missing if not k.endswith("embed_positions.weight")]
    if missing or unexpected:
        raise RuntimeError(
            f"{fmt} mapping is incomplete: missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    hf_model.generation_config = generation_config(model.arch, decoding)
    return hf_model.eval()


# ---------------------------------------------------------------- tokenizer files
def write_tokenizer_files(out: Path, model: Seq2Seq, ck: dict[str, Any]) -> None:
    """What ``MarianTokenizer.from_pretrained(out)`` (and so ``AutoTokenizer``) reads:
    ``source.spm``/``target.spm``, ``vocab.json`` (piece -> our id; ``target_vocab.json``
    too when the vocabularies differ) and ``tokenizer_config.json``."""
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
        "unk_token": unk_token(src_vocab),
        "eos_token": tgt_vocab[arch.eos_id],
        "pad_token": tgt_vocab[arch.pad_id],
        "model_max_length": arch.max_positions,
        "separate_vocabs": separate,
    }, indent=2)


def _write_json(path: Path, obj: Any, indent: int) -> None:
    path.write_text(json.dumps(obj, ensure_ascii=False, indent=indent), encoding="utf-8")
