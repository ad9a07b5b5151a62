"""Our dropout is ``nn.Dropout``'s distribution and gradient with a cheaper mask."""

from __future__ import annotations

import pytest
import torch

from seq2seq.model.dropout import Dropout, dropout


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_keeps_one_minus_p_and_scales_the_kept(p):
    x = torch.ones(400_000)
    y = dropout(x, p, training=True)
    kept = y != 0
    assert abs(kept.float().mean().item() - (1 - p)) < 4e-3  # ~5 sigma at n = 4e5
    torch.testing.assert_close(y[kept], torch.full_like(y[kept], 1 / (1 - p)))
    assert abs(y.mean().item() - 1.0) < 6e-3  # unbiased: E[y] = x


def test_gradient_is_the_same_mask():
    x = torch.randn(64, 32, requires_grad=True)
    y = dropout(x, 0.3, training=True)
    (g,) = torch.autograd.grad(y, x, torch.ones_like(y))
    torch.testing.assert_close(y.detach(), x.detach() * g)  # y = x * mask, dy/dx = mask


def test_off_in_eval_at_zero_and_all_at_one():
    x = torch.randn(10, 4)
    module = Dropout(0.3).eval()
    assert module(x) is x
    assert dropout(x, 0.0, training=True) is x
    assert torch.equal(dropout(x, 1.0, training=True), torch.zeros_like(x))
    with pytest.raises(ValueError, match="dropout probability"):
        Dropout(1.5)


def test_seeded_masks_repeat():
    """Exact resume restores torch's RNG; the same seed must give the same mask."""
    x = torch.randn(100)
    torch.manual_seed(3)
    a = dropout(x, 0.3, training=True)
    torch.manual_seed(3)
    assert torch.equal(dropout(x, 0.3, training=True), a)
