"""The training loss: label-smoothed cross-entropy per target token, padding excluded.

Logits are computed only for the ``N`` non-pad target positions (``Seq2Seq.forward(...,
keep)``), so the vocabulary projection and softmax never run on padding.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor


def label_smoothed_loss(logits: Tensor, targets: Tensor, smoothing: float) -> Tensor:
    """Summed loss of ``logits (N, V)`` against ``targets (N,)``: ``(1 - eps)`` of the target's
    negative log-prob plus ``eps`` of the mean negative log-prob over the vocabulary
    (Szegedy et al. 2016, as ``F.cross_entropy(label_smoothing=eps)``); fp32 whatever the
    logits' precision."""
    return F.cross_entropy(logits.float(), targets, label_smoothing=smoothing, reduction="sum")
