"""The fused, chunked projection + label-smoothed loss equals the plain one (logits, then
``F.cross_entropy``) in value and gradients, to fp32 rounding."""

from __future__ import annotations

import pytest
import torch

from seq2seq.config import ModelConfig
from seq2seq.model import Seq2Seq
from seq2seq.training.loss import fused_projection_loss, label_smoothed_loss


def _inputs(N=301, d=16, V=97, seed=0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(N, d, generator=g, requires_grad=True)
    w = torch.randn(V, d, generator=g, requires_grad=True)
    return h, w, torch.randint(0, V, (N,), generator=g)


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
@pytest.mark.parametrize("chunk", [1, 64, 4096])  # one row, uneven chunks, one chunk
def test_fused_equals_plain_value_and_gradients(smoothing, chunk):
    h, w, y = _inputs()
    plain = label_smoothed_loss(h @ w.t(), y, smoothing)
    gh, gw = torch.autograd.grad(plain * 0.7, (h, w))  # a non-unit upstream gradient
    fused = fused_projection_loss(h, w, y, smoothing, chunk=chunk)
    fh, fw = torch.autograd.grad(fused * 0.7, (h, w))
    torch.testing.assert_close(fused, plain, rtol=1e-5, atol=1e-3)
    torch.testing.assert_close(fh, gh, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(fw, gw, rtol=1e-4, atol=1e-5)


def test_without_grad_gives_the_same_loss():
    h, w, y = _inputs()
    with torch.no_grad():
        assert torch.allclose(fused_projection_loss(h, w, y, 0.1, chunk=50),
                              label_smoothed_loss(h @ w.t(), y, 0.1), rtol=1e-5)


def test_tied_weights_through_the_model():
    """The output weight is the target embedding: gradients from the loss and from the
    embedding lookup must add up exactly as with the plain loss."""
    arch = ModelConfig(src_vocab_size=40, tgt_vocab_size=40, d_model=16, n_heads=2, d_ff=32,
                       encoder_layers=1, decoder_layers=1, dropout=0.0)
    model = Seq2Seq(arch)
    src, tgt_in, tgt_out = (torch.randint(4, 40, (3, 6)) for _ in range(3))
    keep = torch.ones_like(tgt_out, dtype=torch.bool)
    keep[0, 4:] = False
    grads = []
    for fused in (False, True):
        model.zero_grad()
        if fused:
            h = model(src, tgt_in, keep, project=False)
            loss = fused_projection_loss(h, model.output.weight, tgt_out[keep], 0.1, chunk=5)
        else:
            loss = label_smoothed_loss(model(src, tgt_in, keep), tgt_out[keep], 0.1)
        loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    for name, g in grads[0].items():
        torch.testing.assert_close(grads[1][name], g, rtol=1e-4, atol=1e-6, msg=name)


def test_bf16_autocast_computes_in_fp32():
    h, w, y = _inputs()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fused = fused_projection_loss(h, w, y, 0.1)
    assert fused.dtype == torch.float32
    torch.testing.assert_close(fused, label_smoothed_loss(h @ w.t(), y, 0.1), rtol=1e-5, atol=1e-3)
