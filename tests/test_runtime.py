"""Threads on a shared machine (seq2seq.runtime): the count follows the cores other work
leaves free, the user's setting wins, and it follows the machine while a job runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from seq2seq import runtime

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("cores", "others", "threads"), [
    (2, None, 2), (2, 0.0, 2), (2, 0.4, 2), (2, 0.6, 1), (2, 1.0, 1), (2, 2.0, 1), (2, 5.0, 1),
    (8, 2.2, 6), (8, 2.6, 5), (1, 0.0, 1)])
def test_one_thread_per_core_other_work_leaves_free(cores, others, threads):
    assert runtime.threads_for(cores, others) == threads


def test_the_environment_fixes_the_count(monkeypatch):
    monkeypatch.setenv("SEQ2SEQ_THREADS", "3")
    choice = runtime.choose_threads(sample_seconds=0.0)
    assert (choice.threads, choice.fixed) == (3, True)
    assert "as set by the environment" in choice.describe()
    monkeypatch.delenv("SEQ2SEQ_THREADS")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert runtime.choose_threads(sample_seconds=0.0).threads == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "junk")  # not a count: ignored
    choice = runtime.choose_threads(sample_seconds=0.0)
    assert not choice.fixed and 1 <= choice.threads <= runtime.usable_cores()


class FakeMeter:
    def __init__(self, readings):
        self.readings, self.t = list(readings), -1e9  # always due

    def read(self):
        return self.readings.pop(0)


def test_the_governor_follows_the_machine_and_yields_to_other_setters():
    threads = {"n": 2}
    choice = runtime.ThreadChoice(2, 2, 0.0, False)
    gov = runtime.ThreadGovernor(choice, lambda: threads["n"],
                                 lambda n: threads.update(n=n), meter=FakeMeter([1.0, 1.2, 0.1]))
    gov.tick()
    assert threads["n"] == 1  # a core got busy: one thread
    gov.tick()
    assert threads["n"] == 1 and gov.changes == 1
    gov.tick()
    assert threads["n"] == 2 and gov.changes == 2  # free again
    threads["n"] = 1  # someone else (e.g. Lightning's DDP) set it: never touched again
    gov.meter = FakeMeter([0.0])
    gov.tick()
    assert gov.fixed and threads["n"] == 1


def test_the_governor_never_changes_a_fixed_count():
    calls = []
    gov = runtime.ThreadGovernor(runtime.ThreadChoice(4, 2, None, True), lambda: 4, calls.append,
                                 meter=FakeMeter([2.0]))
    gov.tick()
    assert calls == []


def test_the_busy_meter_counts_a_busy_child_not_us():
    """A known child's CPU is other work; more work elsewhere only raises the figure."""
    meter = runtime.BusyMeter()
    subprocess.run([sys.executable, "-c", "import time\nt=time.process_time()\n"
                    "while time.process_time()-t<0.5: pass"], check=True)
    import resource
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = meter.t
    cores = meter.read()
    assert cores * (meter.t - t0) >= 0.8 * min(kids.ru_utime + kids.ru_stime, 0.5)


def test_start_applies_the_choice_and_says_why_once(monkeypatch):
    import io

    import torch

    before = torch.get_num_threads()
    monkeypatch.setattr(runtime, "_GOVERNOR", None)
    monkeypatch.setattr(runtime, "choose_threads",
                        lambda **_: runtime.ThreadChoice(1, 2, 1.3, False))
    log = io.StringIO()
    try:
        assert runtime.start(log=log).threads == 1 and torch.get_num_threads() == 1
        assert log.getvalue() == ("seq2seq: 1 thread(s) (2 usable core(s), 1.3 busy with other "
                                  "work; set SEQ2SEQ_THREADS=N to fix the count)\n")
        runtime.start(log=log)  # once per process
        assert log.getvalue().count("\n") == 1
    finally:
        torch.set_num_threads(before)
        monkeypatch.setattr(runtime, "_GOVERNOR", None)


def test_a_look_started_earlier_waits_only_for_the_rest(monkeypatch):
    """``start`` begins its look at the machine before torch's import, so the import's
    second is the sample: no extra wait after it."""
    monkeypatch.delenv("SEQ2SEQ_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    slept = []
    monkeypatch.setattr(runtime.time, "sleep", slept.append)
    meter = runtime.BusyMeter()
    meter.t -= 1.0  # started a second ago (as before `import torch`)
    runtime.choose_threads(sample_seconds=0.1, meter=meter)
    runtime.choose_threads(sample_seconds=0.1)  # no earlier look: the whole sample
    assert slept[0] == 0.0 and slept[1] == pytest.approx(0.1, abs=0.01)


def test_one_reader_of_the_cpu_serves_compute_types_compiled_packages_and_the_benchmark():
    from pathlib import Path

    import seq2seq.model.inference.compiled as compiled
    from scripts.bench.timing import cpu_model
    from seq2seq import machine

    info = Path("/proc/cpuinfo")
    if not info.exists():
        pytest.skip("no /proc/cpuinfo")
    lines = info.read_text().splitlines()
    flags = next((ln.split(":", 1)[1].split() for ln in lines if ln.startswith(("flags", "Features"))), [])
    assert machine.cpu_flags() == frozenset(flags)
    assert compiled.cpu_isa().split()[1:] == [f for f in compiled.ISA if f in flags]
    assert set(cpu_model()["flags"]) <= set(flags) and cpu_model()["model"] == machine.cpu_model()


@pytest.mark.parametrize("env, home", [({"SEQ2SEQ_CACHE_DIR": "/x/c"}, "/x/c"),
                                       ({"XDG_CACHE_HOME": "/x/xdg"}, "/x/xdg/seq2seq"),
                                       ({}, "~/.cache/seq2seq")])
def test_one_cache_home_for_data_and_compiled_steps(monkeypatch, env, home):
    from pathlib import Path

    import seq2seq.model.inference.compiled as compiled
    from seq2seq import machine
    from seq2seq.config import DataConfig
    from seq2seq.data.cache import cache_root

    for name in ("SEQ2SEQ_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert machine.cache_home() == Path(home).expanduser() == cache_root(DataConfig())
    assert compiled.cache_dir() == machine.cache_home() / "compiled"
