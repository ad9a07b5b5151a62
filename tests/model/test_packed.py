"""The prepacked output projection computes what ``nn.Linear`` does, follows every change of
the weight, stays out of autograd, and leaves the shipped model's translations unchanged."""

from __future__ import annotations

import copy

import pytest
import torch
from helpers import multi30k_lines

from seq2seq.config import DecodingConfig
from seq2seq.model.packed import PackedProjection
from seq2seq.translation.translator import Translator

pytestmark = pytest.mark.skipif(not PackedProjection().enabled, reason="no oneDNN in this torch")


@pytest.mark.parametrize("rows, d, v, bias", [(1, 16, 50, False), (37, 128, 8000, False),
                                              (300, 64, 1000, True)])
def test_packed_projection_equals_linear(rows, d, v, bias):
    torch.manual_seed(0)
    linear, x = torch.nn.Linear(d, v, bias=bias), torch.randn(rows, d)
    with torch.inference_mode():
        got, want = PackedProjection()(linear, x), linear(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_changed_weight_is_packed_again():
    torch.manual_seed(0)
    linear, x, packed = torch.nn.Linear(32, 100, bias=False), torch.randn(5, 32), PackedProjection()
    with torch.inference_mode():
        before = packed(linear, x)
    with torch.no_grad():
        linear.weight.mul_(2.0)  # in place, same storage: only the version tells
    with torch.inference_mode():
        after = packed(linear, x)
    torch.testing.assert_close(after, 2 * before, rtol=1e-5, atol=1e-5)
    linear.weight = torch.nn.Parameter(torch.zeros(100, 32))  # another tensor
    with torch.inference_mode():
        assert not packed(linear, x).any()


def test_a_layer_made_under_inference_mode_is_packed():
    """A model loaded inside ``torch.inference_mode`` has inference-tensor weights, which
    carry no version counter."""
    torch.manual_seed(0)
    with torch.inference_mode():
        linear, x = torch.nn.Linear(16, 40), torch.randn(3, 16)
        torch.testing.assert_close(PackedProjection()(linear, x), linear(x), rtol=1e-5, atol=1e-5)


def test_autograd_and_other_dtypes_take_the_plain_linear():
    linear, x = torch.nn.Linear(8, 20), torch.randn(3, 8)
    out = PackedProjection()(linear, x)  # grad enabled: training must see F.linear
    assert out.grad_fn is not None
    with torch.inference_mode():
        half = PackedProjection()(linear.double(), x.double())
    assert half.dtype == torch.float64


def test_copies_pack_their_own_weight():
    linear, packed = torch.nn.Linear(8, 20, bias=False), PackedProjection()
    with torch.inference_mode():
        packed(linear, torch.randn(2, 8))
    assert copy.deepcopy(packed).packed is None


@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_shipped_model_translates_the_same_packed_or_not(method):
    texts = multi30k_lines("de", 150, "val")
    tr = Translator.from_checkpoint("multi30k_de_en_tiny", DecodingConfig(method=method))
    packed = tr.translate(texts)
    tr.model.packed_output.enabled = False
    assert tr.translate(texts) == packed
