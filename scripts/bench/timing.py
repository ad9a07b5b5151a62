"""How every number is taken: median of timed runs after a warm-up, peak RSS per row, one
thread count for all engines, and the load average that says whether the machine was quiet;
a timed training-step row (:func:`train_row`) and a speed target (a ratio that must reach a
bound: :func:`target`).

Peak RSS is measured in this process: the kernel's high-water mark is reset before each
row's warm-up (``/proc/self/clear_refs``) and the row reports how far it rose above the
resident size just before. Where that reset is unavailable, the process-wide peak
(``getrusage``) is reported instead, and :func:`rss_note` says so.
"""

from __future__ import annotations

import importlib
import os
import re
import resource
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seq2seq import machine

# Above this 1-minute load average other work shares the CPUs: timings are not results.
QUIET_LOAD = 0.5


@dataclass
class Measurement:
    seconds: float  # median of the timed runs
    times: list[float]
    result: Any  # what the last timed run returned
    rss_peak_mb: float | None  # peak resident size during warm-up + timed runs
    rss_rise_mb: float | None  # ... minus the resident size just before them


def proc_status_kb(field: str) -> int | None:
    """A ``kB`` field of ``/proc/self/status`` (VmRSS, VmHWM), or None off Linux."""
    try:
        text = Path("/proc/self/status").read_text()
    except OSError:
        return None
    m = re.search(rf"^{field}:\s+(\d+) kB", text, re.M)
    return int(m.group(1)) if m else None


def reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) of this process; False if impossible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return proc_status_kb("VmHWM") is not None


RSS_RESETTABLE = reset_peak_rss()


_TIMED_ENGINE: str | None = None  # the one engine this process may time


def claim_process(engine: str) -> None:
    """Mark this process as ``engine``'s: timing another engine here afterwards raises, since
    an engine's idle threads slow the next one in the same process (see scripts.bench.isolate)."""
    global _TIMED_ENGINE
    if _TIMED_ENGINE not in (None, engine):
        raise RuntimeError(f"engine {engine!r} timed in a process that already timed "
                           f"{_TIMED_ENGINE!r}: time each engine in its own process")
    _TIMED_ENGINE = engine


def measure(fn: Callable[[], Any], repeats: int, warmup: Callable[[], Any] | None = None,
            timer: Callable[[], float] = time.perf_counter, engine: str | None = None) -> Measurement:
    """Run ``warmup`` (default ``fn``) once untimed, then time ``fn`` ``repeats`` times with
    ``timer``. Peak RSS covers the warm-up too (first-call allocations belong to the engine).
    ``engine``: the engine ``fn`` runs, claimed for this process (:func:`claim_process`)."""
    if engine is not None:
        claim_process(engine)
    before = None
    if RSS_RESETTABLE:
        reset_peak_rss()
        before = proc_status_kb("VmRSS")
    (warmup or fn)()
    times, result = [], None
    for _ in range(repeats):
        start = timer()
        result = fn()
        times.append(timer() - start)
    if RSS_RESETTABLE:
        peak = proc_status_kb("VmHWM")
        peak_mb, rise_mb = peak / 1024, (peak - before) / 1024
    else:  # Linux reports ru_maxrss in kB: the peak since the process started
        peak_mb, rise_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, None
    return Measurement(statistics.median(times), times, result, peak_mb, rise_mb)


def train_row(name: str, precision: str, step: Callable[[Any], int], batches: Sequence,
              repeats: int, engine: str | None = None) -> dict:
    """Time ``step`` over all ``batches`` (warm-up: one step on the first batch); ``engine``
    claims this process for that engine (one engine per process)."""
    m = measure(lambda: sum(step(b) for b in batches), repeats, warmup=lambda: step(batches[0]),
                engine=engine)
    return {"engine": name, "precision": precision, "batches": len(batches),
            "target_tokens": m.result, "seconds": m.seconds, "times": m.times,
            "tok_per_s": m.result / m.seconds, "ms_per_step": 1000 * m.seconds / len(batches),
            "rss_peak_mb": m.rss_peak_mb, "rss_rise_mb": m.rss_rise_mb, "ours_over_this": None}


def target(name: str, row: dict, need: float) -> dict:
    """Attach a ``ratio >= need`` target to the row holding the ratio, and return it."""
    ratio = row["ours_over_this"]
    row["target"], row["pass"] = need, ratio >= need
    return {"target": name, "ratio": ratio, "need": need, "pass": ratio >= need}


def rss_label() -> str:
    """Column header for the RSS figure :func:`rss_value` picks."""
    return "ΔRSS MB" if RSS_RESETTABLE else "RSS MB"


def rss_value(row: dict) -> float | None:
    return row["rss_rise_mb"] if RSS_RESETTABLE else row["rss_peak_mb"]


def rss_note() -> str:
    if RSS_RESETTABLE:
        return ("ΔRSS: how far this process's peak resident memory rose during a row's warm-up "
                "and timed runs above its resident memory just before (peak reset per row); "
                "models, libraries and heap that earlier rows left resident are not counted")
    return "RSS: process-wide peak since start (getrusage); not per engine"


def set_threads(n: int) -> None:
    import torch  # here, not at the top: a CTranslate2 row's process never imports torch

    torch.set_num_threads(n)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # only settable before the first parallel region
        pass


def optional(module: str):
    """Import a peer library, or None (its rows are then skipped with a message)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


def load_average() -> float:
    """The 1-minute load average."""
    return os.getloadavg()[0]


def load_warning(when: str, load: float, limit: float = QUIET_LOAD) -> str | None:
    """A WARNING line when the machine was busy (``load > limit``), else None."""
    if load <= limit:
        return None
    return (f"WARNING: 1-minute load average {load:.2f} {when} the run is above {limit:g}: "
            "other work shared the CPUs, so these figures are not results")


def busy_cpu_seconds() -> float | None:
    """CPU seconds every process on the machine has used since boot (``/proc/stat``)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields[:7])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """CPU seconds this process (and its finished children) used."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


class OtherWork:
    """Cores that *other* processes kept busy between ``start()`` and ``cores()``: the
    after-run load average counts the benchmark's own threads, this does not. The readers
    are parameters so that a test can make its own process the only variable."""

    def __init__(self, busy: Callable[[], float | None] = busy_cpu_seconds,
                 own: Callable[[], float] = own_cpu_seconds,
                 clock: Callable[[], float] = time.perf_counter):
        self.busy, self.own, self.clock = busy, own, clock

    def start(self) -> None:
        self.t0, self.busy0, self.own0 = self.clock(), self.busy(), self.own()

    def cores(self) -> float | None:
        busy = self.busy()
        if busy is None or self.busy0 is None:
            return None
        other = (busy - self.busy0) - (self.own() - self.own0)
        return max(other, 0.0) / max(self.clock() - self.t0, 1e-9)


def cpu_model() -> dict:
    """``lscpu``'s model name and the flags that decide kernels here (AVX-512, bf16, AMX)."""
    wanted = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_tile")
    return {"model": machine.cpu_model(), "flags": [f for f in wanted if f in machine.cpu_flags()]}


def cpu_label(cpu: dict) -> str:
    """:func:`cpu_model`'s result in words: the model name and its flags of note."""
    return f"{cpu['model']} (flags: {' '.join(cpu['flags']) or 'none of note'})"


def other_work_warning(cores: float | None, limit: float = QUIET_LOAD) -> str | None:
    if cores is None or cores <= limit:
        return None
    return (f"WARNING: other processes kept {cores:.2f} cores busy during the run (more than "
            f"{limit:g}): these figures are not results")


def check_load(when: str, log: Callable[[str], None] = print) -> float:
    """Print the 1-minute load average ``when`` ("before"/"after") the run, and a WARNING
    line if the machine is busy; return it (for the JSON)."""
    load = load_average()
    note = " (includes this run's own threads)" if when == "after" else ""
    log(f"load average (1 min) {when} the run: {load:.2f}{note}")
    warning = load_warning(when, load) if when == "before" else None
    if warning:
        log(warning)
    return load
