"""The attention section: the two kernels ``seq2seq.model.attention.attention`` routes
between, ``sdpa_attention`` (PyTorch's SDPA) and ``matmul_attention`` (two matmuls around a
softmax), forward and forward+backward, on training, long-sentence and decode-step shapes:
the measurements behind ``MATMUL_MAX_SCORES``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from scripts.bench.timing import measure
from seq2seq.model.attention import causal_mask, lengths_mask, matmul_attention, sdpa_attention


@dataclass(frozen=True)
class AttentionShape:
    name: str
    B: int
    H: int
    L: int
    S: int
    d: int
    mask: str  # "padding" (B, 1, 1, S), "causal" (L, S) or "none"
    backward: bool = True


ATTENTION_SHAPES = (
    AttentionShape("train, encoder self (padding mask)", 128, 4, 20, 20, 32, "padding"),
    AttentionShape("train, decoder self (causal mask)", 128, 4, 20, 20, 32, "causal"),
    AttentionShape("train, long sentences, decoder self (causal)", 32, 4, 64, 64, 32, "causal"),
    AttentionShape("train, longer sentences, decoder self (causal)", 16, 4, 128, 128, 32, "causal"),
    AttentionShape("decode step, cross (beam 5 x 128 sent., padding)", 640, 4, 1, 20, 32,
                   "padding", backward=False),
    AttentionShape("decode step, self (beam 5 x 128 sent., 20 cached)", 640, 4, 1, 20, 32,
                   "none", backward=False),
)
PATHS = {"sdpa": sdpa_attention, "matmul": matmul_attention}


def attention_inputs(shape: AttentionShape, generator: torch.Generator):
    """Random ``q, k, v`` and the shape's mask (padding lengths drawn in ``[S/2, S]``)."""
    B, H, L, S, d = shape.B, shape.H, shape.L, shape.S, shape.d
    q, k, v = (torch.randn(B, H, n, d, generator=generator) for n in (L, S, S))
    if shape.mask == "padding":
        lengths = torch.randint(S // 2, S + 1, (B,), generator=generator)
        mask = lengths_mask(lengths, S)
    elif shape.mask == "causal":
        mask = causal_mask(L, S)
    else:
        mask = None
    return q, k, v, mask


def time_attention(fn: Callable, q, k, v, mask, backward: bool, repeats: int, iters: int) -> float:
    """Microseconds per call of ``fn(q, k, v, mask)``, forward only or forward+backward."""
    if backward:
        q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
        grad = torch.randn(q.shape[:-1] + v.shape[-1:])

        def calls():
            for _ in range(iters):
                fn(q, k, v, mask).backward(grad)
    else:
        def calls():
            with torch.no_grad():
                for _ in range(iters):
                    fn(q, k, v, mask)

    return 1e6 * measure(calls, repeats).seconds / iters


def attention_row(shape: AttentionShape, repeats: int, iters: int = 50) -> dict:
    """Both paths on one shape: forward and (for training shapes) forward+backward."""
    inputs = attention_inputs(shape, torch.Generator().manual_seed(0))
    row = {"shape": shape.name, "dims": f"B={shape.B} H={shape.H} L={shape.L} S={shape.S} d={shape.d}"}
    for kind, backward in (("fwd", False), ("fwdbwd", True)):
        for path, fn in PATHS.items():
            row[f"{path}_{kind}_us"] = (time_attention(fn, *inputs, backward, repeats, iters)
                                        if shape.backward or not backward else None)
        sdpa = row[f"sdpa_{kind}_us"]
        row[f"matmul_over_sdpa_{kind}"] = None if sdpa is None else row[f"matmul_{kind}_us"] / sdpa
    return row


def bench_attention(repeats: int = 3, iters: int = 50, shapes=ATTENTION_SHAPES,
                    log: Callable[[str], None] = print) -> dict:
    rows = []
    for shape in shapes:
        log(f"  timing attention: {shape.name} ...")
        rows.append(attention_row(shape, repeats, iters))
    notes = [f"µs per call, median of {repeats} runs of {iters} calls each; fp32; "
             "fwd+bwd: forward then backward of a random output gradient w.r.t. q, k, v",
             "sdpa = seq2seq.model.attention.sdpa_attention (F.scaled_dot_product_attention); "
             "matmul = seq2seq.model.attention.matmul_attention; attention() takes matmul for "
             "L x S <= MATMUL_MAX_SCORES"]
    return {"rows": rows, "targets": [], "notes": notes, "skipped": []}
