"""The gemm section: how GEMM-bound our training step is, as a number.

The step's matrix products (``seq2seq.training.flops.step_gemms``: forward and backward of
every batch, the shapes the ThroughputMonitor's FLOPs count) are each timed as a plain
``torch.mm``/``bmm`` on fresh contiguous tensors (median of ``repeats`` timed loops after a
warm-up) and summed by how often the step runs them: the step's time if it were nothing but
GEMMs at torch's speed on this machine, its *practical peak*. The real step (loss + backward
+ Adam, ``engines.ours_train_step``) is timed on the same batches; ``fraction`` = GEMM-only
time ÷ step time = achieved FLOP/s ÷ GEMM-only FLOP/s. Under bf16 autocast the products are
timed in bfloat16, except the output projection: the fused loss computes it in float32.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from scripts.bench.engines import ours_train_step
from scripts.bench.timing import measure, train_row
from seq2seq.checkpoint import build_model
from seq2seq.config import ModelConfig
from seq2seq.model.inference.compute import native_bf16
from seq2seq.training.flops import Gemm, step_gemms

Log = Callable[[str], None]
Timer = Callable[[Gemm, torch.dtype, int], float]
PRECISIONS = ("fp32", "bf16 autocast")
KINDS = ("projection", "attention", "feed-forward", "output")
FP32_UNDER_AUTOCAST = frozenset({"output"})  # training/loss.py: the fused loss runs in fp32
MIN_LOOP_S = 0.005  # each timed loop at least this long: small products are microseconds


def batches_gemms(arch: ModelConfig, batches: Sequence) -> list[Gemm]:
    """The training GEMMs of all ``batches`` (``Batch``: src (B, S), tgt_in (B, L)), equal
    shapes merged across batches."""
    merged: dict[Gemm, int] = {}
    for b in batches:
        (B, S), L = b.src.shape, b.tgt_in.shape[1]
        for g in step_gemms(arch, B, S, L, b.n_tgt_tokens, training=True):
            key = Gemm(g.kind, g.m, g.k, g.n, g.batch)
            merged[key] = merged.get(key, 0) + g.count
    return [Gemm(g.kind, g.m, g.k, g.n, g.batch, c) for g, c in merged.items()]


def gemm_dtype(kind: str, precision: str) -> torch.dtype:
    """The dtype the step multiplies a ``kind`` of product in."""
    bf16 = precision != "fp32" and kind not in FP32_UNDER_AUTOCAST
    return torch.bfloat16 if bf16 else torch.float32


def time_gemm(g: Gemm, dtype: torch.dtype, repeats: int) -> float:
    """Seconds of one ``g`` product (``count`` ignored) as a plain torch.mm / bmm."""
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(g.batch, g.m, g.k, generator=gen).to(dtype)
    b = torch.randn(g.batch, g.k, g.n, generator=gen).to(dtype)
    op, a, b = (torch.mm, a[0], b[0]) if g.batch == 1 else (torch.bmm, a, b)
    once = measure(lambda: op(a, b), 1).seconds  # after its own warm-up call
    loops = max(1, math.ceil(MIN_LOOP_S / max(once, 1e-9)))

    def loop() -> None:
        for _ in range(loops):
            op(a, b)

    return measure(loop, repeats).seconds / loops


def gemm_seconds(gemms: Sequence[Gemm], precision: str, repeats: int,
                 timer: Timer = time_gemm) -> dict[str, float]:
    """GEMM-only seconds of ``gemms`` by kind: each shape timed once, times its count."""
    by_kind = dict.fromkeys(KINDS, 0.0)
    for g in gemms:
        by_kind[g.kind] += g.count * timer(g, gemm_dtype(g.kind, precision), repeats)
    return by_kind


def fraction_row(precision: str, step_s: float, flops: int, by_kind: dict[str, float],
                 steps: int = 1) -> dict:
    """The row: ``steps`` real steps (``step_s`` in all) vs the GEMM-only time of the same
    ``flops``."""
    gemm_s = sum(by_kind.values())
    return {"precision": precision, "steps": steps, "step_s": step_s, "gemm_s": gemm_s, "flops": flops,
            "achieved_flops_per_s": flops / step_s, "gemm_flops_per_s": flops / gemm_s,
            "fraction": gemm_s / step_s,
            "gemm_share_by_kind": {k: s / gemm_s for k, s in by_kind.items()}}


def bench_gemm(ckpt: dict, batches: Sequence, *, repeats: int = 3,
               precisions: Sequence[str] = PRECISIONS, log: Log = print) -> dict:
    """Each precision: the real step over ``batches`` (fresh weights) and its GEMM-only time."""
    arch = build_model(ckpt).arch
    gemms = batches_gemms(arch, batches)
    flops = sum(g.flops for g in gemms)
    rows, skipped = [], []
    for precision in precisions:
        if precision != "fp32" and not native_bf16():
            skipped.append(f"{precision}: this CPU has no native bfloat16 (AVX-512 BF16 or AMX)")
            continue
        log(f"  timing ours training step, {precision} ...")
        step = ours_train_step(build_model(ckpt), precision != "fp32")
        step_s = train_row("ours", precision, step, batches, repeats)["seconds"]
        log(f"  timing {len(gemms)} GEMM shapes as torch.mm/bmm, {precision} ...")
        by_kind = gemm_seconds(gemms, precision, repeats)
        rows.append(fraction_row(precision, step_s, flops, by_kind, len(batches)))
    notes = [f"{len(batches)} batches, {sum(b.n_tgt_tokens for b in batches)} target tokens, "
             f"{flops / 1e9:.2f} GFLOP (forward + backward matmuls), {len(gemms)} distinct GEMM shapes",
             "step: loss + backward + Adam on real batches; GEMM-only: each shape as a plain "
             "torch.mm/bmm on contiguous tensors (median), summed by count",
             "fraction = GEMM-only s ÷ step s (1.0: the step runs at torch's GEMM speed)",
             "bf16 autocast: products in bfloat16 except the output projection (the fused "
             "loss computes it in float32)"]
    for row in rows:
        shares = ", ".join(f"{k} {v:.0%}" for k, v in row["gemm_share_by_kind"].items())
        notes.append(f"{row['precision']} GEMM-only time by kind: {shares}")
    return {"rows": rows, "targets": [], "notes": notes, "skipped": skipped}
