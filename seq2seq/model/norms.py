"""Norms and where they sit: the one place that decides Post-LN vs Pre-LN.

:func:`norm_placement` answers both questions the choice raises (where each sublayer's
norm goes, and whether the stack ends with a norm); ``Residual``, the model's stacks and
both exporters ask it rather than reading ``ModelConfig.norm_position`` themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor, nn

from seq2seq.config import ModelConfig
from seq2seq.model.dropout import Dropout


def make_norm(kind: str, d_model: int, eps: float = 1e-5) -> nn.Module:
    """The norm factory: ``layernorm`` (mean, variance, bias) or ``rmsnorm`` (scale only)."""
    if kind == "layernorm":
        return nn.LayerNorm(d_model, eps=eps)
    if kind == "rmsnorm":
        return nn.RMSNorm(d_model, eps=eps)
    raise ValueError(f"norm: expected 'layernorm' or 'rmsnorm', got {kind!r}")


@dataclass(frozen=True)
class NormPlacement:
    pre: bool  # norm on the sublayer's input (Pre-LN), else after the residual sum (Post-LN)
    final_norm: bool  # each stack ends with a norm


def norm_placement(arch: ModelConfig) -> NormPlacement:
    """Post-LN (Vaswani et al. 2017): ``norm(x + f(x))``, no final norm. Pre-LN:
    ``x + f(norm(x))``, which leaves the residual stream un-normalized, so the stack must
    end with a norm."""
    pre = arch.norm_position == "pre"
    return NormPlacement(pre=pre, final_norm=pre)


def final_norm(arch: ModelConfig) -> nn.Module:
    """The norm that ends an encoder or decoder stack (identity when there is none)."""
    if norm_placement(arch).final_norm:
        return make_norm(arch.norm, arch.d_model, arch.norm_eps)
    return nn.Identity()


class Residual(nn.Module):
    """One sublayer with its residual connection, norm and dropout.

    post: ``norm(x + dropout(f(x)))``;  pre: ``x + dropout(f(norm(x)))``.
    ``f`` returns ``(y, aux)``; ``aux`` (cache entries, attention weights) passes through.
    """

    def __init__(self, arch: ModelConfig):
        super().__init__()
        self.pre = norm_placement(arch).pre
        self.norm = make_norm(arch.norm, arch.d_model, arch.norm_eps)
        self.dropout = Dropout(arch.dropout)

    def forward(self, x: Tensor, f: Callable[[Tensor], tuple[Tensor, object]]):
        if self.pre:
            y, aux = f(self.norm(x))
            return x + self.dropout(y), aux
        y, aux = f(x)
        return self.norm(x + self.dropout(y)), aux
