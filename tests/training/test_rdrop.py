"""R-Drop (``OptimConfig.rdrop_alpha``): the loss equals the paper's formula written with
PyTorch's own ``F.kl_div``, is the plain loss when the two passes agree, the fused version
(no ``(2N, V)`` logits) equals it in value and gradients, and the module's two passes really
differ only by their dropout masks."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from seq2seq.config import ConfigError, ModelConfig, OptimConfig
from seq2seq.data.batch import collate
from seq2seq.model import Seq2Seq
from seq2seq.training.loss import fused_rdrop_loss, label_smoothed_loss, rdrop_loss
from seq2seq.training.module import Seq2SeqModule


def _reference(first, second, targets, smoothing, alpha):
    """Liang et al. (2021), eq. 3, halved: summed over tokens."""
    nll = sum(F.cross_entropy(z, targets, label_smoothing=smoothing, reduction="sum")
              for z in (first, second))
    lp1, lp2 = F.log_softmax(first, -1), F.log_softmax(second, -1)
    kl12 = F.kl_div(lp2, lp1, log_target=True, reduction="sum")  # KL(p1 || p2)
    kl21 = F.kl_div(lp1, lp2, log_target=True, reduction="sum")  # KL(p2 || p1)
    return 0.5 * (nll + alpha / 2 * (kl12 + kl21))


@pytest.mark.parametrize("alpha", [0.0, 0.5, 5.0])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_equals_the_papers_loss_in_value_and_gradient(alpha, smoothing):
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(2 * 37, 53, generator=g, requires_grad=True)
    targets = torch.randint(0, 53, (37,), generator=g)
    ours = rdrop_loss(logits, targets, smoothing, alpha)
    ref = _reference(*logits.chunk(2), targets, smoothing, alpha)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-4)
    (g_ours,) = torch.autograd.grad(ours, logits)
    (g_ref,) = torch.autograd.grad(ref, logits)
    torch.testing.assert_close(g_ours, g_ref, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("chunk", [1, 8, 64])
@pytest.mark.parametrize("alpha,smoothing", [(0.5, 0.0), (5.0, 0.1)])
def test_the_fused_loss_equals_it_in_value_and_gradients(alpha, smoothing, chunk):
    """Chunks that split the 37 targets unevenly, or hold them all; the projection's
    gradients (hidden states and output weight) as autograd gives them through the logits."""
    g = torch.Generator().manual_seed(4)
    hidden = torch.randn(2 * 37, 12, generator=g, requires_grad=True)
    weight = torch.randn(53, 12, generator=g, requires_grad=True)
    targets = torch.randint(0, 53, (37,), generator=g)
    ref = rdrop_loss(hidden @ weight.t(), targets, smoothing, alpha)
    ours = fused_rdrop_loss(hidden, weight, targets, smoothing, alpha, chunk)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-4)
    for a, b in zip(torch.autograd.grad(3.0 * ours, (hidden, weight)),
                    torch.autograd.grad(3.0 * ref, (hidden, weight)), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    with torch.no_grad():  # no backward to come: the loss alone
        torch.testing.assert_close(fused_rdrop_loss(hidden, weight, targets, smoothing, alpha, chunk),
                                   ref.detach(), rtol=1e-5, atol=1e-4)


def test_two_equal_passes_give_the_plain_loss():
    g = torch.Generator().manual_seed(2)
    one = torch.randn(20, 31, generator=g)
    targets = torch.randint(0, 31, (20,), generator=g)
    torch.testing.assert_close(rdrop_loss(torch.cat([one, one]), targets, 0.1, 5.0),
                               label_smoothed_loss(one, targets, 0.1))


def test_the_consistency_term_is_positive_when_passes_differ():
    g = torch.Generator().manual_seed(3)
    logits, targets = torch.randn(2 * 10, 17, generator=g), torch.randint(0, 17, (10,), generator=g)
    assert rdrop_loss(logits, targets, 0.1, 1.0) > rdrop_loss(logits, targets, 0.1, 0.0)


def _module(dropout: float, alpha: float, loss: str = "fused") -> tuple[Seq2SeqModule, object]:
    arch = ModelConfig(src_vocab_size=41, tgt_vocab_size=41, d_model=16, n_heads=2, d_ff=24,
                       encoder_layers=2, decoder_layers=2, dropout=dropout, norm_position="pre")
    module = Seq2SeqModule(arch, OptimConfig(rdrop_alpha=alpha, loss=loss, loss_chunk=4))
    module.model = Seq2Seq(arch)
    batch = collate([{"src_ids": list(range(4, 4 + n)), "tgt_ids": list(range(5, 5 + m))}
                     for n, m in ((7, 5), (3, 9), (5, 2))])  # padded both sides
    return module, batch


@pytest.mark.parametrize("training", [True, False])
def test_without_dropout_the_module_loss_is_the_plain_loss(training):
    """No dropout: both copies compute the same distribution, so R-Drop adds nothing; the
    duplicated batch keeps padding out and each copy's rows aligned with the targets."""
    module, batch = _module(dropout=0.0, alpha=5.0)
    plain, _ = _module(dropout=0.0, alpha=0.0)
    plain.model.load_state_dict(module.model.state_dict())
    module.train(training)
    plain.train(training)
    (ours, n), (ref, n_ref) = module.loss(batch), plain.loss(batch)
    assert n == n_ref == int((batch.tgt_out != 0).sum())
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-6)


def test_with_dropout_the_two_passes_differ():
    """In training the copies draw different dropout masks (the term is > 0); in evaluation
    R-Drop is off and the loss is the plain one."""
    module, batch = _module(dropout=0.3, alpha=1.0)
    no_kl, _ = _module(dropout=0.3, alpha=1e-12)
    no_kl.model.load_state_dict(module.model.state_dict())
    module.train()
    no_kl.train()
    torch.manual_seed(7)
    with_kl = module.loss(batch)[0]
    torch.manual_seed(7)  # the same masks
    assert with_kl > no_kl.loss(batch)[0]
    module.eval()
    plain, _ = _module(dropout=0.3, alpha=0.0)
    plain.model.load_state_dict(module.model.state_dict())
    plain.eval()
    torch.testing.assert_close(module.loss(batch)[0], plain.loss(batch)[0])


def test_the_module_takes_the_fused_path_with_the_same_loss_and_gradients():
    """Dropout on, the same masks: ``loss: fused`` (the default) and ``loss: plain`` give one
    loss and one gradient for every weight; the fused step builds no (2N, V) logits."""
    (fused, batch), (plain, _) = _module(0.3, 5.0, "fused"), _module(0.3, 5.0, "plain")
    plain.model.load_state_dict(fused.model.state_dict())
    assert fused.model.output.bias is None  # the fused path's condition
    results = []
    for module in (fused, plain):
        module.train()
        torch.manual_seed(7)
        loss, _ = module.loss(batch)
        results.append((loss, torch.autograd.grad(loss, list(module.model.parameters()))))
    (a, grads_a), (b, grads_b) = results
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    for ga, gb in zip(grads_a, grads_b, strict=True):
        torch.testing.assert_close(ga, gb, rtol=1e-4, atol=1e-6)


def test_a_negative_alpha_is_refused_by_name():
    with pytest.raises(ConfigError, match="rdrop_alpha"):
        OptimConfig(rdrop_alpha=-1.0)
