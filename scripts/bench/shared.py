"""The shared-machine section (on request): our translation (sentences/s) and training step
(updates/s) alone, beside one busy core and beside two, under two thread policies:

- "seq2seq": what the commands do (``seq2seq.runtime``: threads from the cores other work
  leaves free, re-checked between batches);
- "fixed, spinning": every core as threads and libgomp's default spinning wait
  (``SEQ2SEQ_THREADS`` = cores, ``GOMP_SPINCOUNT=300000``), what torch does by default.

Busy cores are single-threaded Python busy loops started before and killed after each run.
Every run is a fresh process. Reported: the throughput, its ratio to the same policy alone
and to the fair share (1 / (busy + 1): each process an equal part of the machine).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

Log = Callable[[str], None]
ROOT = Path(__file__).resolve().parents[2]
BUSY_LOOP = "import time\nt = time.time()\nwhile time.time() - t < 900: pass\n"
POLICIES = {"seq2seq": {}, "fixed, spinning": {"GOMP_SPINCOUNT": "300000"}}


def policy_env(name: str, cores: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_NUM_THREADS", "SEQ2SEQ_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.update(POLICIES[name], PYTHONPATH=str(ROOT), HF_DATASETS_OFFLINE="1")
    if name != "seq2seq":
        env["SEQ2SEQ_THREADS"] = str(cores)
    return env


def child_run(task: str, ckpt_path: str, data_dir: str, n: int, repeats: int) -> dict:
    """In the measured process: start as the commands do, then time ``task``."""
    import seq2seq  # noqa: F401  (OpenMP settings before torch)
    from seq2seq import runtime

    choice = runtime.start(log=open(os.devnull, "w"))
    from scripts.bench.timing import measure
    if task == "translate":
        from scripts.bench.engines import read_test_sources
        from seq2seq.checkpoint import load_checkpoint
        from seq2seq.translation.translator import Translator
        texts = read_test_sources(load_checkpoint(ckpt_path), data_dir, limit=n)
        translator = Translator.from_checkpoint(ckpt_path)
        m = measure(lambda: translator.translate(texts), repeats,
                    warmup=lambda: translator.translate(texts[:50]), engine="ours")
        rate = len(texts) / m.seconds
    else:
        from scripts.bench.engines import ours_train_step, training_batches
        from seq2seq.checkpoint import build_model, load_checkpoint
        ckpt = load_checkpoint(ckpt_path)
        batches = training_batches(ckpt, data_dir, ROOT / ".cache" / "seq2seq", 4096, n)
        step = ours_train_step(build_model(ckpt), False)

        def steps() -> None:
            for b in batches:
                runtime.tick()
                step(b)
        m = measure(steps, repeats, warmup=lambda: step(batches[0]), engine="ours")
        rate = len(batches) / m.seconds
    import torch
    return {"rate": rate, "times": m.times, "threads_start": choice.threads,
            "threads_end": torch.get_num_threads()}


def run_one(task: str, policy: str, busy: int, ckpt_path: str, data_dir: str, n: int,
            repeats: int, cores: int) -> dict:
    hogs = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(busy)]
    try:
        time.sleep(0.5 if busy else 0.0)  # let the busy loops take their cores
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "out.json"
            code = ("import json, sys\nfrom scripts.bench.shared import child_run\n"
                    f"r = child_run({task!r}, {ckpt_path!r}, {str(data_dir)!r}, {n}, {repeats})\n"
                    f"open({str(out)!r}, 'w').write(json.dumps(r))\n")
            res = subprocess.run([sys.executable, "-c", code], cwd=ROOT,
                                 env=policy_env(policy, cores), capture_output=True, text=True)
            if res.returncode != 0:
                raise RuntimeError(f"shared section, {task} {policy}: {res.stderr[-2000:]}")
            return json.loads(out.read_text())
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def bench_shared(ckpt_path: str, data_dir: str, *, sentences: int = 500, batches: int = 8,
                 repeats: int = 3, busy: tuple[int, ...] = (0, 1, 2), log: Log = print) -> dict:
    """Every (task, policy, busy cores) in its own process; ratios as the module says."""
    from seq2seq.runtime import usable_cores

    cores, rows = usable_cores(), []
    for task, n in (("translate", sentences), ("train", batches)):
        for policy in POLICIES:
            alone = None
            for k in busy:
                log(f"  {task}, {policy}, {k} busy core(s) ...")
                r = run_one(task, policy, k, ckpt_path, data_dir, n, repeats, cores)
                alone = r["rate"] if k == 0 else alone
                rows.append({"task": task, "policy": policy, "busy": k, **r,
                             "vs_alone": None if alone is None else r["rate"] / alone,
                             "fair_share": 1 / (k + 1)})
    return {"rows": rows, "cores": cores,
            "notes": [f"{cores} usable cores; translate: {sentences} test sentences greedy "
                      f"(sentences/s), train: {batches} training steps fp32 (updates/s); "
                      "median of the timed runs after a warm-up, each in a fresh process",
                      "vs alone: this row over the same task and policy alone; fair share: "
                      "1 / (busy loops + 1)"]}
