"""Time the data pipeline (``scripts/benchmark_data.py``).

Multi30k (``run``): read + clean the 29k training pairs, train the joint 8000-piece
tokenizer, tokenize + length-filter + cache the training set, build one epoch of
token-budget batches (sampler + collate through the DataLoader). Then the same
preparation again, warm, which must neither retrain nor re-tokenize.

Scale (``scale``): synthetic corpora of millions of pairs (Multi30k repeated, numbered),
written to a work folder, never shipped. Per size, each in a fresh process: cold
preparation (pairs/s, peak RSS), one epoch of batches from the warm cache (pairs/s, peak
RSS), and ``seq2seq-train`` with the Tiny recipe from the warm cache (seconds to the end
of the first update, peak RSS of the whole training process); then the RSS growth per
million pairs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from lightning.pytorch import Callback

from scripts.bench.timing import check_load
from seq2seq.config import DataConfig, TokenizerConfig
from seq2seq.data.datamodule import Seq2SeqDataModule
from seq2seq.data.prepare import load_or_train_tokenizers, load_split, tokenized_split
from seq2seq.data.sources import read_lines

Log = Callable[[str], None]
ROOT = Path(__file__).resolve().parents[2]


def timed(results: dict[str, float], name: str, fn: Callable[[], Any], log: Log = print) -> Any:
    """Run ``fn`` once, store its seconds under ``name`` and print them."""
    start = time.perf_counter()
    out = fn()
    results[name] = time.perf_counter() - start
    log(f"{name:<44s} {results[name]:7.2f} s")
    return out


def one_epoch(dm: Seq2SeqDataModule) -> tuple[int, int, int]:
    """Batches, pairs and target tokens of one training epoch."""
    n_batches = n_pairs = n_tokens = 0
    for batch in dm.train_dataloader():
        n_batches, n_pairs, n_tokens = n_batches + 1, n_pairs + len(batch), n_tokens + batch.n_tgt_tokens
    return n_batches, n_pairs, n_tokens


def warm_setup(data: DataConfig) -> None:
    dm = Seq2SeqDataModule(data)
    dm.prepare_data()
    dm.setup("fit")


def cold_stages(data: DataConfig, log: Log = print) -> dict[str, Any]:
    """Every stage once from an empty cache; seconds per stage and what came out."""
    r: dict[str, float] = {}
    train = timed(r, "read + clean training pairs", lambda: load_split(data, "train"), log)
    tokenizers = timed(r, "train tokenizer (bpe 8000, joint)",
                       lambda: load_or_train_tokenizers(data, train), log)
    ds = timed(r, "tokenize + filter + cache train",
               lambda: tokenized_split(data, "train", tokenizers, train=True), log)
    timed(r, "tokenize + cache val", lambda: tokenized_split(data, "val", tokenizers, train=False), log)
    dm = Seq2SeqDataModule(data)
    dm.use_tokenizers(tokenizers)
    dm.setup("fit")
    n_batches, n_pairs, n_tokens = timed(r, "one epoch of batches (sampler + collate)",
                                         lambda: one_epoch(dm), log)
    return {"seconds": r, "pairs_kept": len(ds), "vocab_size": tokenizers.src.vocab_size,
            "batches": n_batches, "pairs": n_pairs, "target_tokens": n_tokens}


def run(data_dir: str | os.PathLike, num_proc: int | None = None, max_tokens: int = 4096,
        log: Log = print) -> dict[str, Any]:
    """Cold stages, then a warm ``prepare_data`` + ``setup``; the load average around both."""
    before = check_load("before", log)
    with tempfile.TemporaryDirectory(prefix="seq2seq-bench-") as cache:
        data = DataConfig(data_dir=str(data_dir), src_lang="de", tgt_lang="en",
                          tokenizer=TokenizerConfig(vocab_size=8000, joint=True),
                          max_tokens=max_tokens, num_proc=num_proc, cache_dir=cache)
        cold = cold_stages(data, log)
        log(f"{'total, cold cache':<44s} {sum(cold['seconds'].values()):7.2f} s")
        warm: dict[str, float] = {}
        timed(warm, "warm: prepare_data + setup (cache hits)", lambda: warm_setup(data), log)
    log(f"\n{cold['pairs_kept']} training pairs kept, vocab {cold['vocab_size']}; "
        f"{cold['batches']} batches, {cold['pairs']} pairs, {cold['target_tokens']} target "
        f"tokens per epoch at max_tokens={max_tokens}")
    after = check_load("after", log)
    return {"cold": cold, "warm": warm, "load_1min_before": before, "load_1min_after": after}


# ---------------------------------------------------------------------------------------
# Scale: synthetic corpora of millions of pairs, each stage in a fresh process (peak RSS)
# ---------------------------------------------------------------------------------------
def synthetic_corpus(out: Path, n_pairs: int, data_dir: str | os.PathLike) -> tuple[Path, Path]:
    """``train.de``/``train.en`` of ``n_pairs``: Multi30k's 29k training pairs repeated, the
    r-th repeat numbered on both sides ("... (r)"), so no two pairs are alike. Written once."""
    out.mkdir(parents=True, exist_ok=True)
    paths = out / "train.de", out / "train.en"
    if all(p.is_file() for p in paths) and (out / "pairs").read_text() == str(n_pairs):
        return paths
    for path, lang in zip(paths, ("de", "en"), strict=True):
        base = read_lines(Path(data_dir) / f"train.{lang}.gz")
        with open(path, "w", encoding="utf-8") as f:
            for start in range(0, n_pairs, len(base)):
                repeat = start // len(base)
                suffix = f" ({repeat})\n" if repeat else "\n"
                f.writelines(s + suffix for s in base[: n_pairs - start])
    (out / "pairs").write_text(str(n_pairs))
    return paths


def scale_config(corpus: Path, cache: Path, data_dir: str | os.PathLike, num_proc: int | None,
                 max_tokens: int = 4096) -> DataConfig:
    """The Tiny recipe's data settings (joint 8k BPE, 4,096-token batches) on ``corpus``."""
    return DataConfig(corpus=None, train_src=str(corpus / "train.de"), train_tgt=str(corpus / "train.en"),
                      valid_src=str(Path(data_dir) / "val.de.gz"), valid_tgt=str(Path(data_dir) / "val.en.gz"),
                      tokenizer=TokenizerConfig(vocab_size=8000, joint=True), max_tokens=max_tokens,
                      num_proc=num_proc, cache_dir=str(cache))


def peak_rss_mb() -> dict[str, float]:
    """Peak resident memory of the largest child of this process (``datasets.map``
    workers), in MB; the process's own is measured from outside (``run_measured``)."""
    return {"peak_rss_children_mb": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1)}


def stage_prepare(data: DataConfig) -> dict[str, Any]:
    """Cold preparation: read + store the pairs, train the tokenizer on its sample,
    tokenize + filter (``num_proc`` workers), the validation split too."""
    r: dict[str, float] = {}
    silent: Log = lambda _: None  # noqa: E731
    train = timed(r, "pairs", lambda: load_split(data, "train"), silent)
    tokenizers = timed(r, "tokenizer", lambda: load_or_train_tokenizers(data, train), silent)
    ds = timed(r, "tokenize", lambda: tokenized_split(data, "train", tokenizers, train=True), silent)
    timed(r, "validation", lambda: tokenized_split(data, "val", tokenizers, train=False), silent)
    seconds = sum(r.values())
    return {"pairs": len(train), "pairs_kept": len(ds), "seconds": round(seconds, 2), "stages": r,
            "pairs_per_s": round(len(train) / seconds), **peak_rss_mb()}


def stage_epoch(data: DataConfig) -> dict[str, Any]:
    """Warm cache: load, build the sampler, one epoch of batches through the DataLoader."""
    r: dict[str, float] = {}
    dm = Seq2SeqDataModule(data)
    timed(r, "setup", lambda: warm_setup_into(dm), lambda _: None)
    n_batches, n_pairs, n_tokens = timed(r, "epoch", lambda: one_epoch(dm), lambda _: None)
    return {"setup_seconds": round(r["setup"], 2), "seconds": round(r["epoch"], 2), "batches": n_batches,
            "pairs": n_pairs, "target_tokens": n_tokens, "pairs_per_s": round(n_pairs / r["epoch"]),
            **peak_rss_mb()}


def warm_setup_into(dm: Seq2SeqDataModule) -> None:
    dm.prepare_data()
    dm.setup("fit")


class FirstStepClock(Callback):
    """Prints the wall-clock time when the first training step ends (``FIRST_STEP <t>``)."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == 1:
            print(f"FIRST_STEP {time.time()}", flush=True)


def stage_train(data: DataConfig, root: Path, steps: int = 20) -> dict[str, Any]:
    """``seq2seq-train`` (the Tiny recipe) on the warm cache for ``steps`` updates, as its own
    process: seconds from launch to the end of the first update, and its peak RSS."""
    clock = root / "clock.yaml"
    clock.write_text("trainer:\n  callbacks:\n    - class_path: scripts.bench.data.FirstStepClock\n")
    args = [sys.executable, "-m", "seq2seq.cli.train", "fit", "--config", str(ROOT / "configs/multi30k_de_en_tiny.yaml"),
            "--config", str(clock), "--data.data.corpus", "null", "--data.data.train_src", data.train_src,
            "--data.data.train_tgt", data.train_tgt, "--data.data.valid_src", data.valid_src,
            "--data.data.valid_tgt", data.valid_tgt, "--data.data.cache_dir", data.cache_dir,
            "--trainer.max_steps", str(steps), "--trainer.val_check_interval", str(steps),
            "--trainer.check_val_every_n_epoch", "null", "--trainer.limit_val_batches", "1",
            "--model.val_bleu_max_sentences", "8", "--trainer.num_sanity_val_steps", "0",
            "--trainer.enable_progress_bar", "false",
            "--trainer.default_root_dir", tempfile.mkdtemp(dir=root, prefix="run-")]  # a fresh run
    start = time.time()
    out, code, memory = run_measured(args)
    first = [float(line.split()[1]) for line in out.splitlines() if line.startswith("FIRST_STEP ")]
    if code != 0 or not first:
        raise RuntimeError(f"seq2seq-train failed:\n{out[-3000:]}")
    return {"first_step_seconds": round(first[0] - start, 2), "steps": steps, **memory}


def _memory_mb(pid: int) -> dict[str, float]:
    """Resident memory of ``pid`` now (MB): all, anonymous (heap: must fit in RAM) and
    file-backed (pages of memory-mapped files such as the token cache: the kernel drops
    them under pressure and other processes share them)."""
    fields = {"VmRSS": "rss", "RssAnon": "anon", "RssFile": "file"}
    out = {}
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in fields:
                out[fields[name]] = int(value.split()[0]) / 1024
    return out


def run_measured(args: list[str]) -> tuple[str, int, dict[str, float]]:
    """Run ``args`` from the checkout; its output, exit code and peak memory (MB): RSS from
    the kernel's own high-water mark, anonymous and file-backed sampled every 0.1 s."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_DATASETS_OFFLINE": "1"}
    proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peaks: dict[str, float] = {}

    def sample() -> None:
        while proc.returncode is None:
            for name, mb in _memory_mb(proc.pid).items():
                peaks[name] = max(peaks.get(name, 0.0), mb)
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)  # reaped here, so its own rusage is ours to read
    proc.returncode = os.waitstatus_to_exitcode(status)
    sampler.join()
    memory = {"peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
              "peak_anon_mb": round(peaks.get("anon", 0.0), 1), "peak_file_mb": round(peaks.get("file", 0.0), 1)}
    return out, proc.returncode, memory


def run_stage(stage: str, data: DataConfig) -> dict[str, Any]:
    """``stage`` ("prepare" or "epoch") in a fresh process, so its peak RSS is its own."""
    out, code, memory = run_measured([sys.executable, str(ROOT / "scripts/benchmark_data.py"), "--stage", stage,
                                      "--stage-config", json.dumps(dataclasses.asdict(data))])
    if code != 0:
        raise RuntimeError(f"stage {stage} failed:\n{out[-3000:]}")
    return {**json.loads(out.strip().splitlines()[-1]), **memory}


def growth_per_million(sizes: list[int], values: list[float]) -> float | None:
    """Least-squares slope of ``values`` against pairs, per million pairs."""
    if len(sizes) < 2:
        return None
    return round(float(np.polyfit(np.asarray(sizes) / 1e6, values, 1)[0]), 1)


def describe_row(row: dict[str, Any]) -> str:
    p, e, t = row["prepare"], row["epoch"], row["train"]

    def mem(d: dict[str, Any]) -> str:
        return f"peak RSS {d['peak_rss_mb']:,.0f} MB (anon {d['peak_anon_mb']:,.0f}, file {d['peak_file_mb']:,.0f})"

    return (f"{row['pairs']:>11,} pairs\n"
            f"  prepare (cold)    {p['seconds']:8.1f} s  {p['pairs_per_s']:>9,} pairs/s  {mem(p)}, "
            f"child processes (tokenizer, map workers) {p['peak_rss_children_mb']:,.0f} MB\n"
            f"  epoch of batches  {e['seconds']:8.1f} s  {e['pairs_per_s']:>9,} pairs/s  {mem(e)}\n"
            f"  seq2seq-train     first update {t['first_step_seconds']:.1f} s after launch (warm cache), "
            f"{t['steps']} updates: {mem(t)}")


def scale(sizes: list[int], work: Path, data_dir: str | os.PathLike, num_proc: int | None,
          log: Log = print) -> dict[str, Any]:
    """For each size: a synthetic corpus, cold preparation, one epoch of batches, then
    training from the warm cache; pairs/s, peak RSS and the growth per million pairs."""
    before = check_load("before", log)
    rows = []
    for n in sizes:
        corpus = work / f"corpus_{n}"
        synthetic_corpus(corpus, n, data_dir)
        cache = work / f"cache_{n}"
        shutil.rmtree(cache, ignore_errors=True)  # cold
        data = scale_config(corpus, cache, data_dir, num_proc)
        row = {"pairs": n, "prepare": run_stage("prepare", data), "epoch": run_stage("epoch", data),
               "train": stage_train(data, work)}
        log(describe_row(row))
        rows.append(row)
    growth = {f"{stage}_{kind}": growth_per_million(sizes, [r[stage][f"peak_{kind}_mb"] for r in rows])
              for stage in ("prepare", "epoch", "train") for kind in ("rss", "anon")}
    log(f"peak memory growth per million pairs (MB): {growth}")
    return {"rows": rows, "growth_mb_per_million_pairs": growth, "num_proc": num_proc,
            "load_1min_before": before, "load_1min_after": check_load("after", log)}
