"""Starting ``seq2seq-serve``: a device the machine lacks is one line (exit 2); a Ctrl-C during
uvicorn's set-up, or after it but before uvicorn's own handlers, still stops the server."""

from __future__ import annotations

import signal
import time

import pytest
import torch
from helpers import assert_refused, run_command


def test_serve_device_without_it_is_one_line(work):
    pytest.importorskip("fastapi")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert_refused(run_command("serve", ["-m", str(work / "good.ckpt"), "--port", "0", "--device", "cuda"]),
                   "serve", "--device cuda")


def test_ctrl_c_during_the_server_set_up_waits_for_the_set_up(monkeypatch):
    """A SIGINT while uvicorn reconfigures logging (where a KeyboardInterrupt can land between
    a log handler's acquire and release) is held until the set-up is done; then the server does
    not start, the earlier handler is back and gets the interrupt."""
    pytest.importorskip("uvicorn")
    from seq2seq.serving import server as served
    steps, before = [], signal.getsignal(signal.SIGINT)

    def set_up(app, log_level):
        signal.raise_signal(signal.SIGINT)
        steps.append("set up")

    class Server:
        def __init__(self, config):
            steps.append("server")

        def run(self, sockets):
            steps.append("ran")

    monkeypatch.setattr(served, "uvicorn_config", set_up)
    monkeypatch.setattr(served.uvicorn, "Server", Server)
    with pytest.raises(KeyboardInterrupt):
        served.serve(None, None)
    assert steps == ["set up", "server"] and signal.getsignal(signal.SIGINT) is before


def test_ctrl_c_after_the_set_up_before_uvicorns_handlers_stops_the_server(monkeypatch):
    """A SIGINT after the set-up but before uvicorn installs its own handlers (the window in
    ``Server.run`` before ``capture_signals``) asks the server to stop as uvicorn's handler
    would, and the interrupt reaches the earlier handler after it: before, it was recorded
    while the server served on, and Ctrl-C did nothing."""
    pytest.importorskip("uvicorn")
    from seq2seq.serving import server as served
    steps = []

    class Server:
        def __init__(self, config):
            self.should_exit = False

        def run(self, sockets):
            signal.raise_signal(signal.SIGINT)  # before any handler of uvicorn's
            deadline = time.monotonic() + 2.0
            while not self.should_exit and time.monotonic() < deadline:  # its main loop
                time.sleep(0.01)
            steps.append("stopped" if self.should_exit else "served on")

    monkeypatch.setattr(served, "uvicorn_config", lambda app, log_level: None)
    monkeypatch.setattr(served.uvicorn, "Server", Server)
    with pytest.raises(KeyboardInterrupt):
        served.serve(None, None)
    assert steps == ["stopped"]
