"""Interrupted training: kill -9 at random moments never leaves an unreadable checkpoint or a
stray file, and resuming gives the weights of the uninterrupted run; a run folder is used by
one run at a time (a lock the OS releases when its holder dies)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import ROOT, run_train, train_args

from seq2seq.checkpoint import load_checkpoint, model_state
from seq2seq.cli.average import select
from seq2seq.files import lock_folder, unlock
from seq2seq.training.module import Seq2SeqModule


def _start(c, root: Path, steps: int) -> subprocess.Popen:
    saved = sorted((root / "checkpoints").glob("*.ckpt"), key=lambda p: p.stat().st_mtime)
    last = root / "checkpoints" / "last.ckpt"  # else a kill came between a snapshot and last
    resume = ["--ckpt_path", str(last if last.exists() else saved[-1])] if saved else []
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "HF_DATASETS_OFFLINE": "1"}
    return subprocess.Popen([sys.executable, "-m", "seq2seq.cli.train", *train_args(c, root, steps, *resume)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=root.parent)


def _kill_at_random(proc: subprocess.Popen, folder: Path, rng: random.Random) -> str:
    """kill -9 ``proc`` a random moment after its next checkpoint write began (or during
    start-up, one time in four); returns what happened, for the failure message."""
    def stamp():
        return sorted((p.name, p.stat().st_mtime_ns) for p in folder.glob("*")) if folder.is_dir() else []

    before, t0 = stamp(), time.monotonic()
    early = rng.random() < 0.25
    while proc.poll() is None and not early and stamp() == before and time.monotonic() - t0 < 60:
        time.sleep(0.005)
    delay = rng.uniform(0, 0.4) if not early else rng.uniform(0.5, 4.0)
    time.sleep(delay)
    if proc.poll() is not None:
        return f"finished before the kill (rc {proc.returncode})"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return f"killed {'during start-up' if early else 'after a write began'} (+{delay:.2f} s)"


@pytest.mark.slow
def test_kill_9_at_random_moments_then_resume_equals_uninterrupted(corpus, tmp_path):
    steps, seed = 16, random.randrange(2**32)
    rng = random.Random(seed)
    reference = _start(corpus, tmp_path / "reference", steps)  # alongside, uninterrupted
    run, history = tmp_path / "killed", []
    folder = run / "checkpoints"
    for _ in range(5):
        proc = _start(corpus, run, steps)
        history.append(_kill_at_random(proc, folder, rng))
        for ckpt in folder.glob("*.ckpt"):  # whatever the moment, every checkpoint loads
            load_checkpoint(ckpt)
    # a save the last kill cut short, as it looks on disk: removed at the next start
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f".last.ckpt.{proc.pid}.x1y2z3.tmp").write_bytes(b"half a checkpoint")
    final = _start(corpus, run, steps)
    assert final.wait(timeout=300) == 0, final.stderr.read().decode()[-3000:]
    assert reference.wait(timeout=300) == 0, reference.stderr.read().decode()[-3000:]
    where = f"seed {seed}: {history}"
    names = sorted(p.name for p in folder.iterdir())
    assert not [n for n in names if n.endswith(".tmp") or "-v" in n], (where, names)
    assert len(select(folder, last=100, best=None)) == steps // 2, (where, names)
    ours = load_checkpoint(folder / "last.ckpt")
    theirs = load_checkpoint(tmp_path / "reference" / "checkpoints" / "last.ckpt")
    assert ours["global_step"] == theirs["global_step"] == steps
    for name, w in model_state(theirs).items():
        torch.testing.assert_close(model_state(ours)[name], w, rtol=0, atol=1e-6, msg=where)


def test_a_run_folder_in_use_is_refused_and_released_when_its_holder_dies(corpus, tmp_path, capsys,
                                                                           monkeypatch):
    """The lock is what the training takes (flock on the folder); the OS releases it when
    its holder dies, even by kill -9; the run holds it until it ends."""
    root = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from seq2seq.cli.train_checks import "
         f"lock_run_folders; lock_run_folders([('x', __import__('pathlib').Path({str(root)!r}))]); "
         "print('locked', flush=True); time.sleep(600)"], stdout=subprocess.PIPE, env=env)
    try:
        assert holder.stdout.readline() == b"locked\n"
        code, err = run_train(train_args(corpus, root), capsys, monkeypatch)
        assert code == 2 and err.strip().splitlines()[-1].startswith("seq2seq-train: error: "), err
        assert "--trainer.default_root_dir" in err and "another process is using it" in err, err
        assert not list(root.rglob("*.ckpt"))
    finally:
        holder.kill()
        holder.wait()
    seen = []

    def probe(module, batch, batch_idx):  # during the run: is the folder still locked?
        try:
            unlock(lock_folder(root, "probe"))
            seen.append("free")
        except ValueError:
            seen.append("locked")

    monkeypatch.setattr(Seq2SeqModule, "on_train_batch_start", probe, raising=False)
    code, err = run_train(train_args(corpus, root), capsys, monkeypatch)
    assert code == 0, err
    assert seen == ["locked", "locked"]
    unlock(lock_folder(root, "after the run"))  # released at the end, in-process too
