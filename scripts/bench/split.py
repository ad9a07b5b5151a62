"""Both cores, split two ways: one ``seq2seq-train`` process with 2 threads, or Lightning DDP
with 2 processes x 1 thread (gloo), on the Tiny recipe's real batches. Each run trains
``steps`` updates in a fresh run folder; :class:`TokenClock` times every rank from the end
of update ``skip`` to the end of the last one (start-up, data loading, the first updates and
the final checkpoint excluded) and counts the target tokens it trained on. Reported per
split: target tokens/s summed over ranks, updates/s and tokens per update."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lightning.pytorch import Callback

Log = Callable[[str], None]
ROOT = Path(__file__).resolve().parents[2]
SPLITS = {"1 process x 2 threads": (1, 2), "DDP 2 processes x 1 thread": (2, 1)}


class TokenClock(Callback):
    """Prints ``TOKCLOCK rank updates tokens seconds`` after the last update: the updates,
    target tokens and wall time after update ``skip`` on this rank."""

    def __init__(self, skip: int = 10):
        self.skip, self.tokens, self.start = skip, 0, None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if step == self.skip:
            self.start, self.tokens = time.perf_counter(), 0
        elif step > self.skip:
            self.tokens += int(batch.n_tgt_tokens)
        if step == trainer.max_steps and self.start is not None:
            print(f"TOKCLOCK {trainer.global_rank} {step - self.skip} {self.tokens} "
                  f"{time.perf_counter() - self.start:.4f}", flush=True)


def train_args(config: Path, root: Path, steps: int, devices: int) -> list[str]:
    return [sys.executable, "-m", "seq2seq.cli.train", "fit",
            "--config", str(ROOT / "configs" / "multi30k_de_en_tiny.yaml"), "--config", str(config),
            "--trainer.max_steps", str(steps), "--trainer.max_time", "null",
            "--trainer.check_val_every_n_epoch", "null", "--trainer.val_check_interval", "1000000",
            "--trainer.num_sanity_val_steps", "0", "--trainer.enable_progress_bar", "false",
            "--trainer.devices", str(devices),
            *(["--trainer.strategy", "ddp"] if devices > 1 else []),
            "--trainer.default_root_dir", str(root)]


def run_split(name: str, steps: int, skip: int, work: Path) -> dict[str, Any]:
    devices, threads = SPLITS[name]
    clock = work / "clock.yaml"
    clock.write_text("trainer:\n  callbacks:\n    - class_path: scripts.bench.split.TokenClock\n"
                     f"      init_args:\n        skip: {skip}\n")
    root = Path(tempfile.mkdtemp(dir=work, prefix="run-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_DATASETS_OFFLINE": "1",
           "OMP_NUM_THREADS": str(threads)}
    res = subprocess.run(train_args(clock, root, steps, devices), cwd=ROOT, env=env,
                         capture_output=True, text=True)
    clocks = [line.split()[1:] for line in (res.stdout + res.stderr).splitlines()
              if line.startswith("TOKCLOCK ")]
    if res.returncode != 0 or len(clocks) != devices:
        raise RuntimeError(f"{name}: seq2seq-train failed:\n{(res.stdout + res.stderr)[-3000:]}")
    updates = int(clocks[0][1])
    tokens = sum(int(c[2]) for c in clocks)
    seconds = max(float(c[3]) for c in clocks)  # the update ends when the slowest rank does
    return {"split": name, "processes": devices, "threads": threads, "updates": updates,
            "target_tokens": tokens, "seconds": seconds, "tok_per_s": tokens / seconds,
            "updates_per_s": updates / seconds, "tokens_per_update": tokens / updates}


def bench_split(steps: int = 70, skip: int = 10, repeats: int = 2, work: Path | None = None,
                log: Log = print) -> dict[str, Any]:
    """Each split ``repeats`` times, interleaved (A B A B) so a drift in the machine hits
    both; the median run of each by tokens/s."""
    work = Path(work or tempfile.mkdtemp(prefix="seq2seq-split-"))
    runs: dict[str, list[dict]] = {name: [] for name in SPLITS}
    for i in range(repeats):
        for name in SPLITS:
            log(f"  {name}, run {i + 1}/{repeats} ...")
            runs[name].append(run_split(name, steps, skip, work))
    rows = [sorted(r, key=lambda x: x["tok_per_s"])[len(r) // 2] | {"all_tok_per_s": [x["tok_per_s"] for x in r]}
            for r in runs.values()]
    for row in rows:
        row["gain"] = row["tok_per_s"] / rows[0]["tok_per_s"]
    return {"rows": rows, "steps": steps, "skip": skip}
