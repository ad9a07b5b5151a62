"""What a training run prints: none of the noise a new user reported (library notices,
advertisements, warnings), and one progress bar counting what the run counts (epochs of a
run bounded by epochs, updates of one bounded by updates)."""

from __future__ import annotations

import pytest
from helpers import ROOT

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
