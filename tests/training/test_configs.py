"""The shipped configs: each model's config is the recipe the shipped model was trained with
(the pre_ln overlay changes nothing, post_ln gives the Post-LN comparison), and the WMT-size
config builds Transformer-base and trains a few steps on CPU."""

from __future__ import annotations

import dataclasses
import sys

import pytest
import torch
from helpers import DE_EN, EN_DE, ROOT, write_corpus

SHIPPED = {"de_en": DE_EN, "en_de": EN_DE}
DATA = ROOT / "data" / "multi30k"


def _cli(tmp_path, monkeypatch, *configs: str):
    from seq2seq.cli.train import build_cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["seq2seq-train"])
    return build_cli([a for c in configs for a in ("--config", str(ROOT / "configs" / c))], run=False)


@pytest.mark.parametrize("pair", SHIPPED)
def test_shipped_config_is_the_shipped_models_recipe(pair, tmp_path, monkeypatch):
    from dataclasses import asdict

    from seq2seq.checkpoint import load_checkpoint
    from seq2seq.config import ModelConfig

    meta = load_checkpoint(SHIPPED[pair])["seq2seq"]
    cli = _cli(tmp_path, monkeypatch, f"multi30k_{pair}_tiny.yaml")
    arch, data = asdict(cli.model.arch), cli.datamodule.config
    stored = dict(meta["model_config"])
    for field in set(arch) - set(stored):  # options added after the models were trained
        stored[field] = ModelConfig.__dataclass_fields__[field].default
    # the vocabulary sizes come from the tokenizers the config trains
    for side in ("src", "tgt"):
        assert stored.pop(f"{side}_vocab_size") == data.tokenizer.vocab_size
        arch.pop(f"{side}_vocab_size")
    assert arch == stored
    assert (data.src_lang, data.tgt_lang) == (meta["src_lang"], meta["tgt_lang"])
    # the pre_ln overlay over it changes nothing; post_ln gives the Post-LN comparison
    again = _cli(tmp_path, monkeypatch, f"multi30k_{pair}_tiny.yaml", "pre_ln.yaml")
    assert again.model.arch == cli.model.arch
    post = _cli(tmp_path, monkeypatch, f"multi30k_{pair}_tiny.yaml", "post_ln.yaml")
    assert post.model.arch.norm_position == "post"


@pytest.mark.slow
def test_wmt14_config_is_transformer_base_and_runs_a_few_steps_on_cpu(tmp_path, monkeypatch):
    """``configs/wmt14_en_de_base.yaml`` builds Transformer-base (~61M parameters with a
    shared 32k vocabulary, the paper's 65M with its 37k), and trains 2 steps at full size
    on a local 600-pair sample (the hub and a 32k vocabulary need the real corpus)."""
    from seq2seq.cli.train import build_cli
    from seq2seq.cli.train import main as train_main
    from seq2seq.model import Seq2Seq

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["seq2seq-train"])
    config = str(ROOT / "configs" / "wmt14_en_de_base.yaml")
    cli = build_cli(["--config", config], run=False)
    arch = cli.model.arch
    data = cli.datamodule.config
    assert (data.tokenizer.vocab_size, data.tokenizer.joint, arch.share_embeddings) == (32000, True, True)
    base = Seq2Seq(dataclasses.replace(arch, src_vocab_size=32000, tgt_vocab_size=32000))
    assert 60e6 < sum(p.numel() for p in base.parameters()) < 62e6

    src, tgt = write_corpus(tmp_path / "sample", 600)
    train_main([
        "fit", "--config", config, "--data.data.format", "text", "--data.data.train_src", str(src),
        "--data.data.train_tgt", str(tgt), "--data.data.valid_src", str(DATA / "val.en.gz"),
        "--data.data.valid_tgt", str(DATA / "val.de.gz"), "--data.data.tokenizer.vocab_size", "500",
        "--data.data.cache_dir", str(tmp_path / "cache"), "--data.data.num_proc", "null",
        "--data.data.num_workers", "0", "--data.data.max_tokens", "600",
        "--trainer.precision", "32-true", "--trainer.max_steps", "2", "--trainer.accumulate_grad_batches", "1",
        "--trainer.val_check_interval", "2", "--trainer.limit_val_batches", "1",
        "--trainer.num_sanity_val_steps", "0", "--model.val_bleu_max_sentences", "2",
        "--trainer.enable_progress_bar", "false", "--trainer.default_root_dir", str(tmp_path / "run"),
    ])
    ckpt = torch.load(tmp_path / "run/checkpoints/last.ckpt", weights_only=True)
    saved = ckpt["seq2seq"]["model_config"]
    assert ckpt["global_step"] == 2
    assert (saved["d_model"], saved["encoder_layers"], saved["decoder_layers"], saved["n_heads"], saved["d_ff"]) == (
        512, 6, 6, 8, 2048)


# An overlay for the recipe study, which compares knobs at equal wall time by design
# (docs/results.md); no model is shipped from it.
WALL_TIME_STUDY = ROOT / "configs" / "studies" / "study.yaml"


def test_every_recipe_stops_by_updates_not_wall_time():
    """A model's recipe ends at a number of updates (``max_time`` is only a safety net), so
    the model a user trains does not depend on their CPU's speed: every config that trains
    a model (a top-level config with a ``data`` section; those in folders are overlays on
    them) sets ``max_steps`` > 0, and no overlay unsets it."""
    import yaml

    recipes = 0
    for path in sorted((ROOT / "configs").rglob("*.yaml")):
        config = yaml.safe_load(path.read_text()) or {}
        steps = (config.get("trainer") or {}).get("max_steps")
        if path == WALL_TIME_STUDY:
            assert steps == -1  # still the study's overlay; otherwise drop this exception
            continue
        if "data" in config and path.parent == ROOT / "configs":
            recipes += 1
            assert steps is not None, f"{path.name}: no trainer.max_steps"
        assert steps is None or steps > 0, f"{path.name}: trainer.max_steps {steps}"
    assert recipes >= 7  # the recipes were all found
