"""The prepacked output projection computes what ``nn.Linear`` does, follows every change of
the weight, is taken only where it is the same function (``output.project``: no autograd,
float32, 2-D), and leaves the shipped model's translations unchanged."""

from __future__ import annotations

import copy

import pytest
import torch
from helpers import multi30k_lines

from seq2seq.config import DecodingConfig
from seq2seq.model.inference.output import project
from seq2seq.model.inference.packed import PackedProjection
from seq2seq.model.layers import Linear
from seq2seq.translation.translator import Translator

pytestmark = pytest.mark.skipif(not PackedProjection().enabled, reason="no oneDNN in this torch")


@pytest.mark.parametrize("rows, d, v, bias", [(1, 16, 50, False), (1, 128, 8000, True),
                                              (2, 128, 8000, False), (37, 128, 8000, False),
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
        before, one = packed(linear, x), packed(linear, x[:1])  # the packed copy and W^T's
    with torch.no_grad():
        linear.weight.mul_(2.0)  # in place, same storage: only the version tells
    with torch.inference_mode():
        after = packed(linear, x)
        torch.testing.assert_close(packed(linear, x[:1]), 2 * one, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(after, 2 * before, rtol=1e-5, atol=1e-5)
    linear.weight = torch.nn.Parameter(torch.zeros(100, 32))  # another tensor
    with torch.inference_mode():
        assert not packed(linear, x).any() and not packed(linear, x[:1]).any()


def test_a_layer_made_under_inference_mode_is_packed():
    """A model loaded inside ``torch.inference_mode`` has inference-tensor weights, which
    carry no version counter."""
    torch.manual_seed(0)
    with torch.inference_mode():
        linear, x = torch.nn.Linear(16, 40), torch.randn(3, 16)
        torch.testing.assert_close(PackedProjection()(linear, x), linear(x), rtol=1e-5, atol=1e-5)


def test_autograd_other_dtypes_and_shapes_take_the_plain_linear():
    """``output.project`` takes the packed copy only where it is ``F.linear``'s function."""
    layer, x, packed = Linear(8, 20), torch.randn(3, 8), PackedProjection()
    out = project(layer, x, packed)  # grad enabled: training must see F.linear
    assert out.grad_fn is not None
    with torch.inference_mode():
        assert project(Linear(8, 20).double(), x.double(), packed).dtype == torch.float64
        assert project(layer, x[None], packed).shape == (1, 3, 20)  # 3-D
    assert packed.packed is None  # none of them packed the weight
    with torch.inference_mode():
        torch.testing.assert_close(project(layer, x, packed), layer(x), rtol=1e-5, atol=1e-5)
    assert packed.packed is not None


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
    tr.model.inference.packed_output.enabled = False
    assert tr.translate(texts) == packed


def test_a_compute_type_kernel_comes_before_the_packed_copy():
    layer, x, packed = Linear(8, 20), torch.randn(3, 8), PackedProjection()
    layer.kernel = lambda m, rows: torch.zeros(rows.shape[0], m.weight.shape[0])  # a stand-in
    with torch.inference_mode():
        assert not project(layer, x, packed).any() and not layer(x).any()
    assert packed.packed is None
