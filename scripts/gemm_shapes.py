"""Micro-benchmark of the decoder step's matrix shapes (Tiny: d_model 128, FFN 256, a
vocabulary of 8,000; R rows): torch's ``F.linear``, oneDNN's prepacked weights
(``torch.ops.mkldnn._linear_pointwise``) and MKL's packed GEMM (``torch.ops.mkl._mkl_linear``).

    OMP_NUM_THREADS=2 python scripts/gemm_shapes.py

Best of 5 timed loops each; run it on a quiet machine (the load average is printed).
"""

from __future__ import annotations

import os
import time

import torch
import torch.nn.functional as F

SHAPES = (("out-proj 128x8000", 128, 8000), ("qkv 128x384", 128, 384), ("ff1 128x256", 128, 256))


def kernels(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, rows: int) -> dict:
    """The three ways to compute ``x @ w.T + b`` (the packed ones where this torch has them)."""
    fns = {"torch linear": lambda: F.linear(x, w, b)}
    try:
        wp = torch.ops.mkldnn._reorder_linear_weight(w, rows)
        fns["onednn packed"] = lambda: torch.ops.mkldnn._linear_pointwise(x, wp, b, "none", [], "")
    except (RuntimeError, AttributeError) as e:
        print("oneDNN packing unavailable:", str(e).splitlines()[0])
    try:
        wm = torch.ops.mkl._mkl_reorder_linear_weight(w, rows)
        fns["mkl packed"] = lambda: torch.ops.mkl._mkl_linear(x, wm, w, b, rows)
    except (RuntimeError, AttributeError) as e:
        print("MKL packing unavailable:", str(e).splitlines()[0])
    return fns


def best_seconds(fn, flops: int) -> float:
    for _ in range(20):
        fn()
    iters, best = max(50, int(2e8 / flops)), float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        best = min(best, (time.perf_counter() - start) / iters)
    return best


def main() -> None:
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    print(f"load average before: {os.getloadavg()[0]:.2f}; {torch.get_num_threads()} threads")
    for name, k, n in SHAPES:
        for rows in (64, 256):
            x, w, b = torch.randn(rows, k), torch.randn(n, k), torch.zeros(n)
            fns = kernels(x, w, b, rows)
            want = fns["torch linear"]()
            for label, fn in fns.items():
                assert torch.allclose(fn(), want, atol=1e-3), label
                s = best_seconds(fn, rows * k * n)
                print(f"{name:18s} R={rows:4d} {label:14s} {s * 1e6:8.1f} us  "
                      f"{2 * rows * k * n / s / 1e9:6.1f} GFLOP/s")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
