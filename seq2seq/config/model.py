"""The network's shape (``ModelConfig``) and how it is optimized (``OptimConfig``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from seq2seq.fields import ConfigError, check_fields, positive, probability
from seq2seq.specials import BOS_ID, EOS_ID, PAD_ID

Norm = Literal["layernorm", "rmsnorm"]
NormPosition = Literal["post", "pre"]
Positional = Literal["sinusoidal", "learned", "rope"]
Activation = Literal["relu", "gelu", "silu"]  # silu = swish (OPUS-MT)


@dataclass
class ModelConfig:
    """Encoder-decoder Transformer. Defaults: Transformer-Tiny (4+4, d 128, ff 256, 4 heads)."""

    src_vocab_size: int = 8000
    tgt_vocab_size: int = 8000
    d_model: int = 128
    n_heads: int = 4
    d_k: int | None = None  # per-head query/key width; None = d_model // n_heads
    d_v: int | None = None  # per-head value width; None = d_model // n_heads
    d_ff: int = 256
    encoder_layers: int = 4
    decoder_layers: int = 4
    dropout: float = 0.3  # embeddings + residual branches (Vaswani et al. 2017)
    attention_dropout: float = 0.0  # on attention weights
    activation_dropout: float = 0.0  # inside the feed-forward, after the activation
    activation: Activation = "relu"
    norm: Norm = "layernorm"
    norm_position: NormPosition = "post"
    norm_eps: float = 1e-5
    positional: Positional = "sinusoidal"
    max_positions: int = 1024  # longest sequence (subword tokens) either side accepts
    share_embeddings: bool = True  # encoder and decoder share one table (needs a joint vocab)
    tie_output: bool = True  # decoder output projection = decoder input embedding
    output_bias: bool = False  # a bias on the output projection (Marian's final_logits_bias)
    pad_id: int = PAD_ID
    bos_id: int = BOS_ID  # the decoder's start token, never an output (= pad_id in Marian)
    eos_id: int = EOS_ID

    def __post_init__(self) -> None:
        check_fields(self)
        positive(
            self, "src_vocab_size", "tgt_vocab_size", "d_model", "n_heads", "d_k", "d_v",
            "d_ff", "encoder_layers", "decoder_layers", "max_positions", "norm_eps",
        )
        probability(self, "dropout", "attention_dropout", "activation_dropout")
        for name in ("pad_id", "bos_id", "eos_id"):
            if not 0 <= getattr(self, name) < self.tgt_vocab_size:
                raise ConfigError(f"ModelConfig.{name} must be in [0, tgt_vocab_size="
                                  f"{self.tgt_vocab_size}), got {getattr(self, name)}")
        if self.max_positions < 2:
            raise ConfigError(f"ModelConfig.max_positions must be >= 2 (a token and EOS), "
                              f"got {self.max_positions}")
        if (self.d_k is None or self.d_v is None) and self.d_model % self.n_heads:
            raise ConfigError(
                f"ModelConfig.n_heads={self.n_heads} must divide d_model={self.d_model} "
                "unless d_k and d_v are both set"
            )
        if self.positional == "rope" and self.head_dim_k % 2:
            raise ConfigError(f"ModelConfig.d_k must be even for rope, got {self.head_dim_k}")
        if self.positional == "sinusoidal" and self.d_model % 2:
            raise ConfigError(f"ModelConfig.d_model must be even for sinusoidal, got {self.d_model}")
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ConfigError(
                "ModelConfig.share_embeddings needs src_vocab_size == tgt_vocab_size "
                f"(got {self.src_vocab_size} and {self.tgt_vocab_size}); use a joint vocabulary"
            )

    @property
    def head_dim_k(self) -> int:
        return self.d_k if self.d_k is not None else self.d_model // self.n_heads

    @property
    def head_dim_v(self) -> int:
        return self.d_v if self.d_v is not None else self.d_model // self.n_heads


@dataclass
class OptimConfig:
    """Adam + warmup schedule (the chapter's ``noam`` or fairseq's ``inverse_sqrt``)."""

    schedule: Literal["noam", "inverse_sqrt", "constant"] = "inverse_sqrt"
    lr: float = 5e-3  # peak lr (inverse_sqrt, constant); scale factor for noam
    warmup_steps: int = 2000
    decay_start: int | None = None  # inverse_sqrt decays as sqrt(decay_start / s); None = warmup_steps
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-9
    weight_decay: float = 0.0
    label_smoothing: float = 0.1
    # "fused": output projection + loss + their gradients in chunks of loss_chunk target
    # tokens, no N x V logits kept (training.loss); "plain": logits, then cross-entropy
    loss: Literal["fused", "plain"] = "fused"
    loss_chunk: int = 256  # measured: 128-1024 within 10% on 2 cores (d 128, V 8k)
    # R-Drop (Liang et al. 2021): > 0 runs each batch twice (two dropout masks, ~2x the step's
    # cost) and adds alpha x their symmetric KL; logits are materialized (no fused loss)
    rdrop_alpha: float = 0.0

    def __post_init__(self) -> None:
        check_fields(self)
        positive(self, "lr", "eps", "loss_chunk")
        probability(self, "label_smoothing")
        positive(self, "decay_start")
        if self.warmup_steps < 0 or self.weight_decay < 0 or self.rdrop_alpha < 0:
            raise ConfigError("OptimConfig.warmup_steps, weight_decay and rdrop_alpha must be >= 0, "
                              f"got {self.warmup_steps}, {self.weight_decay} and {self.rdrop_alpha}")
        if len(self.betas) != 2 or not all(0.0 <= b < 1.0 for b in self.betas):
            raise ConfigError(f"OptimConfig.betas must be two numbers in [0, 1), got {self.betas}")
        self.betas = tuple(self.betas)  # YAML gives lists
