"""Threads on a shared machine: how many intra-op threads this process can use, re-checked
while it runs.

Why: torch's OpenMP runtime (GNU libgomp) keeps waiting threads spinning for ~300,000
iterations between parallel regions. Two such threads on two cores beside one busy process
spin against it (translation beside one busy core ran at 0.37x of alone, beside two at
0.05x; a training run used 2,403 CPU seconds for 840 seconds of work). One thread never
waits for another, so:

- :func:`choose_threads` takes the cores this process may run on (affinity, cgroup quota)
  minus the cores other processes keep busy right now;
- :class:`ThreadGovernor` re-checks that every few seconds in long jobs (a training run,
  a large file) and moves the thread count with the machine.

``SEQ2SEQ_THREADS=N`` (or ``OMP_NUM_THREADS=N``) fixes the count and turns all of this off.
OpenMP's wait policy is left as torch has it: passive waiting (``OMP_WAIT_POLICY=PASSIVE``)
made quiet decoding 17% (greedy) and 6% (beam 5) slower, and the one thread this module
chooses beside busy cores has nothing to wait for.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ENV_THREADS = "SEQ2SEQ_THREADS"
# A core counts as taken by other work above this busy share (less is background noise).
BUSY_CORE = 0.5
SAMPLE_SECONDS = 0.1  # the start-up look at the machine
RECHECK_SECONDS = 5.0  # the governor's look while a job runs


def usable_cores() -> int:
    """Cores this process may run on: its CPU affinity, capped by a cgroup CPU quota."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    quota = cgroup_quota()
    return max(1, min(cores, int(quota + 0.5)) if quota else cores)


def cgroup_quota() -> float | None:
    """The cgroup CPU quota in cores (v2 ``cpu.max``, v1 ``cfs_quota_us``), None if unlimited."""
    for path, parse in ((Path("/sys/fs/cgroup/cpu.max"), lambda t: t.split()),
                        (Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), None)):
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if parse is not None:
            quota, period = parse(text)
        else:
            quota = text
            period = Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read_text().strip()
        if quota in ("max", "-1"):
            return None
        return int(quota) / int(period)
    return None


def _machine_busy_seconds() -> float | None:
    """CPU seconds all processes have used since boot (``/proc/stat``), None off Linux."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields)
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def _own_seconds() -> float:
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


class BusyMeter:
    """Cores other processes kept busy since the last reading (our own threads excluded)."""

    def __init__(self) -> None:
        self.t, self.busy, self.own = time.monotonic(), _machine_busy_seconds(), _own_seconds()

    def read(self) -> float | None:
        t, busy, own = time.monotonic(), _machine_busy_seconds(), _own_seconds()
        if busy is None or self.busy is None or t <= self.t:
            return None
        cores = max((busy - self.busy) - (own - self.own), 0.0) / (t - self.t)
        self.t, self.busy, self.own = t, busy, own
        return cores


@dataclass(frozen=True)
class ThreadChoice:
    threads: int
    cores: int  # usable cores (affinity, quota)
    others: float | None  # cores other processes kept busy when we looked
    fixed: bool  # set by the user (SEQ2SEQ_THREADS / OMP_NUM_THREADS): never changed

    def describe(self) -> str:
        if self.fixed:
            return f"seq2seq: {self.threads} thread(s), as set by the environment"
        busy = "" if self.others is None else f", {self.others:.1f} busy with other work"
        return (f"seq2seq: {self.threads} thread(s) ({self.cores} usable core(s){busy}; "
                f"set {ENV_THREADS}=N to fix the count)")


def threads_for(cores: int, others: float | None) -> int:
    """One thread per usable core that other work does not hold (at least one)."""
    taken = 0 if others is None else int(others + 1 - BUSY_CORE)  # round half down
    return max(1, cores - taken)


def fixed_threads() -> int | None:
    """The count the user fixed in the environment, if any."""
    for name in (ENV_THREADS, "OMP_NUM_THREADS"):
        value = os.environ.get(name, "").strip()
        if value.isdigit() and int(value) > 0:
            return int(value)
    return None


def choose_threads(sample_seconds: float = SAMPLE_SECONDS,
                   meter: BusyMeter | None = None) -> ThreadChoice:
    """The thread count for this process now (module docstring). ``meter``: one started
    earlier (the look spans what ran since, and waits only for the rest of ``sample_seconds``)."""
    cores = usable_cores()
    if (n := fixed_threads()) is not None:
        return ThreadChoice(n, cores, None, True)
    meter = meter or BusyMeter()
    time.sleep(max(0.0, sample_seconds - (time.monotonic() - meter.t)))
    others = meter.read()
    return ThreadChoice(threads_for(cores, others), cores, others, False)


class ThreadGovernor:
    """Keeps the thread count in step with the machine while a long job runs: :meth:`tick`
    (called between batches) looks again every ``interval`` seconds and costs a clock read
    otherwise."""

    def __init__(self, choice: ThreadChoice, get_threads, set_threads,
                 interval: float = RECHECK_SECONDS, meter: BusyMeter | None = None):
        self.cores, self.threads, self.fixed = choice.cores, choice.threads, choice.fixed
        self.get_threads, self.set_threads = get_threads, set_threads
        self.interval, self.meter, self.changes = interval, meter or BusyMeter(), 0

    def tick(self) -> None:
        if self.fixed or time.monotonic() - self.meter.t < self.interval:
            return
        if self.get_threads() != self.threads:  # someone else set it (e.g. DDP): theirs now
            self.fixed = True
            return
        n = threads_for(self.cores, self.meter.read())
        if n != self.threads:
            self.set_threads(n)
            self.threads, self.changes = n, self.changes + 1


_GOVERNOR: ThreadGovernor | None = None


def start(log=None) -> ThreadChoice:
    """Choose and apply this process's thread count, print it once (to ``log``; by default
    to stderr when that is a terminal, so pipelines and logs stay as they were) when other
    work made it smaller than the usable cores, and let :func:`tick` follow the machine from
    now on. For the command-line tools."""
    global _GOVERNOR
    meter = BusyMeter()  # the look at the machine spans torch's import (~1 s), no extra wait
    import torch

    choice = choose_threads(meter=meter)
    torch.set_num_threads(choice.threads)
    if log is None and sys.stderr is not None and sys.stderr.isatty():
        log = sys.stderr
    if log is not None and _GOVERNOR is None and not choice.fixed and choice.threads < choice.cores:
        print(choice.describe(), file=log)
    _GOVERNOR = ThreadGovernor(choice, torch.get_num_threads, torch.set_num_threads)
    return choice


def tick() -> None:
    """Between batches of a long job: follow the machine (a no-op unless :func:`start` ran)."""
    if _GOVERNOR is not None:
        _GOVERNOR.tick()
