"""Document work on a live server (``seq2seq-serve`` in a child process on loopback): a
megabyte of each hostile shape is read and written in a child process while ``/health``
answers within a second; a document past the time limit gets the limit's 503 and its
worker is killed; SIGTERM lets the answer in flight finish and removes the store of
translated files."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[serve]'")
pytest.importorskip("docx", reason="needs the documents extra")
import httpx  # noqa: E402
from helpers import SHAPES, megabyte  # noqa: E402

from scripts.bench.load import server_child  # noqa: E402
from seq2seq.serving.offload import document_sentences  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DE_EN = ROOT / "data" / "models" / "multi30k_de_en_tiny.ckpt"
BIG = ["--max-body-bytes", str(4 * 2**20)]
HEALTH_S = 1.0  # the bound every /health answer must meet while documents are worked on


def upload(url: str, name: str, data: bytes, timeout: float = 120) -> httpx.Response:
    return httpx.post(url + "/libretranslate/translate_file", data={"source": "de", "target": "en"},
                      files={"file": (name, data)}, timeout=timeout)


class HealthWatch:
    """``/health`` asked over and over in a thread while the block runs: the slowest answer,
    and how many answers said a document worker was running."""

    def __init__(self, url: str):
        self.url, self.slowest, self.during, self.asked = url, 0.0, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.is_set():
            start = time.monotonic()
            got = httpx.get(self.url + "/health", timeout=30).json()
            self.slowest = max(self.slowest, time.monotonic() - start)
            self.asked += 1
            self.during += got["documents"]["running"] > 0
            time.sleep(0.02)

    def __enter__(self) -> HealthWatch:
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join(60)


def documents(url: str) -> dict:
    return httpx.get(url + "/health", timeout=30).json()["documents"]


@pytest.fixture(scope="module")
def live():
    with server_child(DE_EN, args=BIG) as (url, _):
        yield url


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_megabyte_of_each_hostile_shape_ends_in_seconds_while_health_answers(live, shape):
    name, make = SHAPES[shape]
    data = make(megabyte(shape)).encode()
    start = time.monotonic()
    with HealthWatch(live) as watch:
        got = upload(live, name, data)
    took = time.monotonic() - start
    # translated, or refused for a text over the server's limits: either way, in seconds
    # (a few on a quiet machine; the bound leaves room for a busy one)
    assert got.status_code in (200, 400), got.text
    assert took < 120, f"{shape}: {took:.1f} s"
    assert watch.slowest < HEALTH_S, f"{shape}: /health took {watch.slowest:.2f} s"
    assert watch.during > 0  # answered while a worker ran, not only before and after


def test_a_document_past_the_time_limit_gets_503_and_its_worker_is_killed():
    limit = 0.5
    name, make = SHAPES["html nested"]
    n = megabyte("html nested")
    start = time.monotonic()
    document_sentences(make(n).encode(), name, "de")
    alone = time.monotonic() - start
    while alone < 4 * limit:  # reading alone must outlast the limit several times over
        n, alone = 2 * n, 2 * alone
    data = make(n).encode()
    with server_child(DE_EN, args=[*BIG, "--max-body-bytes", str(len(data) + 4096),
                                   "--request-timeout-s", str(limit)]) as (url, _):
        start = time.monotonic()
        got = upload(url, name, data)
        assert got.status_code == 503 and f"limit of {limit:g} s" in got.json()["error"], got.text
        while documents(url)["running"] and time.monotonic() - start < alone:
            time.sleep(0.05)
        # reaped (running counts a child until it is joined) before its work could have ended
        assert documents(url) == {"running": 0, "started": 1, "stopped": 1}
        assert time.monotonic() - start < alone


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux)."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        found += [int(entry)] * (ppid == pid)
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigterm_finishes_the_answer_in_flight_and_removes_the_store(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    name, make = SHAPES["html nested"]
    with server_child(DE_EN, args=BIG, env=env, stderr=subprocess.PIPE) as (url, child):
        first = upload(url, "brief.txt", "Ein Hund läuft.".encode())
        assert first.status_code == 200, first.text
        store, = tmp_path.glob("seq2seq-files-*")
        assert len(list(store.iterdir())) == 1
        helpers = _children(child.pid)  # the fork server and its resource tracker
        assert helpers
        in_flight: list[httpx.Response] = []
        sender = threading.Thread(target=lambda: in_flight.append(
            upload(url, name, make(megabyte("html nested") // 4).encode())))
        sender.start()
        while not documents(url)["running"]:
            time.sleep(0.02)
        child.send_signal(signal.SIGTERM)
        sender.join(120)
        _, err = child.communicate(timeout=60)
    assert child.returncode == -signal.SIGTERM  # SIGTERM's own exit, after the shutdown
    assert b"Traceback" not in err, err.decode()[-2000:]
    assert in_flight and in_flight[0].status_code in (200, 503), in_flight  # finished or refused
    assert not store.exists()
    until = time.monotonic() + 30  # they exit once they read the end of their pipes
    while [p for p in helpers if os.path.exists(f"/proc/{p}")] and time.monotonic() < until:
        time.sleep(0.1)
    assert not [p for p in helpers if os.path.exists(f"/proc/{p}")]
