"""Training: schedules, exact resume, self-contained checkpoints, DDP on CPU, bad input."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
from helpers import multi30k_lines
from lightning.pytorch.callbacks import ModelCheckpoint

from seq2seq.averaging import average
from seq2seq.checkpoint import CheckpointError, build_model, load_checkpoint
from seq2seq.cli.train import build_cli
from seq2seq.cli.train import main as train_main
from seq2seq.config import DataConfig, ModelConfig, OptimConfig, TokenizerConfig
from seq2seq.data.datamodule import Seq2SeqDataModule
from seq2seq.training.callbacks import AtomicCheckpointIO
from seq2seq.training.module import Seq2SeqModule, lr_lambda

ROOT = Path(__file__).resolve().parents[2]
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


# ---------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory) -> dict[str, str]:
    """The first 1,500 training and 60 validation pairs of Multi30k de-en, as plain text."""
    out = tmp_path_factory.mktemp("corpus")
    files = {}
    for split, n in (("train", 1500), ("val", 60)):
        for lang in ("de", "en"):
            path = out / f"{split}.{lang}"
            path.write_text("".join(s + "\n" for s in multi30k_lines(lang, n, split)), encoding="utf-8")
            files[f"{split}_{lang}"] = str(path)
    files["cache"] = str(out / "cache")
    return files


def data_config(c: dict[str, str], **kw) -> DataConfig:
    return DataConfig(
        corpus=None, train_src=c["train_de"], train_tgt=c["train_en"], valid_src=c["val_de"],
        valid_tgt=c["val_en"], tokenizer=TokenizerConfig(vocab_size=400), max_tokens=400,
        cache_dir=c["cache"], **kw,
    )


SMALL = ModelConfig(d_model=32, n_heads=2, d_ff=64, encoder_layers=1, decoder_layers=1, dropout=0.3, max_positions=256)


class LossRecorder(L.Callback):
    def __init__(self):
        self.losses: dict[int, float] = {}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.losses[trainer.global_step] = float(outputs["loss"])


def fit(corpus, root: Path, max_steps: int, ckpt_path=None, every=None, module_kw=None, callbacks=(), **trainer_kw):
    L.seed_everything(1, verbose=False)
    recorder = LossRecorder()
    cbs = [recorder, *callbacks]
    if every:
        cbs.append(L.pytorch.callbacks.ModelCheckpoint(dirpath=root, every_n_train_steps=every, save_top_k=-1, save_last=True))
    trainer = L.Trainer(
        max_steps=max_steps, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
        enable_model_summary=False, limit_val_batches=0, use_distributed_sampler=False,
        plugins=[AtomicCheckpointIO()], callbacks=cbs, default_root_dir=root,
        enable_checkpointing=bool(every), **trainer_kw,
    )
    module = Seq2SeqModule(SMALL, OptimConfig(lr=2e-3, warmup_steps=10), **(module_kw or {}))
    trainer.fit(module, datamodule=Seq2SeqDataModule(data_config(corpus)), ckpt_path=ckpt_path)
    return recorder.losses, trainer, module


# ---------------------------------------------------------------- schedules
def test_noam_is_the_chapters_formula():
    f = lr_lambda(OptimConfig(schedule="noam", lr=1.0, warmup_steps=4000), d_model=512)
    for s in (1, 100, 4000, 4001, 20000):
        assert f(s - 1) == pytest.approx(512**-0.5 * min(s**-0.5, s * 4000**-1.5))
    peak = max(range(1, 10000), key=lambda s: f(s - 1))
    assert peak == 4000


def test_inverse_sqrt_warms_up_linearly_to_the_peak_then_decays():
    f = lr_lambda(OptimConfig(schedule="inverse_sqrt", warmup_steps=100), d_model=128)
    assert f(49) == pytest.approx(0.5) and f(99) == pytest.approx(1.0)
    assert f(399) == pytest.approx(math.sqrt(100 / 400))
    g = lr_lambda(OptimConfig(schedule="inverse_sqrt", warmup_steps=0, decay_start=100), d_model=128)
    assert g(0) == 1.0 and g(99) == 1.0 and g(399) == pytest.approx(0.5)


# ---------------------------------------------------------------- resume
def test_interrupted_and_resumed_equals_uninterrupted(small_corpus, tmp_path):
    full, trainer, _ = fit(small_corpus, tmp_path / "a", max_steps=30)
    # the 1,500 pairs make ~50 batches: step 14 is mid-epoch
    assert trainer.num_training_batches > 30
    first, _, _ = fit(small_corpus, tmp_path / "b", max_steps=14, every=14)
    ckpt = tmp_path / "b" / "last.ckpt"
    assert ckpt.is_file()
    resumed, _, _ = fit(small_corpus, tmp_path / "c", max_steps=30, ckpt_path=ckpt)
    assert sorted(resumed) == list(range(15, 31))
    for step in range(1, 15):
        assert first[step] == pytest.approx(full[step], abs=1e-6)
    for step in range(15, 31):
        assert resumed[step] == pytest.approx(full[step], abs=1e-6), f"step {step}"


def test_checkpoint_is_self_contained_and_loads_weights_only(small_corpus, tmp_path):
    _, _, module = fit(small_corpus, tmp_path, max_steps=4, every=4)
    path = tmp_path / "last.ckpt"
    ckpt = torch.load(path, weights_only=True)  # no arbitrary unpickling needed
    meta = ckpt["seq2seq"]
    assert meta["src_lang"] == "de" and meta["tgt_lang"] == "en"
    assert meta["model_config"]["src_vocab_size"] == 400
    assert set(meta["tokenizers"]) == {"src", "tgt"}
    model = build_model(load_checkpoint(path))
    src = torch.tensor([[5, 6, 7, 3]])
    module.model.eval()
    torch.testing.assert_close(model(src, torch.tensor([[2, 9]])), module.model(src, torch.tensor([[2, 9]])))
    assert path.stat().st_mode & 0o044 == 0o044  # readable like any file, not owner-only
    # no leftover temporary files from the atomic writes
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_average_of_identical_checkpoints_is_the_same_model(small_corpus, tmp_path):
    fit(small_corpus, tmp_path, max_steps=4, every=2)
    a, b = tmp_path / "epoch=0-step=2.ckpt", tmp_path / "epoch=0-step=4.ckpt"
    average([b, b], tmp_path / "same.ckpt")
    out = average([a, b], tmp_path / "avg.ckpt")
    same = load_checkpoint(tmp_path / "same.ckpt")["state_dict"]
    wa, wb = load_checkpoint(a)["state_dict"], load_checkpoint(b)["state_dict"]
    for key, value in wb.items():
        torch.testing.assert_close(same[key], value)
        torch.testing.assert_close(out["state_dict"][key], (wa[key] + value) / 2)
    # tied embeddings stay one tensor in the file (not one copy per name)
    saved = load_checkpoint(tmp_path / "avg.ckpt")["state_dict"]
    tied = [saved[f"model.{k}.weight"].data_ptr() for k in ("src_embed.tokens", "tgt_embed.tokens", "output")]
    assert len(set(tied)) == 1
    # ... and the model built from the file is the average, tied output included
    model = build_model(load_checkpoint(tmp_path / "avg.ckpt"))
    assert model.output.weight is model.tgt_embed.tokens.weight is model.src_embed.tokens.weight
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, (wa[f"model.{key}"] + wb[f"model.{key}"]) / 2, msg=key)


def test_bf16_mixed_precision_trains_on_cpu(small_corpus, tmp_path):
    losses, trainer, _ = fit(small_corpus, tmp_path, max_steps=8, precision="bf16-mixed")
    assert trainer.precision == "bf16-mixed"
    assert all(math.isfinite(v) for v in losses.values())
    assert losses[8] < losses[1]


def test_bf16_mixed_runs_the_linears_in_bf16_and_the_loss_and_grads_in_fp32():
    """What Lightning's bf16-mixed does to our step on CPU: its autocast context makes every
    linear layer bfloat16; the fused loss stays float32, as do the weights' gradients."""
    from lightning.pytorch.plugins.precision import MixedPrecision
    from torch.overrides import TorchFunctionMode

    from seq2seq.data.batch import collate
    from seq2seq.model import Seq2Seq

    arch = ModelConfig(src_vocab_size=41, tgt_vocab_size=41, d_model=16, n_heads=2, d_ff=24,
                       encoder_layers=1, decoder_layers=1, dropout=0.0)
    module = Seq2SeqModule(arch, OptimConfig())
    module.model = Seq2Seq(arch)
    dtypes = []

    class Linears(TorchFunctionMode):  # the layers call F.linear (layers.linear), not modules
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func is torch.nn.functional.linear:
                dtypes.append(out.dtype)
            return out

    batch = collate([{"src_ids": [5, 6, 7], "tgt_ids": [8, 9]}, {"src_ids": [5], "tgt_ids": [6, 7, 8]}])
    with MixedPrecision("bf16-mixed", "cpu").forward_context(), Linears():
        loss, _ = module.loss(batch)
    loss.backward()
    assert set(dtypes) == {torch.bfloat16} and len(dtypes) >= 10 and loss.dtype == torch.float32 and math.isfinite(loss.item())
    assert all(p.grad.dtype == torch.float32 for p in module.model.parameters() if p.grad is not None)


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("precision", ["bf16-mixed", "32-true"])
def test_bf16_on_a_cpu_without_native_bf16_is_one_warning_line(precision, native, monkeypatch, capsys):
    from seq2seq.cli import train_checks

    monkeypatch.setattr(train_checks, "native_bf16", lambda: native)
    build_cli(["-c", str(ROOT / "configs" / "smoke.yaml"), "--trainer.precision", precision], run=False)
    err = capsys.readouterr().err
    warned = [line for line in err.splitlines() if "no native bfloat16" in line]
    assert len(warned) == (precision == "bf16-mixed" and not native)
    assert all(line.startswith("seq2seq-train: warning: --trainer.precision bf16-mixed") for line in warned)
    assert train_checks.bf16_warning({"trainer.precision": "bf16-mixed", "trainer.accelerator": "gpu"},
                                     native=False) is None  # a GPU's bf16 is not this CPU's


def test_gradient_accumulation_counts_optimizer_steps(small_corpus, tmp_path):
    losses, trainer, _ = fit(small_corpus, tmp_path, max_steps=3, accumulate_grad_batches=2)
    assert trainer.global_step == 3
    assert trainer.fit_loop.epoch_loop.batch_progress.total.completed == 6


# ---------------------------------------------------------------- bad input
def test_non_finite_loss_stops_naming_the_step(small_corpus, tmp_path):
    class Poison(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.global_step == 3:
                with torch.no_grad():
                    pl_module.model.output.weight.fill_(float("nan"))

    with pytest.raises(FloatingPointError, match="at step 3"):
        fit(small_corpus, tmp_path, max_steps=10, callbacks=[Poison()])


def test_truncated_checkpoint_gives_one_line_error(small_corpus, tmp_path):
    fit(small_corpus, tmp_path, max_steps=2, every=2)
    data = (tmp_path / "last.ckpt").read_bytes()
    bad = tmp_path / "bad.ckpt"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(bad)
    assert "bad.ckpt" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(CheckpointError, match="no such file"):
        load_checkpoint(tmp_path / "missing.ckpt")


def run_cli(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "seq2seq.cli.train", *args], capture_output=True, text=True,
        timeout=timeout, cwd=ROOT, env=env,
    )


def cli_data_args(c: dict[str, str]) -> list[str]:
    return [
        "--data.data.corpus", "null", "--data.data.train_src", c["train_de"], "--data.data.train_tgt", c["train_en"],
        "--data.data.valid_src", c["val_de"], "--data.data.valid_tgt", c["val_en"],
        "--data.data.cache_dir", c["cache"], "--data.data.tokenizer.vocab_size", "400",
    ]


def test_unknown_config_key_is_named():
    res = run_cli("fit", "--config", "configs/smoke.yaml", "--model.arch.d_modle", "64")
    assert res.returncode != 0 and "d_modle" in res.stderr


def test_invalid_config_value_is_named():
    res = run_cli("fit", "--config", "configs/smoke.yaml", "--model.arch.norm_position", "middle")
    assert res.returncode != 0 and "norm_position" in res.stderr


def checkpoint_dirpath(cli) -> Path:
    """Where the CLI's own ModelCheckpoint (``--checkpoint.*``) writes."""
    ours = [c for c in cli.trainer.callbacks if isinstance(c, ModelCheckpoint) and c.monitor == "val_bleu"]
    assert len(ours) == 1
    return Path(ours[0].dirpath)


@pytest.mark.parametrize("configs,root", [
    (["smoke.yaml"], "runs/smoke"),
    (["multi30k_de_en_tiny.yaml"], "runs/multi30k_de_en_tiny"),
    (["multi30k_en_de_tiny.yaml", "pre_ln.yaml"], "runs/multi30k_en_de_tiny"),
    (["multi30k_en_fr_tiny.yaml"], "runs/multi30k_en_fr_tiny"),
    (["multi30k_de_en_tiny.yaml", "quickstart.yaml"], "runs/quickstart"),  # scripts/quickstart.sh reads it
], ids=lambda x: "+".join(x) if isinstance(x, list) else None)
def test_shipped_configs_keep_checkpoints_in_runs_name_checkpoints(configs, root, tmp_path, monkeypatch):
    """Every snapshot (last, best by BLEU, the steps) beside last.ckpt, not in
    lightning_logs/version_N."""
    monkeypatch.chdir(tmp_path)  # relative paths resolve here; nothing is trained
    monkeypatch.setattr(sys, "argv", ["seq2seq-train"])  # LightningCLI also looks at sys.argv
    args = [a for c in configs for a in ("--config", str(ROOT / "configs" / c))]
    cli = build_cli(args, run=False)
    assert checkpoint_dirpath(cli) == tmp_path / root / "checkpoints"
    folders = {c.dirpath for c in cli.trainer.callbacks if isinstance(c, ModelCheckpoint)}
    assert folders == {str(tmp_path / root / "checkpoints")}


def test_shipped_recipes_are_bounded_by_updates():
    """A recipe (a config with trainer, model and data) stops after a fixed number of updates,
    so it trains the same model on every CPU; only a study, named as one, stops by wall time
    (max_steps -1, Lightning's default when it is missing)."""
    import yaml

    configs = sorted((ROOT / "configs").rglob("*.yaml"))
    by_time = []
    for path in configs:
        config = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        trainer = config.get("trainer") or {}
        recipe = {"trainer", "model", "data"} <= set(config)
        if trainer.get("max_steps", -1 if recipe else None) == -1 and "study" not in path.stem:
            by_time.append(str(path.relative_to(ROOT)))
    assert len(configs) > 10 and not by_time, f"bounded only by wall time: {by_time}"


@pytest.mark.parametrize("dirpath_given", [False, True], ids=["root-dir-only", "dirpath-wins"])
def test_cli_checkpoints_follow_default_root_dir(small_corpus, tmp_path, monkeypatch, dirpath_given):
    """``--trainer.default_root_dir X`` alone puts checkpoints in X/checkpoints (not in the
    config's runs/smoke); an explicit ``--checkpoint.dirpath`` still wins. Two steps."""
    monkeypatch.chdir(tmp_path)  # a stray relative path would show up under tmp_path
    monkeypatch.setattr(sys, "argv", ["seq2seq-train"])
    root, elsewhere = tmp_path / "root", tmp_path / "elsewhere"
    train_main([
        "fit", "--config", str(ROOT / "configs" / "smoke.yaml"), *cli_data_args(small_corpus),
        "--trainer.accelerator", "cpu", "--trainer.devices", "1", "--trainer.max_steps", "2",
        "--trainer.val_check_interval", "2", "--trainer.limit_val_batches", "1",
        "--trainer.num_sanity_val_steps", "0", "--model.val_bleu_max_sentences", "4",
        "--trainer.default_root_dir", str(root), *(["--checkpoint.dirpath", str(elsewhere)] if dirpath_given else []),
    ])
    where = elsewhere if dirpath_given else root / "checkpoints"
    assert load_checkpoint(where / "last.ckpt")["global_step"] == 2
    names = sorted(p.name for p in where.iterdir())  # last + the best by validation BLEU
    assert len(names) == 2 and names[0] == "last.ckpt" and names[1].startswith("step000002-bleu")
    assert {p.parent for p in tmp_path.rglob("*.ckpt")} == {where}  # nowhere else
    assert not (tmp_path / "runs").exists() and (root / "lightning_logs").is_dir()


def test_snapshots_stay_in_the_runs_checkpoint_folder_across_a_resume(small_corpus, tmp_path, monkeypatch):
    """The shipped configs' step snapshots land beside last.ckpt, before and after a resume
    (Lightning put them in lightning_logs/version_N/checkpoints, a new N at every resume),
    where seq2seq-average --last finds one per step. 4 steps, then 2 more."""
    import yaml

    from seq2seq.cli.average import select

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["seq2seq-train"])
    recipe = yaml.safe_load((ROOT / "configs" / "multi30k_de_en_tiny.yaml").read_text())
    snapshots = recipe["trainer"]["callbacks"]
    snapshots[0]["init_args"]["every_n_train_steps"] = 2
    overlay = tmp_path / "snapshots.yaml"
    overlay.write_text(yaml.safe_dump({"trainer": {"callbacks": snapshots}}))
    root, folder = tmp_path / "run", tmp_path / "run" / "checkpoints"
    args = ["fit", "--config", str(ROOT / "configs" / "smoke.yaml"), "--config", str(overlay),
            *cli_data_args(small_corpus), "--trainer.accelerator", "cpu", "--trainer.devices", "1",
            "--trainer.val_check_interval", "4", "--trainer.limit_val_batches", "1",
            "--trainer.num_sanity_val_steps", "0", "--model.val_bleu_max_sentences", "4",
            "--trainer.default_root_dir", str(root)]
    train_main([*args, "--trainer.max_steps", "4"])
    train_main([*args, "--trainer.max_steps", "6", "--ckpt_path", str(folder / "last.ckpt")])
    assert {p.parent for p in tmp_path.rglob("*.ckpt")} == {folder}  # nowhere else
    assert sorted(p.name for p in folder.glob("step??????.ckpt")) == [
        "step000002.ckpt", "step000004.ckpt", "step000006.ckpt"]
    assert [p.name[:10] for p in select(folder, last=10, best=None)] == [
        "step000002", "step000004", "step000006"]


@pytest.mark.slow
def test_cli_trains_with_ddp_on_two_cpu_processes(small_corpus, tmp_path):
    res = run_cli(
        "fit", "--config", "configs/smoke.yaml", *cli_data_args(small_corpus),
        "--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.strategy", "ddp",
        "--trainer.max_steps", "6", "--trainer.val_check_interval", "6",
        "--trainer.default_root_dir", str(tmp_path), "--checkpoint.dirpath", str(tmp_path / "ckpt"),
        "--model.val_bleu_max_sentences", "10",
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "world_size: 2" in res.stderr + res.stdout or "distributed_backend=gloo" in res.stderr + res.stdout
    ckpt = load_checkpoint(tmp_path / "ckpt" / "last.ckpt")
    assert ckpt["global_step"] == 6
    assert (tmp_path / "lightning_logs" / "version_0" / "curves.png").stat().st_size > 1000


def test_half_precision_checkpoint_is_the_rounded_model_in_half_the_bytes(small_corpus, tmp_path):
    fit(small_corpus, tmp_path, max_steps=2, every=2)
    full = tmp_path / "epoch=0-step=2.ckpt"
    average([full], tmp_path / "fp32.ckpt")
    average([tmp_path / "fp32.ckpt"], tmp_path / "fp16.ckpt", dtype="float16")  # a conversion
    ref, half = build_model(load_checkpoint(tmp_path / "fp32.ckpt")), build_model(load_checkpoint(tmp_path / "fp16.ckpt"))
    for (name, w), w16 in zip(ref.state_dict().items(), half.state_dict().values()):
        assert w16.dtype == w.dtype, name  # computes in the model's precision again
        torch.testing.assert_close(w16, w.half().float(), rtol=0, atol=0)
    src, tgt = torch.tensor([[5, 6, 7, 3]]), torch.tensor([[2, 9, 11]])
    torch.testing.assert_close(half(src, tgt), ref(src, tgt), rtol=0, atol=5e-2)
    # the file shrinks by 2 bytes per stored float (the tokenizer bytes stay)
    weights = load_checkpoint(full)["state_dict"].values()
    stored = sum({v.data_ptr(): v.numel() for v in weights if v.is_floating_point()}.values())
    saved = (tmp_path / "fp32.ckpt").stat().st_size - (tmp_path / "fp16.ckpt").stat().st_size
    assert 0.95 * 2 * stored < saved < 1.05 * 2 * stored
    assert load_checkpoint(tmp_path / "fp16.ckpt")["seq2seq"]["averaged_from"] == [str(full)]
    with pytest.raises(CheckpointError, match="dtype must be one of"):
        average([full], tmp_path / "x.ckpt", dtype="int8")


def test_average_cli_picks_the_newest_or_the_best(tmp_path):
    from seq2seq.cli.average import select

    for name in ("step000250.ckpt", "step001000.ckpt", "step000500.ckpt", "last.ckpt",
                 "step000300-bleu20.50.ckpt", "step000600-bleu19.00.ckpt", "step000900-bleu22.10.ckpt"):
        (tmp_path / name).touch()
    newest = [p.name for p in select(tmp_path, last=2, best=None)]
    assert newest == ["step000900-bleu22.10.ckpt", "step001000.ckpt"]
    best = [p.name for p in select(tmp_path, last=None, best=2)]
    assert best == ["step000300-bleu20.50.ckpt", "step000900-bleu22.10.ckpt"]
