"""Compute types at inference (CTranslate2's ``compute_type``): how the linear layers multiply.

Every linear layer of the network goes through ``layers.linear`` (the layers, the fused
decoder step, the output projection). A compute type sets the declared ``kernel`` of each
``layers.Linear`` of the model (:func:`prepare`); without one, ``layers.linear`` is
``F.linear``, so float32 is the same function as before, bit for bit. The float32
parameters themselves are never changed (state dicts, exports and the tied embedding stay
as they were); a kernel keeps its own copy of the weight in its format and makes it again
whenever the weight changes.

- ``int8``: weights quantized per output channel (symmetric, scale = max |w| / 127),
  activations per row as they come (each row divided by its max |x|, then the kernel's
  asymmetric uint8 min/max quantization), the integer matmul accumulated in int32 and
  dequantized to float32 (``quantized::linear_dynamic`` on oneDNN's packed weight: AMX/VNNI;
  2-4x faster than fbgemm's on the d_model 512 and vocabulary-sized layers of an AMX Xeon).
  Embeddings, norms, attention and softmax stay float32.
- ``bfloat16``: weights and matmul inputs in bfloat16, accumulated in float32 by oneDNN;
  the residual stream, norms, attention, softmax and the decoder cache stay float32 (each
  linear's output is rounded to bfloat16 once, then widened).
- ``auto``: the fastest of them this CPU runs natively for the model's size
  (:func:`resolve`; measured in docs/speed.md "Compute types").
"""

from __future__ import annotations

import warnings
from typing import get_args

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seq2seq.config.decoding import ComputeType
from seq2seq.fields import FieldError
from seq2seq.machine import cpu_flags
from seq2seq.model.layers import Linear

CHOICES: tuple[str, ...] = get_args(ComputeType)


# ---------------------------------------------------------------- what the CPU runs natively
def native_bf16() -> bool:
    """bfloat16 matmuls in hardware (AVX-512 BF16 or AMX) through oneDNN."""
    return (torch.backends.mkldnn.is_available()
            and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()))


def native_int8() -> bool:
    """oneDNN's dynamic int8 linear, on a CPU with VNNI or AMX int8 (without them int8 dot
    products saturate in 16 bits and oneDNN's path is slower than float32)."""
    return "onednn" in torch.backends.quantized.supported_engines and _cpu_has("vnni", "amx_int8")


def _cpu_has(*flags: str) -> bool:
    words = cpu_flags()
    return any(flag in words or f"avx512_{flag}" in words for flag in flags)


def resolve(compute_type: str, d_model: int) -> str:
    """The compute type that runs: ``auto`` becomes the fastest native one (int8 on a CPU
    with VNNI/AMX int8, else bfloat16 with native bf16, else float32); others stay."""
    if compute_type not in CHOICES:
        raise FieldError("{compute_type} {got!r}: not one of {choices}", got=compute_type,
                         choices=", ".join(CHOICES))
    if compute_type != "auto":
        return compute_type
    if d_model >= AUTO_MIN_D_MODEL and native_int8():
        return "int8"
    if d_model >= AUTO_MIN_D_MODEL and native_bf16():
        return "bfloat16"
    return "float32"


# Below it auto stays float32: at d_model 128 (the shipped models) only the output
# projection ran faster in int8/bf16, the other linears slower (quantizing the input costs
# more than the small matmul saves), and whole decodes on a shared machine were too noisy
# to show a gain (docs/speed.md "Compute types"); at 512 every linear ran 2-8x faster.
AUTO_MIN_D_MODEL = 512


# ---------------------------------------------------------------- kernels
class _Kernel:
    """A linear layer's weight in another format, remade whenever the weight changes."""

    def __init__(self) -> None:
        self.key: tuple | None = None
        self.weight = None

    def __call__(self, m: Linear | Weights, x: Tensor) -> Tensor:
        w, b = m.weight, m.bias
        if torch.is_grad_enabled() and w.requires_grad:  # training: float32 as ever
            return F.linear(x, w, b)
        key = (w.data_ptr(), w._version, None if b is None else (b.data_ptr(), b._version))
        if key != self.key:
            self.weight, self.key = self.pack(w.detach(), None if b is None else b.detach()), key
        return self.apply(x)

    def __deepcopy__(self, memo) -> _Kernel:
        return type(self)()  # a copy packs its own weight when first used


class Int8Linear(_Kernel):
    name = "int8"

    def pack(self, w: Tensor, b: Tensor | None):
        scale = (w.abs().amax(dim=1).float() / 127).clamp_min(1e-12)  # per output channel
        zero = torch.zeros(w.shape[0], dtype=torch.long)
        with warnings.catch_warnings():  # quantized tensors are deprecated, the kernel is not
            warnings.simplefilter("ignore")
            q = torch.quantize_per_channel(w.float(), scale, zero, 0, torch.qint8)
            previous = torch.backends.quantized.engine
            torch.backends.quantized.engine = "onednn"  # the packed weight keeps its engine
            try:
                return torch.ops.quantized.linear_prepack(q, None), None if b is None else b.float()
            finally:
                torch.backends.quantized.engine = previous

    def apply(self, x: Tensor) -> Tensor:
        # Each row scaled to max |x| = 1 first: the kernel's per-tensor quantization is then
        # per row (as CTranslate2's), so a sentence's output hardly depends on its batch
        # (92% vs 86% of greedy outputs equal to float32's on 100 test captions)
        packed, bias = self.weight
        r = x.abs().amax(dim=-1, keepdim=True).clamp_min(1e-12)
        y = torch.ops.quantized.linear_dynamic((x / r).contiguous(), packed, False)
        return y.mul_(r) if bias is None else torch.addcmul(bias, y, r)


class BFloat16Linear(_Kernel):
    name = "bfloat16"

    def pack(self, w: Tensor, b: Tensor | None):
        return w.to(torch.bfloat16), None if b is None else b.to(torch.bfloat16)

    def apply(self, x: Tensor) -> Tensor:
        w, b = self.weight
        return F.linear(x.to(torch.bfloat16), w, b).float()


KERNELS = {"int8": Int8Linear, "bfloat16": BFloat16Linear}


class Weights:
    """A weight ``(out, in)`` and bias ``(out,)`` that ``layers.linear`` takes as it takes a
    layer, in the compute type of ``like`` (a fresh kernel of its type packs these weights):
    weights made from a model's (the step's fused ones, a shortlist's rows of the output
    layer). A plain object, not a module: made per weights or per batch."""

    def __init__(self, weight: Tensor, bias: Tensor | None, like: Linear | Weights | None = None):
        self.weight, self.bias = weight, bias
        kernel = None if like is None else like.kernel
        self.kernel = None if kernel is None else type(kernel)()


def check(compute_type: str, device: torch.device) -> None:
    """``FieldError`` when ``compute_type`` (resolved) would run emulated on ``device``:
    ``bfloat16`` on a CPU without native bf16, ``int8`` off the CPU or without oneDNN's
    quantized engine (slower than float32 there)."""
    if compute_type == "int8" and device.type != "cpu":
        raise FieldError("{compute_type} int8: runs on the CPU only, not {device}; use "
                         "float32 or bfloat16 there", device=device)
    if compute_type == "bfloat16" and device.type == "cpu" and not native_bf16():
        raise FieldError("{compute_type} bfloat16: this CPU has no native bfloat16 (AVX-512 BF16 "
                         "or AMX); use float32 or int8")
    if compute_type == "int8" and "onednn" not in torch.backends.quantized.supported_engines:
        raise FieldError("{compute_type} int8: this torch build has no oneDNN quantized engine; "
                         "use float32")


def prepare(model: nn.Module, compute_type: str = "float32") -> nn.Module:
    """``model`` (a ``Seq2Seq``) set to run its linear layers in ``compute_type`` for
    inference (in place; returned). ``auto`` is resolved (:func:`resolve`); the type that
    runs is ``model.inference.compute_type``. A type that would run emulated is refused
    (:func:`check`)."""
    chosen = resolve(compute_type, model.arch.d_model)
    check(chosen, next(model.parameters()).device)
    kernel = KERNELS.get(chosen)
    for module in model.modules():
        if isinstance(module, Linear):
            module.kernel = None if kernel is None else kernel()
    model.inference.compute_type = chosen
    return model
