"""The training loss: label-smoothed cross-entropy per target token, padding excluded.

Logits are computed only for the ``N`` non-pad target positions (``Seq2Seq.forward(...,
keep)``), so the vocabulary projection and softmax never run on padding.

R-Drop (Liang et al. 2021, :func:`rdrop_loss`) adds a consistency term between two dropout
passes over the same batch; it needs both full distributions, so it works on logits.

Two implementations of the same number:
- :func:`label_smoothed_loss` on logits ``(N, V)`` (``F.cross_entropy``): the reference.
- :func:`fused_projection_loss` on decoder states ``(N, d)`` and the output weight
  ``(V, d)``: projects, scores and differentiates ``chunk`` rows at a time, so no ``N x V``
  logits, log-probs or gradient tensor is ever materialized (at N = 4k tokens and V = 8k
  each would be 128 MB, streamed through memory several times per step). The gradients are
  computed in the forward pass, chunk by chunk while the logits are hot in cache, and the
  backward pass only scales them: the same three matmuls as the plain version, no more.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def label_smoothed_loss(logits: Tensor, targets: Tensor, smoothing: float) -> Tensor:
    """Summed loss of ``logits (N, V)`` against ``targets (N,)``: ``(1 - eps)`` of the target's
    negative log-prob plus ``eps`` of the mean negative log-prob over the vocabulary
    (Szegedy et al. 2016, as ``F.cross_entropy(label_smoothing=eps)``); fp32 whatever the
    logits' precision."""
    return F.cross_entropy(logits.float(), targets, label_smoothing=smoothing, reduction="sum")


def _chunk_loss_and_grads(h: Tensor, weight: Tensor, targets: Tensor, smoothing: float,
                          need_grads: bool) -> tuple[Tensor, Tensor | None]:
    """Loss of one chunk ``h (c, d)`` and, on request, d loss / d logits ``(c, V)``."""
    logits = h @ weight.t()  # (c, V)
    V = logits.shape[1]
    target_logit = logits.gather(1, targets[:, None])  # (c, 1)
    mean_logit = logits.mean(1, keepdim=True)
    # One exp pass serves both the log-sum-exp and the softmax (the gradient).
    top = logits.amax(1, keepdim=True)
    exp = logits.sub_(top).exp_()  # in place: the logits are not needed again
    total = exp.sum(1, keepdim=True)
    lse = top + total.log()  # (c, 1)
    # -log p(target) = lse - z_t;  mean_v -log p(v) = lse - mean(z)
    loss = ((1 - smoothing) * (lse - target_logit) + smoothing * (lse - mean_logit)).sum()
    if not need_grads:
        return loss, None
    grad = exp.div_(total)  # softmax
    grad.sub_(smoothing / V)
    grad.scatter_add_(1, targets[:, None], torch.full_like(target_logit, smoothing - 1.0))
    return loss, grad


class _FusedProjectionLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, targets: Tensor, smoothing: float,
                chunk: int) -> Tensor:
        total = hidden.new_zeros(())
        grad_h, grad_w = torch.empty_like(hidden), torch.zeros_like(weight)
        for s in range(0, hidden.shape[0], chunk):
            h = hidden[s : s + chunk]
            loss, grad = _chunk_loss_and_grads(h, weight, targets[s : s + chunk], smoothing, True)
            total += loss
            torch.mm(grad, weight, out=grad_h[s : s + chunk])  # (c, d)
            grad_w.addmm_(grad.t(), h)  # (V, d)
        ctx.save_for_backward(grad_h, grad_w)
        return total

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        grad_h, grad_w = ctx.saved_tensors
        gh = grad_h * grad_out if ctx.needs_input_grad[0] else None
        gw = grad_w * grad_out if ctx.needs_input_grad[1] else None
        return gh, gw, None, None, None


def fused_projection_loss(hidden: Tensor, weight: Tensor, targets: Tensor, smoothing: float,
                          chunk: int = 1024) -> Tensor:
    """Summed label-smoothed loss of ``hidden (N, d) @ weight (V, d)^T`` against ``targets
    (N,)``: equal to ``label_smoothed_loss(hidden @ weight.T, targets, smoothing)`` to fp32
    rounding, in ``chunk``-row pieces (fp32 compute whatever the inputs' dtype)."""
    dtype = hidden.dtype
    if torch.is_autocast_enabled("cpu") or dtype != torch.float32:  # one precision, fp32
        hidden, weight = hidden.float(), weight.float()
    with torch.autocast("cpu", enabled=False):
        if torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad):
            return _FusedProjectionLoss.apply(hidden, weight, targets, smoothing, chunk)
        # no backward to come (validation): the loss alone, one matmul a chunk
        total = hidden.new_zeros(())
        for s in range(0, hidden.shape[0], chunk):
            rows = slice(s, s + chunk)
            total += _chunk_loss_and_grads(hidden[rows], weight, targets[rows], smoothing, False)[0]
        return total


def rdrop_loss(logits: Tensor, targets: Tensor, smoothing: float, alpha: float) -> Tensor:
    """Summed R-Drop loss of two dropout passes' ``logits (2N, V)`` (first pass's ``N`` rows,
    then the second's) against ``targets (N,)``: the paper's ``L1 + L2 + alpha/2 (KL(p1||p2)
    + KL(p2||p1))`` halved, so the scale is one pass's and ``alpha`` is the paper's."""
    lp1, lp2 = logits.float().log_softmax(-1).chunk(2)  # (N, V) each: one log-softmax serves both terms
    ce = sum((1 - smoothing) * F.nll_loss(lp, targets, reduction="sum") - smoothing * lp.mean(-1).sum()
             for lp in (lp1, lp2))
    # KL(p1||p2) + KL(p2||p1) = sum_v (p1 - p2) (log p1 - log p2): one pass over (N, V)
    sym_kl = ((lp1.exp() - lp2.exp()) * (lp1 - lp2)).sum()
    return 0.5 * ce + 0.25 * alpha * sym_kl
