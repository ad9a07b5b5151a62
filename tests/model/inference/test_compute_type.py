"""Compute types (``seq2seq.model.inference.compute``): the int8 and bfloat16 linear kernels against
references computed by hand, translations against float32's, float32 unchanged, and the
``--compute-type`` option of every command."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers import multi30k_lines, run_main, tiny_random_model

import seq2seq.model.inference.compute as compute
from seq2seq.config import ConfigError, DecodingConfig, LoadConfig
from seq2seq.metrics import bleu
from seq2seq.translation.translator import Translator

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = ROOT / "data" / "models" / "multi30k_de_en_tiny.ckpt"
N = 100

needs_int8 = pytest.mark.skipif(not compute.native_int8(), reason="no VNNI/AMX int8 CPU")
needs_bf16 = pytest.mark.skipif(not compute.native_bf16(), reason="no native bfloat16 CPU")


def _lines(lang: str) -> list[str]:
    return multi30k_lines(lang, N, "test_2016_flickr")


def _int8_reference(x: torch.Tensor, linear: torch.nn.Linear) -> tuple[torch.Tensor, torch.Tensor]:
    """By hand: weights per output channel (symmetric int8), each row of x scaled to max |x|
    = 1, then per-tensor asymmetric uint8 (min/max, as oneDNN's dynamic kernel), the integer
    matmul in float64 (exact at these sizes), dequantized, rows scaled back, bias added.
    Also each row's output change when one input element lands one level off (a tie:
    each row's largest element sits exactly between two levels after the scaling)."""
    w = linear.weight.detach().double()
    sw = w.abs().amax(dim=1) / 127
    wq = torch.round(w / sw[:, None]).clamp(-127, 127)
    r = x.double().abs().amax(dim=-1, keepdim=True)
    xs = x.double() / r
    lo, hi = min(xs.min().item(), 0.0), max(xs.max().item(), 0.0)
    sx = (hi - lo) / 255
    zp = round(-lo / sx)
    xq = (torch.round(xs / sx) + zp).clamp(0, 255)
    out = ((xq - zp) @ wq.T) * sx * sw * r + linear.bias.detach().double()
    return out.float(), (sx * r * w.abs().max()).float()


@needs_int8
@torch.no_grad()
def test_int8_linear_equals_the_quantized_matmul_by_hand():
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 48)
    for shape in [(7, 64), (3, 5, 64), (1, 64)]:
        x = torch.randn(shape) * torch.rand(shape[:-1] + (1,)) * 4  # rows of different sizes
        got = compute.Int8Linear()(lin, x)
        want, one_level = _int8_reference(x, lin)
        assert got.shape == want.shape and got.dtype == torch.float32
        # equal up to float32 rounding and one input level where a value is a tie; far
        # from float32's F.linear by the quantization error
        assert ((got - want).abs() <= one_level * 1.001 + 1e-5).all()
        exact = F.linear(x, lin.weight, lin.bias)
        assert (got - want).abs().mean() < 0.2 * (got - exact).abs().mean()


@needs_bf16
@torch.no_grad()
def test_bfloat16_linear_is_the_bf16_matmul_accumulated_in_float32():
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 48)
    x = torch.randn(5, 64)
    got = compute.BFloat16Linear()(lin, x)
    exact = F.linear(x.bfloat16().double(), lin.weight.bfloat16().double(),
                     lin.bias.bfloat16().double())
    assert got.dtype == torch.float32
    # only the output's rounding to bfloat16 (8 bits) remains: 2^-8 relative
    assert torch.allclose(got.double(), exact, rtol=2**-8, atol=1e-6)


@needs_int8
@torch.no_grad()
def test_a_kernel_follows_its_weight_and_float32_is_bit_identical_after_any_type():
    model = tiny_random_model(50)
    src, tgt = torch.randint(4, 50, (3, 7)), torch.randint(4, 50, (3, 5))
    before = model(src, tgt)
    compute.prepare(model, "int8")
    int8 = model(src, tgt)
    assert model.inference.compute_type == "int8" and not torch.equal(int8, before)
    with torch.no_grad():  # an in-place update (load_state_dict): the kernel repacks
        model.output.weight.mul_(2.0)
    assert not torch.allclose(model(src, tgt), int8, atol=1e-3)
    model.output.weight.mul_(0.5)
    assert torch.allclose(model(src, tgt), int8, atol=1e-5)
    compute.prepare(model, "float32")
    assert torch.equal(model(src, tgt), before) and model.inference.compute_type == "float32"


def test_float32_outputs_are_bit_identical_to_no_compute_type():
    texts = _lines("de")[:20]
    plain = Translator.from_checkpoint(SHIPPED).translate_full(texts)
    given = Translator.from_checkpoint(SHIPPED, compute_type="float32").translate_full(texts)
    assert [(r.hyp, r.score) for r in plain] == [(r.hyp, r.score) for r in given]


@pytest.mark.parametrize("compute_type", [
    pytest.param("int8", marks=needs_int8), pytest.param("bfloat16", marks=needs_bf16)])
def test_int8_and_bfloat16_agree_with_float32_on_the_shipped_model(compute_type):
    src, ref = _lines("de"), _lines("en")
    decoding = DecodingConfig(split_sentences=False)
    base = Translator.from_checkpoint(SHIPPED, decoding).translate(src)
    t = Translator.from_checkpoint(SHIPPED, decoding, compute_type=compute_type)
    assert t.compute_type == compute_type
    out = t.translate(src)
    same = sum(a == b for a, b in zip(out, base)) / len(src)
    assert same >= 0.9, same
    assert abs(bleu(out, ref).score - bleu(base, ref).score) <= 0.5


def test_auto_is_never_slower_than_float32_for_a_small_model(monkeypatch):
    monkeypatch.setattr(compute, "native_int8", lambda: True)
    monkeypatch.setattr(compute, "native_bf16", lambda: True)
    assert compute.resolve("auto", 128) == "float32"  # the shipped size: nothing gained
    assert compute.resolve("auto", 512) == "int8"
    monkeypatch.setattr(compute, "native_int8", lambda: False)
    assert compute.resolve("auto", 512) == "bfloat16"
    monkeypatch.setattr(compute, "native_bf16", lambda: False)
    assert compute.resolve("auto", 512) == "float32"
    assert compute.resolve("int8", 32) == "int8"


def test_bfloat16_without_native_bf16_is_refused_in_one_line(monkeypatch):
    monkeypatch.setattr(compute, "native_bf16", lambda: False)
    # the library names its argument; the CLI, its flag (below)
    with pytest.raises(ValueError, match="^compute_type bfloat16: this CPU has no native"):
        compute.prepare(tiny_random_model(20), "bfloat16")
    from seq2seq.cli.translate import main

    code, out, err = run_main(main, ["-m", str(SHIPPED), "--compute-type", "bfloat16", "Hallo"])
    assert code == 2 and out == ""
    assert err.startswith("seq2seq-translate: error: --compute-type bfloat16: this CPU has no "
                          "native bfloat16") and err.count("\n") == 1


def test_the_config_refuses_an_unknown_compute_type():
    with pytest.raises(ConfigError, match="LoadConfig.compute_type: 'int4' is not one of"):
        LoadConfig(compute_type="int4")
    with pytest.raises(ConfigError, match="LoadConfig.compute_type: 'int4' is not one of"):
        Translator.from_checkpoint(SHIPPED, compute_type="int4")


@pytest.mark.parametrize("command", ["translate", "evaluate", "serve"])
def test_a_bad_compute_type_is_a_one_line_error_naming_the_option_and_choices(command):
    import importlib

    main = importlib.import_module(f"seq2seq.cli.{command}").main
    code, out, err = run_main(main, ["-m", str(SHIPPED), "--compute-type", "int4"])
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith(f"seq2seq-{command}: error: argument --compute-type: invalid choice: "
                          "'int4'")
    assert all(c in err for c in ("float32", "int8", "bfloat16", "auto"))


def test_auto_is_said_on_stderr():
    from seq2seq.cli.translate import main

    code, out, err = run_main(main, ["-m", str(SHIPPED), "--compute-type", "auto", "Ein Hund."])
    chosen = compute.resolve("auto", 128)
    assert code == 0 and out.strip()
    assert f"seq2seq-translate: info: --compute-type auto: running {chosen} on this CPU" in err
