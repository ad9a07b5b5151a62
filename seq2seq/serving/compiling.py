"""Compiling while serving: the packages of a model's compiled step and encoder made beside
its calls, which decode eagerly until each package is ready and then use it. A server so
answers at once after start, and the compiler's minute or two (once per machine, model and
beam width; cached) is paid beside the requests, not inside one.

The packages are made in a child process at the lowest CPU priority (:func:`main`: the
same code as ``--compile``): exporting a model patches ``torch.nn.Module.__call__`` for every module of
the process while it traces, so a request decoding in another thread would run through the
tracer. This process only loads each finished package and checks it against the eager step
of a copy of the model (the model itself stays the requests').
"""

from __future__ import annotations

import argparse
import atexit
import copy
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

from seq2seq.decoding import compiled_greedy
from seq2seq.fields import FieldWarning
from seq2seq.model.inference import compiled
from seq2seq.translation.translator import Translator

LOW_PRIORITY = 19  # the child's nice value: the requests' threads come first


class BackgroundCompile:
    """Makes ``model``'s packages (the groups asked for at start, then any a call finds
    missing, e.g. another beam width), one child process at a time, from one daemon thread."""

    def __init__(self, model, checkpoint: str | os.PathLike, groups: tuple[int, ...] = (1,)):
        self.step = model.inference.compiled_step
        self.encoder = model.inference.compiled_encoder
        self.greedy = model.inference.compiled_greedy  # made with group 1's child
        self.beam = model.inference.compiled_beam  # made with each beam width's child
        self.source = model.inference.compiled_source  # made with the first group's child
        assert self.step is not None, "compiled.enable(model) first"
        self.checkpoint = str(checkpoint)
        self.twin = copy.deepcopy(model)  # the packages are checked on it; taken before any call
        features = self.twin.inference
        features.compiled_step = features.compiled_encoder = features.compiled_greedy = None
        features.compiled_source = features.compiled_beam = None
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._asked: set[int] = set()
        self._lock = threading.Lock()
        self._pending = 0  # groups asked for and not yet done
        self._idle = threading.Event()
        self.child: subprocess.Popen | None = None  # the latest child process
        self.step.build = self.ask
        for part in (self.encoder, self.source):
            if part is not None:
                part.build = lambda: None  # made with the first group's child
        for group in groups:
            self.ask(group)
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="seq2seq-compile", daemon=True)
        self._thread.start()
        atexit.register(self.stop)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the child (its half-written package removed) and this object's thread, which
        must not be inside torch while the interpreter shuts down (a native abort)."""
        self._stopping = True
        if self.child is not None and self.child.poll() is None:
            self.child.terminate()
        self._jobs.put(None)
        self._thread.join(timeout)

    def ask(self, group: int) -> None:
        """Queue the step's package for ``group`` rows per sentence, unless asked before."""
        with self._lock:
            if group in self._asked or self.step.failed:
                return
            self._asked.add(group)
            self._pending += 1
            self._idle.clear()
        self._jobs.put(group)

    @property
    def state(self) -> str:
        """``building`` (decoding eagerly meanwhile), ``ready`` (every package asked for is
        in use) or ``failed`` (decoding eagerly, said once)."""
        if self.step.failed:
            return "failed"
        return "ready" if self._idle.is_set() else "building"

    def wait(self, timeout: float | None = None) -> bool:
        """Whether every package asked for so far is done (made or failed) within ``timeout`` s."""
        return self._idle.wait(timeout)

    def _run(self) -> None:
        while True:
            group = self._jobs.get()
            if group is None or self._stopping:
                return
            if not self.step.failed:  # one failure is said once: eager from then on
                self._make(group)
            with self._lock:
                self._pending -= 1
                if self._pending == 0:
                    self._idle.set()

    def _make(self, group: int) -> None:
        step, greedy = self.step, self.greedy
        parts, loads = step.parts(group), [lambda: step.prepare(self.twin, group)]
        for part in (self.encoder, self.source):
            if part is not None and part.loader is None and not part.failed:
                parts.append((part.path(), part.made_for()))
                loads.append(lambda part=part: part.prepare(self.twin))
        if group == 1 and greedy is not None and greedy.loader is None and not greedy.failed:
            parts.append((greedy.path(), greedy.made_for()))
            loads.append(lambda: greedy.prepare(self.twin))
        beam = self.beam
        if group > 1 and beam is not None and group not in beam.loaders and not beam.failed:
            parts.append((beam.path(group), beam.made_for(group)))
            loads.append(lambda: beam.prepare(self.twin, group))
        if not all(_usable(path, made_for) for path, made_for in parts):
            # its notes reach our stderr through a pipe of ours, not our own stderr: a child
            # still compiling must not hold a supervisor's pipe open after we exit
            self.child = subprocess.Popen(child_command(self.checkpoint, group),
                                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True)
            for line in self.child.stdout:
                sys.stderr.write(line)
            code = self.child.wait()
            if self._stopping:
                return
            missing = [path.name for path, made_for in parts if not _usable(path, made_for)]
            if missing:  # never compiled here: loading a package is all this process does
                step.failed = True
                warnings.warn(FieldWarning("{compile}: compiling in the background failed (exit "
                                           "status {code}, no {missing}); decoding eagerly",
                                           code=code, missing=", ".join(missing)), stacklevel=1)
                return
        for load in loads:
            load()  # loaded and checked against the twin's eager step (a failure: one note)


def child_command(checkpoint: str, group: int) -> list[str]:
    """The child process that makes ``checkpoint``'s packages for ``group`` (and its encoder's)."""
    # -c, not -m: the package imports this module first, and runpy warns of running it again
    return [sys.executable, "-c", f"import sys; from {__name__} import main; main(sys.argv[1:])",
            checkpoint, str(group), "--nice", str(LOW_PRIORITY)]


def _usable(path: Path, made_for: dict) -> bool:
    return path.exists() and compiled.stale(path, made_for) is None


def enable(model, checkpoint: str | os.PathLike,
           groups: tuple[int, ...] = (1,)) -> BackgroundCompile | None:
    """Compile ``model``'s step (for each of ``groups``, then any asked for) and encoder in
    the background; None, with compiled.enable's note, without a C++ compiler."""
    if model.inference.compiled_step is None and not compiled_greedy.enable(model):
        return None
    return BackgroundCompile(model, checkpoint, groups)


def _exit_with_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    os.kill(os.getpid(), signal.SIGTERM)


def main(argv: list[str] | None = None) -> None:
    """The child: the packages of CKPT's step for each GROUP, and its encoder's, made in the
    cache as ``--compile`` makes them; ends with its parent (its half-written file removed)."""
    ap = argparse.ArgumentParser(prog="python -m seq2seq.serving.compiling")
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("groups", type=int, nargs="+")
    ap.add_argument("--nice", type=int, default=LOW_PRIORITY, help="this process's nice value")
    args = ap.parse_args(argv)
    os.nice(max(0, args.nice - os.nice(0)))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # unwinds: the temporary file goes
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()
    model = Translator.from_checkpoint(args.checkpoint, compile=True).model
    for group in args.groups:
        model.inference.compiled_step.prepare(model, group)
        if group == 1 and model.inference.compiled_greedy is not None:
            model.inference.compiled_greedy.prepare(model)
        if group > 1 and model.inference.compiled_beam is not None:
            model.inference.compiled_beam.prepare(model, group)
    for part in (model.inference.compiled_encoder, model.inference.compiled_source):
        if part is not None:
            part.prepare(model)
