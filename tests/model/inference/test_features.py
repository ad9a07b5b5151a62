"""A model's inference features are declared (``Seq2Seq.inference``, each ``layers.Linear``'s
``kernel``), never attached: preparing a model for inference (a compute type, the shortlist,
``--compile``) and decoding with it add no attribute to any of its modules."""

from __future__ import annotations

import pytest
import torch
from helpers import DE_EN, multi30k_lines

import seq2seq.model.inference.compiled as compiled
from seq2seq.checkpoint import build_model, load_checkpoint
from seq2seq.config import DecodingConfig
from seq2seq.model.inference import compute
from seq2seq.translation.translator import Translator


def attributes(model: torch.nn.Module) -> dict[str, set[str]]:
    """Each module's instance attribute names (``vars``), by module name."""
    return {name: set(vars(m)) for name, m in model.named_modules()}


def added(before: dict[str, set[str]], model: torch.nn.Module) -> list[str]:
    """``module.attribute`` of each attribute ``model``'s modules have beyond ``before``."""
    return sorted(f"{name or '<model>'}.{a}" for name, names in attributes(model).items()
                  for a in names - before.get(name, set()))


@pytest.fixture(scope="module")
def ckpt() -> dict:
    """The shipped model with a random shortlist table (any valid table: nothing is measured)."""
    ckpt = load_checkpoint(DE_EN)
    arch = build_model(ckpt).arch
    g = torch.Generator().manual_seed(0)
    table = torch.randint(0, arch.tgt_vocab_size, (arch.src_vocab_size, 4), generator=g)
    ckpt["seq2seq"]["shortlist"] = {"table": table, "frequent": torch.arange(50)}
    return ckpt


def other_compute_type() -> str:
    return "int8" if compute.native_int8() else "bfloat16" if compute.native_bf16() else "float32"


@pytest.mark.parametrize("load", ["shortlist", "compile"])
@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_preparing_and_decoding_attach_nothing(ckpt, load, method, monkeypatch):
    monkeypatch.setattr(compiled, "cpp_compiler", lambda: "c++")  # compiled.enable's check
    before = attributes(build_model(ckpt))
    options = (dict(shortlist=True, compute_type=other_compute_type()) if load == "shortlist"
               else dict(compile=True))
    translator = Translator.from_loaded(ckpt, "the shipped model", DecodingConfig(method=method),
                                        **options)
    features = translator.model.inference
    assert (features.shortlist is not None) == (load == "shortlist")
    if load == "compile":
        features.compiled_step.failed = True  # eager from here: this test compiles nothing
    assert len(translator.translate(multi30k_lines("de", 4, "val"))) == 4
    assert features.step_plan.layers  # the fused step ran, laid out once
    assert added(before, translator.model) == []
    # the check sees an attachment, by assignment or through __dict__
    translator.model.compiled_step = features.compiled_step
    translator.model.output.__dict__["packed"] = features.packed_output
    assert added(before, translator.model) == ["<model>.compiled_step", "output.packed"]
