"""Linear layers at inference with their weights laid out for the CPU's GEMM: the output
projection (:class:`PackedProjection`) and the one-token step's (:func:`prepare_linear`).

A search projects every decoder row onto the whole vocabulary each step: ``(R, d_model) x
(d_model, V)``, the largest matmul of a step (a quarter of greedy's time at Tiny size).
oneDNN runs it from a weight laid out once in its blocked format ~1.6-1.8x faster than
``F.linear`` on the plain weight (2-core AMD EPYC, d_model 128, V 8000, R 64-256; the
decoder's smaller linears gain nothing, so only this one is packed).

One row (greedy decoding of one sentence) is the exception: a GEMV that reads the whole
weight, fastest from a plain ``W^T`` copy through ``addmm`` (0.12 against 0.20 ms a step
inside a one-sentence search, 1 thread, 2-core AMD EPYC with AVX2; 85 against 123 us alone);
from two rows on the packed copy wins (5 rows: 195 against 337 us), so both are kept.

The packed copy is made on first use and again whenever the weight changes (another
tensor, or an in-place update: training, ``load_state_dict``). ``output.project`` uses it
only where it computes the same function (:meth:`PackedProjection.applies`: CPU, float32,
2-D input, no autograd, a build with oneDNN); everything else takes ``F.linear``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

ROWS_HINT = 256  # the row count oneDNN lays the weight out for; any count works


def _supported() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


class PackedProjection:
    """A linear layer's ``x W^T + b`` through a prepacked copy of ``W``, where that is the
    same function (:meth:`applies`); ``output.project`` decides."""

    def __init__(self) -> None:
        self.key: tuple | None = None
        self.packed: Tensor | None = None
        self.columns: Tensor | None = None  # W^T (in, out), contiguous: the one-row GEMV's
        self.enabled = _supported()

    def applies(self, weight: Tensor, x: Tensor) -> bool:
        """Whether ``self(layer, x)`` computes ``F.linear``'s function for ``x``: 2-D float32
        rows on the CPU, no autograd, a oneDNN build that lays the weight out."""
        return (self.enabled and x.dim() == 2 and x.device.type == "cpu"
                and x.dtype == weight.dtype == torch.float32 and not torch.is_grad_enabled())

    def __call__(self, layer, x: Tensor) -> Tensor:
        """``layer``'s output ``(R, out)`` for rows ``x (R, in)`` where :meth:`applies`."""
        w = layer.weight
        # _version: in-place updates; an inference tensor (a model loaded under
        # torch.inference_mode) has no version counter, and is not trained in place
        key = (w.data_ptr(), 0 if w.is_inference() else w._version, tuple(w.shape))
        if key != self.key:
            try:
                self.packed = torch.ops.mkldnn._reorder_linear_weight(w.detach(), ROWS_HINT)
            except RuntimeError:  # a oneDNN build without this layout: F.linear from now on
                self.enabled = False
                return F.linear(x, w, layer.bias)
            self.columns = w.detach().t().contiguous()
            self.key = key
        if x.shape[0] == 1:  # one row (greedy, one sentence): the module docstring
            return torch.mm(x, self.columns) if layer.bias is None else torch.addmm(
                layer.bias, x, self.columns)
        return torch.ops.mkldnn._linear_pointwise(x.contiguous(), self.packed, layer.bias,
                                                  "none", [], "")

    def __deepcopy__(self, memo) -> PackedProjection:
        return PackedProjection()  # a copy packs its own weight when first used


# Below this many weights a prepacked oneDNN call loses to F.linear: its ~12 us fixed cost
# per call outweighs the layout's gain (1 thread, 2-core AMD EPYC AVX-512: 128x128 at 1 row
# 16 vs 4 us, 128x512 at 64 rows 90 vs 100 us; 512x512 even at 1 row, 2.5x faster at 5).
PACK_MIN_WEIGHTS = 512 * 512

# activations oneDNN applies inside the linear call: (its name, its algorithm)
FUSED_ACTIVATIONS = {F.relu: ("relu", ""), F.gelu: ("gelu", "none"), F.silu: ("swish", "")}


class Packed:
    """``act(x W^T + b)`` of float32 CPU rows ``x (R, in)`` through a weight ``W (out, in)``
    prepacked once: one operator call. Built by :func:`pack`; no autograd."""

    def __init__(self, packed: Tensor, bias: Tensor | None, act: tuple[str, str]):
        self.packed, self.bias, (self.act, self.algorithm) = packed, bias, act

    def __call__(self, x: Tensor) -> Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, self.act, [],
                                                  self.algorithm)


class Plain:
    """``act(b + x W^T)`` of rows ``x (R, in)`` as one ``addmm`` over ``W``'s transposed view
    (``F.linear``'s own dispatch costs a few more calls per step); no autograd."""

    def __init__(self, weight: Tensor, bias: Tensor, act=None):
        self.weight_t, self.bias, self.act = weight.detach().t(), bias.detach(), act

    def __call__(self, x: Tensor) -> Tensor:
        y = torch.addmm(self.bias, x, self.weight_t)
        return y if self.act is None else self.act(y)


def prepare_linear(weight: Tensor, bias: Tensor, act=None) -> Packed | Plain | None:
    """A float32 CPU linear layer (with ``act``) laid out for inference calls: prepacked
    for oneDNN where that is faster (:data:`PACK_MIN_WEIGHTS` weights or more), else one
    ``addmm``; None for other dtypes and devices."""
    if not (weight.device.type == "cpu" and weight.dtype == torch.float32):
        return None
    if weight.numel() >= PACK_MIN_WEIGHTS:
        fast = pack(weight, bias, act)
        if fast is not None:
            return fast
    return Plain(weight, bias, act)


def pack(weight: Tensor, bias: Tensor | None, act=None) -> Packed | None:
    """:class:`Packed` of a float32 CPU weight, with ``act`` (None, or a key of
    :data:`FUSED_ACTIVATIONS`) fused; None where oneDNN cannot take it."""
    if not (_supported() and weight.device.type == "cpu" and weight.dtype == torch.float32
            and (act is None or act in FUSED_ACTIVATIONS)):
        return None
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), ROWS_HINT)
    except RuntimeError:  # a oneDNN build without this layout
        return None
    return Packed(packed, None if bias is None else bias.detach(),
                  FUSED_ACTIVATIONS.get(act, ("none", "")))
