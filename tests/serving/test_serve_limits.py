"""The server stays up under the hostile requests that once took it down, each tested with
the attack that found it, against a real ``seq2seq-serve`` child process on loopback: a
chunked body far over the limit, a lying Content-Length, a stalled body, half-sent
headers on more connections than the cap, a small request asking for a huge answer or
huge work, a slow request past the time limit, a client that hangs up, junk bodies. Each
ends in a one-line error or bounded work; the server answers ``/health`` afterwards with
its memory near where it started; a small request is not stuck behind a big one."""

from __future__ import annotations

import logging
import os
import select
import socket
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[serve]'")
import httpx  # noqa: E402

from scripts.bench.load import server_child  # noqa: E402
from seq2seq.serving.server import RateLimitedLog  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DE_EN = ROOT / "data" / "models" / "multi30k_de_en_tiny.ckpt"
SENTENCES = ["Ein Hund rennt durch den Schnee.", "Zwei Männer spielen Fußball auf einer Wiese.",
             "Eine Frau mit rotem Hut liest ein Buch.", "Ein kleines Mädchen lacht."]
LIMITS = ["--max-body-bytes", "200000", "--body-timeout-s", "1", "--header-timeout-s", "1",
          "--max-connections", "24", "--request-timeout-s", "3", "--call-work", "100000"]
# Allowed, but slow: every text forced to its length limit (one text per model call here).
SLOW = {"texts": SENTENCES * 12, "beam": 16, "max_len_b": 40, "min_len": 1_000_000}


@pytest.fixture(scope="module")
def limited():
    with server_child(DE_EN, args=LIMITS) as (url, child):
        yield url, child


@pytest.fixture(scope="module")
def patient():
    """Small model calls, no short time limit: for the fairness and hang-up tests."""
    with server_child(DE_EN, args=["--call-work", "100000"]) as (url, child):
        yield url, child


def health(url: str) -> dict:
    answer = httpx.get(url + "/health", timeout=30)
    assert answer.status_code == 200
    return answer.json()


def connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def status_of(sock: socket.socket, wait_s: float = 10.0) -> int | None:
    """The status of the answer on ``sock``; None if the server closed it without one."""
    sock.settimeout(wait_s)
    try:
        head = sock.recv(4096)
    except (ConnectionResetError, TimeoutError):
        return None
    return int(head.split()[1]) if head.startswith(b"HTTP/1.1 ") else None


# ---------------------------------------------------------------- bodies
def test_a_chunked_body_over_the_limit_is_refused_while_reading(limited):
    url, _ = limited
    before = health(url)["rss_mb"]
    sock = connect(url)
    sock.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n")
    chunk, sent = b"%x\r\n" % 65536 + b"x" * 65536 + b"\r\n", 0
    sock.settimeout(5)
    while sent < 300 * 2**20 and not select.select([sock], [], [], 0)[0]:
        try:
            sock.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            break  # the server stopped reading: the refusal is on its way or sent
        sent += 65536
    assert status_of(sock) in (413, None)
    sock.close()
    assert sent < 32 * 2**20  # of 300 MB: the rest was never read
    assert health(url)["rss_mb"] < before + 100


def test_a_lying_content_length_is_refused_before_any_body(limited):
    sock = connect(limited[0])
    sock.sendall(b"POST /libretranslate/translate HTTP/1.1\r\nHost: x\r\nContent-Length: "
                 b"1000000000\r\nContent-Type: application/json\r\n\r\n")
    answer = b""
    while chunk := sock.recv(4096):  # the server closes the connection after its answer
        answer += chunk
    sock.close()
    assert answer.startswith(b"HTTP/1.1 413")
    assert answer.endswith(b'{"error":"request body over 200000 bytes"}')


def test_a_stalled_body_gets_408_after_the_body_timeout(limited):
    sock = connect(limited[0])
    sock.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n"
                 b"Content-Type: application/json\r\n\r\n" + b'{"texts": ')
    start = time.monotonic()
    assert status_of(sock, 30) == 408
    assert time.monotonic() - start < 15
    sock.close()


# ---------------------------------------------------------------- connections
def test_half_sent_headers_are_dropped_and_connections_capped(limited):
    url, child = limited
    fds = lambda: len(os.listdir(f"/proc/{child.pid}/fd"))  # noqa: E731
    base = fds()
    socks = [connect(url) for _ in range(40)]  # cap 24
    for s in socks:
        try:
            s.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\n")  # never finished
        except (BrokenPipeError, ConnectionResetError):
            pass
    time.sleep(0.3)
    assert fds() <= base + 24 + 2  # connections past the cap were closed at once
    # the header deadline (1 s) drops every one of them
    assert all(status_of(s, 15) is None for s in socks)
    for s in socks:
        s.close()
    assert health(url)["status"] == "ok"


def test_headers_over_the_size_limit_are_refused(limited):
    sock = connect(limited[0])
    # never finished: h11 buffers at most 16384 bytes of an unfinished request head
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Junk: " + b"a" * 20_000)
    assert status_of(sock) == 400
    sock.close()


def test_repeated_log_messages_are_rate_limited():
    log = logging.getLogger("seq2seq.test.flood")
    log.propagate = False
    kept = []
    handler = logging.Handler()
    handler.emit = kept.append
    log.addHandler(handler)
    log.addFilter(RateLimitedLog(per_minute=5))
    for i in range(1000):
        log.error("socket.accept() out of system resource (%d)", i)
    log.warning("another kind")
    assert len(kept) == 6


# ---------------------------------------------------------------- work and answers
def test_a_small_request_for_a_huge_answer_is_refused_up_front(limited):
    url, _ = limited
    before = health(url)["rss_mb"]
    start = time.monotonic()
    got = httpx.post(url + "/attention", json={"text": "a." * 500, "max_len_a": 1000,
                                               "min_len": 1_000_000}, timeout=60)
    assert got.status_code == 413 and "units of work" in got.json()["detail"]
    assert time.monotonic() - start < 30
    # within the work limit but past the answer's: all layers x heads of long pieces
    got = httpx.post(url + "/attention", json={"text": "a." * 20, "max_len_b": 200}, timeout=60)
    assert got.status_code == 413 and "the answer may be" in got.json()["detail"], got.text
    assert health(url)["rss_mb"] < before + 100


def test_huge_work_is_refused_up_front(limited):
    url, _ = limited
    junk = ["qx zv " * 20] * 64
    for path, body, field in (
        ("/translate", {"texts": junk, "beam": 16, "nbest": 16, "min_len": 1_000_000}, "detail"),
        ("/libretranslate/translate", {"q": junk, "source": "de", "target": "en",
                                       "alternatives": 15}, "error"),
    ):
        got = httpx.post(url + path, json=body, timeout=60)
        assert got.status_code in (400, 413) and "units of work" in got.json()[field], got.text


def test_a_slow_request_gets_503_at_the_time_limit_and_its_work_stops(limited):
    url, _ = limited
    calls = health(url)["model_calls"]
    start = time.monotonic()
    got = httpx.post(url + "/translate", json=SLOW, timeout=60)
    assert got.status_code == 503 and "limit of 3 s" in got.json()["detail"]
    assert 3 <= time.monotonic() - start < 20
    assert httpx.post(url + "/translate", json={"texts": SENTENCES[:1]}, timeout=60).status_code == 200
    assert settled_calls(url) - calls < len(SLOW["texts"])  # the rest of it never ran


def test_hostile_bodies_end_in_one_line_errors_and_memory_comes_back(limited):
    url, _ = limited
    before = health(url)["rss_mb"]
    hostile = [  # (path, raw body, content type)
        ("/translate", b'{"texts": [' + b'"x",' * 100_000 + b'"x"]}', "application/json"),
        ("/translate", b"[" * 50_000 + b"]" * 50_000, "application/json"),
        ("/translate", b'{"texts": 5}', "application/json"),
        ("/translate", b"\xff\xfe\x00junk", "application/json"),
        ("/translate", b'{"texts": ["Hund"]}', None),
        ("/libretranslate/translate", b"[" * 50_000 + b"]" * 50_000, "application/json"),
        ("/libretranslate/translate", b"q=" + b"%FF" * 1000 + b"&source=de&target=en&alternatives=%00",
         "application/x-www-form-urlencoded"),
        ("/libretranslate/detect", b"", None),
    ]
    for path, body, ctype in hostile:
        got = httpx.post(url + path, content=body, timeout=60,
                         headers={"content-type": ctype} if ctype else {})
        assert 400 <= got.status_code < 500, (path, got.text)
        message = got.json()["error" if path.startswith("/libre") else "detail"]
        assert isinstance(message, str) and "\n" not in message and "--" not in message
    untyped = httpx.post(url + "/translate", content=b'{"texts": ["Hund"]}', timeout=60)
    assert "a JSON object is expected (Content-Type: application/json)" in untyped.json()["detail"]
    assert health(url)["rss_mb"] < before + 100


def test_docs_favicon_and_schema_work_offline(limited):
    url, _ = limited
    assert httpx.get(url + "/docs").status_code == 404  # its scripts come from a CDN
    schema = httpx.get(url + "/openapi.json").json()
    assert "/libretranslate/translate" in schema["paths"] and "/translate" in schema["paths"]
    icon = httpx.get(url + "/favicon.ico")
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")


# ---------------------------------------------------------------- fairness, hang-ups
def send_slow(url: str) -> socket.socket:
    """The slow request on a raw connection (closing it hangs up); returns once it runs."""
    calls = health(url)["model_calls"]
    sock = connect(url)
    body = httpx.Request("POST", url + "/translate", json=SLOW).read()
    sock.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(body) + body)
    while health(url)["model_calls"] == calls:  # its first piece is done
        time.sleep(0.05)
    return sock


def settled_calls(url: str) -> int:
    """Model calls once nothing runs any more (a hung-up request's piece may finish)."""
    while True:
        calls = health(url)["model_calls"]
        time.sleep(1.0)
        if health(url)["model_calls"] == calls:
            return calls


def test_a_small_request_is_not_stuck_behind_a_big_one(patient):
    url, _ = patient
    calls = health(url)["model_calls"]
    big = send_slow(url)
    small = httpx.post(url + "/translate", json={"texts": SENTENCES[:1]}, timeout=600)
    assert small.status_code == 200
    assert not select.select([big], [], [], 0)[0]  # answered while the big one is at work
    assert health(url)["model_calls"] - calls < len(SLOW["texts"])
    big.close()
    assert settled_calls(url) - calls < len(SLOW["texts"])


def test_work_of_a_client_that_hung_up_is_cancelled(patient):
    url, _ = patient
    calls = health(url)["model_calls"]
    send_slow(url).close()  # hangs up after its first piece
    assert httpx.post(url + "/translate", json={"texts": SENTENCES[:1]}, timeout=600).status_code == 200
    done = settled_calls(url) - calls
    assert done < len(SLOW["texts"]) // 2  # most of its pieces never ran
