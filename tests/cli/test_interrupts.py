"""The commands where their input is no file, never ends, or is cut off: a FIFO or a device
where a data file is read, a line without end, closed stdin, Ctrl-C while waiting, while
translating and while serving. Each ends in one line on stderr (exit 2) or quietly with
exit status 130 after whole lines, never hanging and never with a traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import ROOT, assert_refused, deadline, run_command

from seq2seq.cli import translate

ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


@pytest.mark.parametrize("kind", ["directory", "FIFO", "device"])
def test_data_files_that_are_no_files_are_named_as_what_they_are(kind, work, tmp_path):
    path = {"directory": tmp_path, "FIFO": tmp_path / "src.fifo", "device": Path("/dev/zero")}[kind]
    if kind == "FIFO":
        os.mkfifo(path)
    argv = ["-m", str(work / "good.ckpt"), "--src-file", str(path), "--ref-file",
            str(work / "ref.en"), "--hyp-dir", str(tmp_path / "h"), "--quiet"]
    with deadline(60):
        line = assert_refused(run_command("evaluate", argv), "evaluate", str(path), kind.lower()
                              if kind != "FIFO" else "named pipe (FIFO)")
    assert "not found" not in line


def test_an_endless_line_is_refused_at_a_bounded_length(work):
    with deadline(60):  # read until MemoryError, once
        assert_refused(run_command("translate", ["-m", str(work / "good.ckpt"), "--input", "/dev/zero"]),
                       "translate", "--input /dev/zero", "line 1", "longer than")
    code, out, err = run_command("translate", ["-m", str(work / "good.ckpt")],
                         b"Ein Hund.\n" + b"x" * (translate.MAX_LINE_BYTES + 1))
    assert code == 2 and out.count("\n") == 1, err  # the line before it was translated
    assert err.strip().splitlines()[-1].startswith("seq2seq-translate: error: stdin: line 2 ")


def _default_sigint() -> None:
    # Ctrl-C reaches a command started from a terminal; a suite started in the background
    # (``cmd &`` without job control) would hand its children an ignored SIGINT.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _cli(command: str, *argv: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", f"seq2seq.cli.{command}", *argv], env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=_default_sigint, **kwargs)


def test_closed_stdin_reads_as_no_input(work):
    proc = subprocess.run(f"{sys.executable} -m seq2seq.cli.translate -m {work / 'good.ckpt'} <&-",
                          shell=True, executable="/bin/bash", env=ENV, capture_output=True,
                          timeout=120)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b"")


def _interrupt(proc: subprocess.Popen, ready) -> tuple[int, bytes, bytes]:
    """SIGINT ``proc`` once ``ready()`` is true; its exit status, stdout and stderr."""
    until = time.monotonic() + 120
    while not ready() and proc.poll() is None and time.monotonic() < until:
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err


def test_ctrl_c_while_waiting_on_a_fifo_exits_130_quietly(work, tmp_path):
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    proc = _cli("translate", "-m", str(work / "good.ckpt"), "--input", str(fifo))
    writer = []

    def waiting() -> bool:  # a FIFO opens for writing (without blocking) once it has a reader
        try:
            writer.append(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:  # ENXIO: no reader yet
            return False
        time.sleep(3)  # past open: the model loads, then the read waits for a line
        return True

    code, out, err = _interrupt(proc, waiting)
    for fd in writer:
        os.close(fd)
    assert (code, out, err) == (130, b"", b"")


def test_ctrl_c_mid_run_exits_130_quietly_with_whole_lines_written(work, tmp_path):
    src = tmp_path / "many.de"
    src.write_text("Ein Hund läuft über die Wiese.\n" * 40 * translate.CHUNK_LINES, encoding="utf-8")
    proc = _cli("translate", "-m", str(work / "good.ckpt"), "--input", str(src))
    first = []  # the first line out: translating is under way
    code, rest, err = _interrupt(proc, lambda: bool(first.append(proc.stdout.readline())) or True)
    written = b"".join(first) + rest
    assert (code, err) == (130, b"")
    assert written.endswith(b"\n") and written.count(b"\n") < 40 * translate.CHUNK_LINES


def test_sigint_to_the_server_exits_130_quietly(work):
    pytest.importorskip("uvicorn")
    proc = _cli("serve", "-m", str(work / "good.ckpt"), "--port", "0", "--log-level", "warning")
    started = []

    def ready() -> bool:
        started.append(proc.stderr.readline())  # "seq2seq-serve: good at http://..."
        return b" at http" in started[-1]

    code, _, err = _interrupt(proc, ready)
    assert code == 130 and b"Traceback" not in err and b"KeyboardInterrupt" not in err, err
