"""The training loss: label-smoothed cross-entropy per target token, padding excluded.

Logits are computed only for the ``N`` non-pad target positions (``Seq2Seq.forward(...,
keep)``), so the vocabulary projection and softmax never run on padding.

R-Drop (Liang et al. 2021, :func:`rdrop_loss`) adds a consistency term between two dropout
passes over the same batch; :func:`fused_rdrop_loss` is the same number computed the fused
way below, both passes' rows of a chunk at a time.

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


def _rdrop_chunk_loss_and_grads(h: Tensor, weight: Tensor, targets: Tensor, smoothing: float,
                                alpha: float, need_grads: bool) -> tuple[Tensor, Tensor | None]:
    """:func:`rdrop_loss` of one chunk: ``h (2c, d)``, the first pass's ``c`` rows then the
    second's, against ``targets (c,)``; on request d loss / d logits ``(2c, V)``. With
    ``D = log p1 - log p2``, d(sym KL)/d z1 = p1 (D - <p1, D>) + p1 - p2, and mirrored for z2."""
    lp1, lp2 = (h @ weight.t()).log_softmax(1).chunk(2)  # (c, V) each
    V, t = lp1.shape[1], targets[:, None]
    ce = sum(-(1 - smoothing) * lp.gather(1, t).sum() - smoothing * lp.mean(1).sum()
             for lp in (lp1, lp2))
    p1, p2 = lp1.exp(), lp2.exp()
    dlp = lp1.sub_(lp2)  # in place: D, the log-probs are not needed again
    dp = p1 - p2
    loss = 0.5 * ce + 0.25 * alpha * (dp * dlp).sum()
    if not need_grads:
        return loss, None
    grads = []
    for p, sign in ((p1, 1.0), (p2, -1.0)):  # the CE term's 0.5 (p - smoothed one-hot) + KL's
        g = dlp - (p * dlp).sum(1, keepdim=True)
        g.mul_(p).add_(dp).mul_(sign * 0.25 * alpha).add_(p, alpha=0.5).sub_(0.5 * smoothing / V)
        grads.append(g.scatter_add_(1, t, torch.full_like(t, 0.5 * (smoothing - 1.0), dtype=g.dtype)))
    return loss, torch.cat(grads)


def _score_chunks(hidden: Tensor, weight: Tensor, targets: Tensor, smoothing: float, chunk: int,
                  alpha: float | None, grads: tuple[Tensor, Tensor] | None = None) -> Tensor:
    """Summed loss ``chunk`` targets at a time; ``grads = (grad_h, grad_w)`` are filled too.
    ``alpha`` None: label smoothing over ``hidden (N, d)``; a number: R-Drop over ``hidden
    (2N, d)``, each chunk taking the same rows of both passes."""
    n_pass, d = (1 if alpha is None else 2), hidden.shape[1]
    total = hidden.new_zeros(())
    for s in range(0, targets.shape[0], chunk):
        h = hidden.reshape(n_pass, -1, d)[:, s : s + chunk].reshape(-1, d)  # (n_pass c, d)
        t = targets[s : s + chunk]
        if alpha is None:
            loss, grad = _chunk_loss_and_grads(h, weight, t, smoothing, grads is not None)
        else:
            loss, grad = _rdrop_chunk_loss_and_grads(h, weight, t, smoothing, alpha, grads is not None)
        total += loss
        if grads is not None:
            grad_h, grad_w = grads
            grad_h.view(n_pass, -1, d)[:, s : s + chunk] = (grad @ weight).view(n_pass, -1, d)
            grad_w.addmm_(grad.t(), h)  # (V, d)
    return total


class _FusedProjectionLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, targets: Tensor, smoothing: float,
                chunk: int, alpha: float | None) -> Tensor:
        grads = torch.empty_like(hidden), torch.zeros_like(weight)
        total = _score_chunks(hidden, weight, targets, smoothing, chunk, alpha, grads)
        ctx.save_for_backward(*grads)
        return total

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        grad_h, grad_w = ctx.saved_tensors
        gh = grad_h * grad_out if ctx.needs_input_grad[0] else None
        gw = grad_w * grad_out if ctx.needs_input_grad[1] else None
        return gh, gw, None, None, None, None


def _fused(hidden: Tensor, weight: Tensor, targets: Tensor, smoothing: float, chunk: int,
           alpha: float | None) -> Tensor:
    if torch.is_autocast_enabled("cpu") or hidden.dtype != torch.float32:  # one precision, fp32
        hidden, weight = hidden.float(), weight.float()
    with torch.autocast("cpu", enabled=False):
        if torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad):
            return _FusedProjectionLoss.apply(hidden, weight, targets, smoothing, chunk, alpha)
        return _score_chunks(hidden, weight, targets, smoothing, chunk, alpha)  # no backward


def fused_projection_loss(hidden: Tensor, weight: Tensor, targets: Tensor, smoothing: float,
                          chunk: int = 1024) -> Tensor:
    """Summed label-smoothed loss of ``hidden (N, d) @ weight (V, d)^T`` against ``targets
    (N,)``: equal to ``label_smoothed_loss(hidden @ weight.T, targets, smoothing)`` to fp32
    rounding, in ``chunk``-row pieces (fp32 compute whatever the inputs' dtype)."""
    return _fused(hidden, weight, targets, smoothing, chunk, None)


def fused_rdrop_loss(hidden: Tensor, weight: Tensor, targets: Tensor, smoothing: float,
                     alpha: float, chunk: int = 256) -> Tensor:
    """:func:`rdrop_loss` of ``hidden (2N, d) @ weight (V, d)^T`` (the first pass's ``N``
    rows, then the second's) against ``targets (N,)``, to fp32 rounding, without any
    ``(2N, V)`` tensor: both passes' rows of a chunk are scored and differentiated together."""
    return _fused(hidden, weight, targets, smoothing, chunk, alpha)


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
