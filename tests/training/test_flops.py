"""The GEMMs of a step (``training.flops.step_gemms``): what a plain torch.mm/bmm is timed at
to give a training step's practical peak (the benchmark's gemm section); the FLOPs the
module tells Lightning's ThroughputMonitor are what torch's FLOP counter measures."""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from seq2seq.config import ModelConfig, TokenizerConfig
from seq2seq.training.flops import Gemm, batch_flops, step_gemms


@st.composite
def configs(draw) -> ModelConfig:
    heads = draw(st.integers(1, 4))
    split = draw(st.booleans())  # d_k/d_v set apart from d_model // n_heads
    return ModelConfig(
        src_vocab_size=draw(st.integers(5, 300)), tgt_vocab_size=draw(st.integers(5, 300)),
        d_model=2 * heads * draw(st.integers(1, 8)), n_heads=heads, d_ff=draw(st.integers(1, 64)),
        d_k=draw(st.integers(1, 12)) if split else None, d_v=draw(st.integers(1, 12)) if split else None,
        encoder_layers=draw(st.integers(1, 3)), decoder_layers=draw(st.integers(1, 3)),
        share_embeddings=False)


@settings(max_examples=200, deadline=None)
@given(arch=configs(), batch=st.integers(1, 64), src_len=st.integers(1, 80),
       tgt_len=st.integers(1, 80), fill=st.floats(0, 1), training=st.booleans())
def test_the_listed_gemms_sum_to_batch_flops(arch, batch, src_len, tgt_len, fill, training):
    n_targets = int(fill * batch * tgt_len)  # 0 .. all target positions
    gemms = step_gemms(arch, batch, src_len, tgt_len, n_targets, training)
    assert sum(g.flops for g in gemms) == batch_flops(arch, batch, src_len, tgt_len, n_targets, training)
    keys = [replace(g, count=1) for g in gemms]
    assert len(set(keys)) == len(keys)  # equal shapes merged
    assert all(g.count > 0 and g.flops > 0 for g in gemms)


@settings(max_examples=50, deadline=None)
@given(arch=configs(), batch=st.integers(1, 8), src_len=st.integers(1, 20), tgt_len=st.integers(1, 20))
def test_backward_runs_each_forward_product_twice_more(arch, batch, src_len, tgt_len):
    """Each product (m, k) @ (k, n) has two in the backward: dA = (m, n) @ (n, k) and
    dB = (k, m) @ (m, n); the training list is exactly those three per forward product."""
    args = arch, batch, src_len, tgt_len, batch * tgt_len
    expected: Counter = Counter()
    for g in step_gemms(*args, training=False):
        for shape in ((g.m, g.k, g.n), (g.m, g.n, g.k), (g.k, g.m, g.n)):
            expected[(g.kind, g.batch, *shape)] += g.count
    got = Counter({(g.kind, g.batch, g.m, g.k, g.n): g.count for g in step_gemms(*args, training=True)})
    assert got == expected


def test_the_shapes_are_the_model_s_own_products():
    """The listed shapes are those torch's FLOP counter sees in a forward of the network."""
    from torch.utils.flop_counter import FlopCounterMode

    from seq2seq.model import Seq2Seq

    arch = ModelConfig(src_vocab_size=31, tgt_vocab_size=37, d_model=16, n_heads=2, d_ff=24,
                       encoder_layers=2, decoder_layers=1, dropout=0.0, share_embeddings=False)
    B, S, L = 3, 7, 5
    src, tgt = torch.randint(4, 31, (B, S)), torch.randint(4, 37, (B, L))
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        Seq2Seq(arch)(src, tgt, torch.ones(B, L, dtype=torch.bool))
    listed = step_gemms(arch, B, S, L, B * L, training=False)
    assert sum(g.flops for g in listed) == counter.get_total_flops()
    assert {(g.m, g.k, g.n) for g in listed if g.kind == "output"} == {(B * L, 16, 37)}


def test_gemm_flops_are_two_per_multiply_add():
    g = Gemm("projection", 3, 4, 5, batch=2, count=7)
    assert g.flops == 2 * 3 * 4 * 5 * 2 * 7


# ---------------------------------------------------------------- the benchmark's gemm section
def _batches():
    from seq2seq.data.batch import collate

    g = torch.Generator().manual_seed(0)
    examples = [{"src_ids": torch.randint(4, 40, (n,), generator=g).tolist(),
                 "tgt_ids": torch.randint(4, 40, (n + 1,), generator=g).tolist(), "id": i}
                for i, n in enumerate((5, 7, 3, 6, 4))]
    return [collate(examples[:2]), collate(examples[2:])]


ARCH = ModelConfig(src_vocab_size=40, tgt_vocab_size=40, d_model=16, n_heads=2, d_ff=24,
                   encoder_layers=2, decoder_layers=1)


def test_gemms_of_batches_sum_each_batch_s_flops():
    from scripts.bench.gemm import batches_gemms

    batches = _batches()
    gemms = batches_gemms(ARCH, batches)
    want = sum(batch_flops(ARCH, *b.src.shape, b.tgt_in.shape[1], b.n_tgt_tokens, True) for b in batches)
    assert sum(g.flops for g in gemms) == want
    assert len({(g.kind, g.m, g.k, g.n, g.batch) for g in gemms}) == len(gemms)


def test_gemm_seconds_weigh_each_shape_by_count_in_the_step_s_dtype():
    """bf16 autocast: every kind in bfloat16 but the output projection (fused loss: fp32)."""
    from scripts.bench.gemm import KINDS, fraction_row, gemm_seconds

    gemms = step_gemms(ARCH, 2, 7, 8, 11, training=True)
    seen = []

    def timer(g, dtype, repeats):  # one "second" per FLOP, and a note of the dtype
        seen.append((g.kind, dtype))
        return g.flops / g.count

    for precision in ("fp32", "bf16 autocast"):
        seen.clear()
        by_kind = gemm_seconds(gemms, precision, 1, timer)
        assert set(by_kind) == set(KINDS)
        for kind in KINDS:
            assert by_kind[kind] == sum(g.flops for g in gemms if g.kind == kind)
        bf16 = {k for k, d in seen if d == torch.bfloat16}
        assert bf16 == (set() if precision == "fp32" else set(KINDS) - {"output"})
        row = fraction_row(precision, 2 * sum(by_kind.values()), 10**6, by_kind, steps=3)
        assert row["fraction"] == 0.5 == row["achieved_flops_per_s"] / row["gemm_flops_per_s"]
        assert row["achieved_flops_per_s"] == 10**6 / row["step_s"] and row["steps"] == 3
        assert sum(row["gemm_share_by_kind"].values()) == pytest.approx(1.0)


def test_time_gemm_is_a_positive_time_per_product():
    from scripts.bench.gemm import time_gemm

    small, big = Gemm("projection", 8, 8, 8), Gemm("projection", 8, 8, 8, batch=64)
    assert 0 < time_gemm(small, torch.float32, 1) < time_gemm(big, torch.float32, 3)


def table_cells(table: str, first: str) -> list[str]:
    """The cells of the table row starting with ``first`` (columns are 2+ spaces apart)."""
    import re

    rows = [re.split(r"\s{2,}", line.strip()) for line in table.splitlines()]
    (row,) = [cells for cells in rows if cells[0] == first]
    return row


def test_gemm_section_rows_and_table(tmp_path):
    from scripts.bench import report as R
    from scripts.bench.gemm import bench_gemm
    from seq2seq.checkpoint import load_checkpoint, save_model
    from seq2seq.data.tokenizer import Tokenizer, TokenizerPair
    from seq2seq.model import Seq2Seq
    from seq2seq.model.inference.compute import native_bf16

    tok = Tokenizer.train([f"w{i} x{i % 7} y{i % 3}" for i in range(200)],
                          TokenizerConfig(vocab_size=40, num_threads=1))
    save_model(tmp_path / "m.ckpt", Seq2Seq(replace(ARCH, src_vocab_size=tok.vocab_size,
                                                    tgt_vocab_size=tok.vocab_size)),
               TokenizerPair(tok, tok), "de", "en")
    res = bench_gemm(load_checkpoint(tmp_path / "m.ckpt"), _batches(), repeats=1, log=lambda _: None)
    assert [r["precision"] for r in res["rows"]] == (["fp32", "bf16 autocast"] if native_bf16() else ["fp32"])
    table = R.gemm_table(res, "gemm")
    for r in res["rows"]:
        assert r["steps"] == 2
        assert table_cells(table, r["precision"])[1] == f"{1000 * r['step_s'] / 2:.1f}"
        assert r["fraction"] == pytest.approx(r["gemm_s"] / r["step_s"]) and r["fraction"] > 0
        assert table_cells(table, r["precision"])[5] == f"{r['fraction']:.2f}"
    json.dumps(res)


# ---------------------------------------------------------------- FLOPs for ThroughputMonitor
FLOPS_CASES = {
    "post": {},
    "pre-rope": dict(norm_position="pre", positional="rope"),
    "dk!=dv-separate-vocab": dict(d_k=4, d_v=12, share_embeddings=False, tgt_vocab_size=37,
                                  encoder_layers=1),
}


@pytest.mark.parametrize("loss", ["plain", "fused"])
@pytest.mark.parametrize("training", [True, False], ids=["train", "validate"])
@pytest.mark.parametrize("overrides", FLOPS_CASES.values(), ids=FLOPS_CASES.keys())
def test_flops_per_batch_equals_torch_flop_counter(overrides, training, loss):
    """What the module tells ThroughputMonitor = what torch's FLOP counter measures on the
    same batch (forward + backward when training, forward alone when validating). The
    reference runs the plain loss: the fused one does the same matmuls (training/loss.py),
    but one of them in place (``addmm_``), which the counter does not see."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from seq2seq.config import ModelConfig, OptimConfig
    from seq2seq.data.batch import collate
    from seq2seq.model import Seq2Seq
    from seq2seq.training.module import Seq2SeqModule

    arch = ModelConfig(**{**dict(src_vocab_size=41, tgt_vocab_size=41, d_model=16, n_heads=2,
                                 d_ff=24, encoder_layers=2, decoder_layers=3, dropout=0.0),
                          **overrides})
    batch = collate([{"src_ids": list(range(4, 4 + n)), "tgt_ids": list(range(5, 5 + m))}
                     for n, m in ((7, 5), (3, 9), (5, 2))])  # padded both sides

    def run(kind: str, counter=None) -> int | None:
        module = Seq2SeqModule(arch, OptimConfig(loss=kind))
        module.model = Seq2Seq(arch)
        module.train(training)
        with counter or contextlib.nullcontext(), torch.set_grad_enabled(training):
            value, _ = module.loss(batch)
            if training:
                value.backward()
        return module.flops_per_batch

    counter = FlopCounterMode(display=False)
    run("plain", counter)
    assert run(loss) == counter.get_total_flops() > 0
