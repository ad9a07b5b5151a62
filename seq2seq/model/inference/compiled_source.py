"""One sentence's source side compiled ahead of time (``--compile``): the encoder, then each
decoder layer's cross-attention K^T and V and the padding bias, laid out as the one-token
step reads them (``DecoderCache.cross_layout``), in one AOTInductor package.

Eagerly, a one-sentence search starts with three stages: the encoder (its batch package,
whose parallel kernels cost more than they share out at one sentence), the cross K/V
projections (``Decoder.cross_kv``, one linear per layer) and the layout's transposes and
copies, with the step plan's weight check between them: 1.9 of a 9.4 ms one-sentence greedy
translation (2 threads, 2-core AMD EPYC with AVX2, De->En Tiny). Here they are one call whose
kernels run single-threaded (``compiled.LONE_CONFIGS``) with the batch fixed at one and the
source length dynamic. The package is cached beside the step's under the same key and
checked at load against the eager route on a source with and without padding.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.export import Dim

from seq2seq.model.cache import DecoderCache
from seq2seq.model.inference import compiled
from seq2seq.model.inference.compiled_encoder import PureEncoder

COUNTS = {"sources": 0}  # sources this process laid out through the package (tests)
Layout = list[tuple[Tensor, Tensor, Tensor]]  # per layer K^T (H, d_k, S), V (H, S, d_v), bias


class LoneSource(nn.Module):
    """``src (1, S)``, ``mask (1, 1, 1, S)`` -> the padding bias ``(H, 1, S)`` (0 or -inf),
    then per decoder layer K^T ``(H, d_k, S)`` and V ``(H, S, d_v)`` of the memory."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.encoder = PureEncoder(model)

    def forward(self, src: Tensor, mask: Tensor) -> list[Tensor]:
        memory = self.encoder(src, mask)  # (1, S, d_model)
        S, H = src.shape[1], self.model.decoder.layers[0].cross_attn.h
        bias = torch.zeros(mask.shape, dtype=torch.float32).masked_fill(~mask, float("-inf"))
        out = [bias.expand(1, H, 1, S).reshape(H, 1, S).contiguous()]
        for layer in self.model.decoder.layers:
            k, v = layer.cross_attn.project_kv(memory)  # (1, H, S, d_k), (1, H, S, d_v)
            out += [k.transpose(2, 3).reshape(H, k.shape[3], S).contiguous(),
                    v.reshape(H, S, v.shape[3]).contiguous()]
        return out


def _example(model, padded: bool) -> tuple[Tensor, Tensor]:
    """One random source of 11 tokens, its last 3 padding if ``padded``."""
    src = torch.randint(4, model.arch.src_vocab_size, (1, 11),
                        generator=torch.Generator().manual_seed(2))
    if padded:
        src[0, 8:] = model.arch.pad_id
    return src, model.source_mask(src)


def _layout(outputs: list[Tensor]) -> Layout:
    bias = outputs[0]
    return [(k_t, v, bias) for k_t, v in zip(outputs[1::2], outputs[2::2])]


def _strides(t: Tensor) -> list[int]:
    """The strides that address memory (a dimension of size one may have any)."""
    return [stride for n, stride in zip(t.shape, t.stride()) if n > 1]


def self_check(model, loader) -> float:
    """The largest difference from the eager route's layout (``Seq2Seq.init_cache``'s
    cache) on one source without and one with padding; inf for a wrong shape or stride."""
    worst = 0.0
    for padded in (False, True):
        src, mask = _example(model, padded)
        memory = model.encoder(model.src_embed(src), mask)
        want = DecoderCache(model.decoder.cross_kv(memory), mask).cross_layout()
        got = _layout(loader.boxed_run([src, mask]))
        for got_part, want_part in zip((t for row in got for t in row),
                                       (t for row in want for t in row)):
            if got_part.shape != want_part.shape or _strides(got_part) != _strides(want_part):
                return float("inf")
            worst = max(worst, (got_part - want_part).abs().nan_to_num(0.0).max().item())
    return worst


class CompiledSource:
    """One sentence's decoder cache from its package, made or loaded on first use (or on
    :meth:`prepare`); ``None`` from :meth:`cache`: the eager route."""

    def __init__(self, key: str):
        self.key, self.loader, self.failed = key, None, False
        self.build: Callable[[], None] | None = None  # as CompiledEncoder.build

    def path(self):
        digest = hashlib.sha256(f"{self.key} source {compiled.lone_tag()}".encode()).hexdigest()[:32]
        return compiled.cache_dir() / f"source-{digest}.pt2"

    def made_for(self) -> dict:
        return {"key": self.key, "part": "source", "sentences": 1}

    def prepare(self, model) -> None:
        if self.loader is None and not self.failed:
            try:
                self.loader = compiled.load_or_compile(
                    self.path(), self.made_for(), "one sentence's source side for this model",
                    self._package(model), lambda loader: self_check(model, loader))
            except Exception as e:  # noqa: BLE001 - any failure: the eager route, one note
                self.failed = True
                compiled.failed("the compiled source side", e, "encoding eagerly")

    def _package(self, model):
        def make(path) -> None:
            S = Dim("S", min=1, max=model.src_embed.positions.shape[0])
            compiled.compile_into(LoneSource(model), _example(model, False),
                                  {"src": {1: S}, "mask": {3: S}}, path, self.made_for(),
                                  compiled.LONE_CONFIGS)
        return make

    def cache(self, model, src: Tensor, capacity: int, group: int = 1) -> DecoderCache | None:
        """A cache for one sentence ``src (1, S)`` and ``group`` decoder rows, its cross
        layout from the package; None for more sentences, off the CPU, a source without a
        key, or no package (failed, or a server's background build not done)."""
        if self.failed or src.shape[0] != 1 or src.device.type != "cpu":
            return None
        if self.loader is None and self.build is None:
            self.prepare(model)
        mask = model.source_mask(src)
        if self.loader is None or not bool(mask.any()):
            return None
        layout = _layout(self.loader.boxed_run([src.contiguous(), mask]))
        COUNTS["sources"] += 1
        return DecoderCache.from_layout(layout, mask, capacity, group)


def enable(model) -> None:
    """One sentence's source package (``model.inference.compiled_source``, used by
    ``decoding.state.start``) for a model that ``compiled.enable`` gave a compiled step,
    where its positions allow (as ``compiled_encoder.enable``)."""
    step = model.inference.compiled_step
    if step is not None and model.arch.positional in ("sinusoidal", "learned"):
        model.inference.compiled_source = CompiledSource(step.key)
