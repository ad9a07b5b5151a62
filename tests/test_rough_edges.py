"""Rough edges a new user hit (issue 15): one meaning of ``-c``, a real ``seq2seq-train
--help``, quiet training output, a README whose Python API runs."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------- -m/--model, -c deprecated
def _translate(argv):
    from seq2seq.cli.translate import main

    main([*argv, "Hallo"])


def _evaluate(argv):
    from seq2seq.cli.evaluate import main

    main([*argv, "--quiet"])


def _export(argv):
    from seq2seq.cli.export import main

    main([*argv, "--to", "ctranslate2", "-o", "unused_out"])


COMMANDS = {"seq2seq-translate": _translate, "seq2seq-evaluate": _evaluate,
            "seq2seq-export": _export}


def _stderr_lines(run, argv, capsys) -> list[str]:
    with pytest.raises(SystemExit) as exc:
        run(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("old", ["-c", "--checkpoint"])
def test_old_checkpoint_option_is_model_plus_one_notice(command, old, tmp_path, capsys,
                                                        monkeypatch):
    """``-c``/``--checkpoint`` still reach the checkpoint (the same error naming the same
    missing file as ``-m``), after exactly one deprecation line on stderr."""
    monkeypatch.chdir(tmp_path)
    missing = str(tmp_path / "missing.ckpt")
    run = COMMANDS[command]
    new = _stderr_lines(run, ["-m", missing], capsys)
    assert new == _stderr_lines(run, ["--model", missing], capsys)
    assert len(new) == 1 and new[0].startswith(f"{command}: error: ") and "missing.ckpt" in new[0]
    notice, *rest = _stderr_lines(run, [old, missing], capsys)
    assert rest == new
    assert notice.startswith(f"{command}: warning: {old} is deprecated") and "-m/--model" in notice
    assert not (tmp_path / "unused_out").exists()


def test_model_option_is_required_and_named(capsys):
    from seq2seq.cli.translate import main

    lines = _stderr_lines(main, ["Hallo"], capsys)
    assert lines[-1].endswith("-m/--model is required")


def test_evaluate_takes_several_models_after_one_flag():
    from seq2seq.cli.evaluate import build_parser

    for flag in ("-m", "-c"):
        assert build_parser().parse_args([flag, "a.ckpt", "b.ckpt"]).checkpoint == ["a.ckpt", "b.ckpt"]


def test_train_c_is_the_config_file():
    from seq2seq.cli.train import build_cli

    cli = build_cli(["-c", str(ROOT / "configs" / "smoke.yaml")], run=False)
    assert cli.config["trainer"]["max_steps"] == 60


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


# ---------------------------------------------------------------- quiet training output
NOISE = {
    "tensorboardX notice": "tensorboardX",
    "logger advertisement": "💡 Tip",
    "litlogger": "litlogger",
    "LeafSpec deprecation": "LeafSpec",
    "ThroughputMonitor FLOPs": "flops_per_batch",
    "empty legend": "No artists with labels",
    "negative epoch count": "/-2",
}


@pytest.mark.slow
def test_smoke_training_prints_no_noise(tmp_path):
    """A smoke run that ends before its first validation and first recorded step (so the
    curves have nothing to label), with the progress bar on: none of the noise a new user
    reported, and a rich bar (when rich is installed) counting epochs sensibly."""
    import importlib.util
    import os
    import subprocess
    import sys

    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(ROOT), "COLUMNS": "120"}
    res = subprocess.run(
        [sys.executable, "-m", "seq2seq.cli.train", "fit", "--config", str(ROOT / "configs" / "smoke.yaml"),
         "--data.data.data_dir", str(ROOT / "data" / "multi30k"), "--trainer.max_steps", "5",
         "--trainer.enable_progress_bar", "true", "--trainer.default_root_dir", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    output = res.stdout + res.stderr
    assert res.returncode == 0, output[-3000:]
    assert {name for name, text in NOISE.items() if text in output} == set(), output[-3000:]
    assert list((tmp_path / "run").rglob("curves.png"))  # the curves were drawn, quietly
    if importlib.util.find_spec("rich") is not None:
        assert "Epoch 0/0" in output  # 5 steps: the run ends in its first epoch


def test_last_epoch_from_steps_or_epochs():
    """The rich bar's "Epoch i/last": ``max_epochs - 1``, or the epoch ``max_steps`` ends in."""
    from types import SimpleNamespace

    from seq2seq.training.callbacks import last_epoch

    def trainer(max_epochs, max_steps, batches, accumulate=1):
        return SimpleNamespace(max_epochs=max_epochs, max_steps=max_steps,
                               num_training_batches=batches, accumulate_grad_batches=accumulate)

    cases = [  # (max_epochs, max_steps, batches per epoch, accumulate) -> last epoch
        ((-1, 60, 370, 1), 0), ((-1, 8000, 120, 1), 66), ((-1, 240, 120, 1), 1),
        ((-1, 241, 120, 1), 2), ((-1, 240, 120, 2), 3), ((5, 8000, 120, 1), 4),
        ((None, 60, 370, 1), 0), ((10, -1, 120, 1), 9), ((-1, -1, 120, 1), None),
        ((-1, 60, float("inf"), 1), None),
    ]
    for args, expected in cases:
        assert last_epoch(trainer(*args)) == expected, args


@pytest.mark.parametrize("history", [
    {"train": [], "val": []},
    {"train": [{"step": 10, "loss": 5.0, "lr": 1e-3}], "val": []},
    {"a": {"train": [], "val": []}, "b": {"train": [], "val": [{"step": 5, "val_loss": 4.0}]}},
], ids=["empty", "train-only", "two-runs-no-bleu"])
def test_training_curves_plot_quietly(history, tmp_path):
    """Curves of runs that ended before anything (or before validation BLEU) was recorded:
    drawn without matplotlib's "No artists with labels" warning."""
    import warnings

    from seq2seq.plotting import plot_training_curves

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        path = plot_training_curves(history, tmp_path / "curves.png")
    assert path.stat().st_size > 0


# ---------------------------------------------------------------- seq2seq-train --help
def _train(argv, capsys, monkeypatch) -> str:
    """``seq2seq-train ARGV`` that exits 0 (help, --print_config): its stdout."""
    from seq2seq.cli.train import main

    monkeypatch.setattr("sys.argv", ["seq2seq-train"])  # LightningCLI also reads sys.argv
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code in (0, None)
    return capsys.readouterr().out


def _squash(text: str) -> str:
    return " ".join(text.split())


def test_train_help_describes_every_shipped_config_in_full(capsys, monkeypatch):
    help_text = _squash(_train(["--help"], capsys, monkeypatch))
    assert "train an encoder-decoder Transformer for machine translation" in help_text
    configs = sorted((ROOT / "configs").glob("*.yaml"))
    assert configs
    for path in configs:
        assert path.name in help_text
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.startswith("#"):
                break
            assert _squash(line[1:]) in help_text, (path.name, line)  # every header line, uncut


def test_train_help_options_are_real_options(capsys, monkeypatch):
    """Every option the help recommends is accepted, with the example or default it shows
    (checked in the merged config that --print_config prints)."""
    import yaml

    from seq2seq.cli.train_help import FIELDS, OPTIONS

    given = {option: example for option, example, _ in OPTIONS}
    for prefix, cls, names, _, _ in FIELDS:
        for name in names:
            default = getattr(cls(), name)
            given[f"{prefix}.{name}"] = yaml.safe_dump(default).removesuffix("\n...\n").strip()
    argv = ["fit", "-c", str(ROOT / "configs" / "smoke.yaml")]
    for option, value in given.items():
        argv += [option, value]
    config = yaml.safe_load(_train([*argv, "--print_config"], capsys, monkeypatch))
    for option, value in given.items():
        node = config
        for key in option.removeprefix("--").split("."):
            node = node[key]
        assert node == yaml.safe_load(value) or str(node) == value, (option, node, value)


def test_train_help_field_listings_exist(capsys, monkeypatch):
    from seq2seq.cli.train_help import FIELDS

    for listing in {f[4] for f in FIELDS}:
        assert "--" in _train(["fit", listing], capsys, monkeypatch), listing


def test_train_offers_the_subcommands_the_module_implements():
    """``test``/``predict`` need steps the module does not have: not offered (they failed)."""
    import lightning as L
    from lightning.pytorch.cli import LightningCLI

    from seq2seq.cli.train import Seq2SeqCLI
    from seq2seq.training.module import Seq2SeqModule

    step = {"fit": "training_step", "validate": "validation_step", "test": "test_step",
            "predict": "predict_step"}
    implemented = {name for name in LightningCLI.subcommands()
                   if getattr(Seq2SeqModule, step[name]) is not getattr(L.LightningModule, step[name])}
    assert set(Seq2SeqCLI.subcommands()) == implemented == {"fit", "validate"}


# ---------------------------------------------------------------- README: Python API
def test_readme_python_api_runs_as_written(tmp_path, monkeypatch, capsys):
    """The README's "Python API" block, executed verbatim (from a folder that sees the
    repository's data/), prints every ``# =>`` line it promises, in order, and leaves
    nothing in the working directory (its plot goes to a temporary folder)."""
    import re
    import tempfile

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Python API\n", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    expected = [line.removeprefix("# => ") for line in code.splitlines() if line.startswith("# => ")]
    assert expected
    work, temporary = tmp_path / "work", tmp_path / "tmp"
    work.mkdir()
    temporary.mkdir()
    (work / "data").symlink_to(ROOT / "data")
    monkeypatch.chdir(work)
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))  # the block's temporary files
    exec(compile(code, "README.md (Python API)", "exec"), {"__name__": "readme"})
    printed = capsys.readouterr().out.splitlines()
    it = iter(printed)
    assert all(line in it for line in expected), (expected, printed)  # a subsequence
    assert [p.name for p in work.iterdir()] == ["data"]  # nothing left in the working folder
    assert [p.stat().st_size > 0 for p in temporary.rglob("*.png")] == [True]


@pytest.mark.slow
def test_quickstart_shows_one_bar_over_its_updates(tmp_path):
    """The main job's overlay (fixed updates, no time limit) on the smoke model: one bar
    counting updates to max_steps (not Lightning's per-epoch bar), and last.ckpt holds the
    last update (the validation at the end writes it)."""
    import os
    import re
    import subprocess
    import sys

    from seq2seq.checkpoint import load_checkpoint

    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(ROOT), "COLUMNS": "120"}
    steps = 8
    res = subprocess.run(
        [sys.executable, "-m", "seq2seq.cli.train", "fit", "--config", str(ROOT / "configs" / "smoke.yaml"),
         "--config", str(ROOT / "configs" / "quickstart.yaml"), "--trainer.enable_progress_bar", "true",
         "--data.data.data_dir", str(ROOT / "data" / "multi30k"), "--data.data.max_tokens", "256",
         "--trainer.max_steps", str(steps), "--trainer.val_check_interval", str(steps // 2),
         "--trainer.limit_val_batches", "1", "--model.val_bleu_max_sentences", "4",
         "--trainer.default_root_dir", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    output = res.stdout + res.stderr
    assert res.returncode == 0, output[-3000:]
    counts = {(int(a), int(b)) for a, b in re.findall(r"Updates[^|]*\|[^|]*\|\s*(\d+)/(\d+)", output)}
    assert counts and {total for _, total in counts} == {steps}, output[-3000:]
    assert (steps, steps) in counts and "Epoch 0" not in output
    assert load_checkpoint(tmp_path / "run" / "checkpoints" / "last.ckpt")["global_step"] == steps
