"""Admission control: under overload a request is either answered in time or refused at once
(503 with ``Retry-After``), never left to run out its time with everyone else.

The batcher's decisions are tested with a fake translator whose throughput is known (it
sleeps in proportion to the work), the whole path with the shipped model on loopback: a
burst of requests worth three time limits, where fair turns without admission made every
one of them time out."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seq2seq.serving.batcher import ADMIT_SHARE, MicroBatcher, Overloaded

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "data" / "models" / "multi30k_de_en_tiny.ckpt"


def sleeper(rate: float, gate: threading.Event | None = None):
    """A Work that takes ``cost / rate`` seconds per text (the texts are their costs)."""
    def work(texts: list[str]) -> list[str]:
        if gate is not None:
            gate.wait(30)
        time.sleep(sum(int(t) for t in texts) / rate)
        return texts
    return work


async def burst(batcher: MicroBatcher, sizes: list[list[int]], work) -> list[asyncio.Task]:
    """Submit one request per entry of ``sizes`` (the costs of its texts), all at once."""
    tasks = [asyncio.create_task(batcher.submit("k", [str(c) for c in costs], costs, work))
             for costs in sizes]
    await asyncio.sleep(0)  # every submit has run up to its first wait
    return tasks


def test_admits_what_fits_and_refuses_the_rest_at_once():
    """Throughput 100/s, 10 s: 800 units fit; the third request of 300 does not, and learns
    when the work before it will be done (600 units: 6 s)."""
    async def main():
        gate = threading.Event()  # holds the first call: nothing is measured meanwhile
        batcher = MicroBatcher(0.0, max_cost=100, timeout_s=10.0, rate=100.0)
        await batcher.start()
        tasks = await burst(batcher, [[100] * 3] * 3 + [[50]], sleeper(1e6, gate))
        refused = tasks[2]
        assert refused.done() and isinstance(refused.exception(), Overloaded)
        assert refused.exception().retry_after_s == 6 and batcher.refused == 1
        assert not tasks[3].done()  # a small one still fits: it waits at most a piece per turn
        gate.set()
        await asyncio.gather(tasks[0], tasks[1], tasks[3])
        await batcher.stop()
    asyncio.run(main())


def test_a_request_alone_is_admitted_even_if_it_cannot_finish():
    async def main():
        batcher = MicroBatcher(0.0, max_cost=100, timeout_s=1.0, rate=100.0)
        await batcher.start()
        (task,) = await burst(batcher, [[100] * 3], sleeper(1e6))
        assert await task == ["100"] * 3  # its time limit is the server's business
        await batcher.stop()
    asyncio.run(main())


def test_the_queue_is_bounded():
    async def main():
        gate = threading.Event()
        batcher = MicroBatcher(0.0, max_cost=100, max_queue=2)
        await batcher.start()
        tasks = await burst(batcher, [[1]] * 3, sleeper(1e6, gate))
        assert isinstance(tasks[2].exception(), Overloaded)
        assert "2 requests in progress" in str(tasks[2].exception())
        gate.set()
        await asyncio.gather(*tasks[:2])
        await batcher.stop()
    asyncio.run(main())


def test_provisional_admissions_are_checked_once_throughput_is_known():
    """No estimate yet: all are admitted; the first call measures ~1,000/s, and the later
    requests that cannot end within 1 s with the earlier ones are refused then."""
    async def main():
        batcher = MicroBatcher(0.0, max_cost=200, timeout_s=1.0)
        await batcher.start()
        tasks = await burst(batcher, [[200] * 2] * 6, sleeper(1000.0))
        assert not any(t.done() for t in tasks)
        done = await asyncio.gather(*tasks, return_exceptions=True)
        assert done[0] == ["200"] * 2
        refused = [d for d in done if isinstance(d, Overloaded)]
        assert len(refused) >= 3  # 6 x 400 units at 1,000/s: at most 2 fit in 1 s
        await batcher.stop()
    asyncio.run(main())


@settings(max_examples=8, deadline=None)
@given(st.lists(st.lists(st.integers(5, 60), min_size=1, max_size=4), min_size=2, max_size=9))
def test_admitted_requests_end_in_time_refused_ones_at_once(sizes):
    """A fake translator of steady throughput, a burst of requests: each ends in one of two
    ways, answered within its time or refused before any work; the first always runs."""
    timeout_s, rate = 0.6, 1000.0

    async def main():
        batcher = MicroBatcher(0.0, max_cost=60, timeout_s=timeout_s, rate=rate)
        await batcher.start()
        start = time.monotonic()
        tasks = await burst(batcher, sizes, sleeper(rate))
        refused = [t for t in tasks if t.done()]
        assert all(isinstance(t.exception(), Overloaded) for t in refused)
        assert tasks[0] not in refused
        admitted = [t for t in tasks if t not in refused]
        admitted_work = sum(sum(s) for s, t in zip(sizes, tasks) if t in admitted)
        assert len(admitted) == 1 or admitted_work <= ADMIT_SHARE * timeout_s * rate
        for task in admitted:  # sleeps only overshoot: the late margin is ADMIT_SHARE's
            await asyncio.wait_for(task, timeout_s - (time.monotonic() - start) + 0.1)
        await batcher.stop()
    asyncio.run(main())


# ---------------------------------------------------------------- the server, on loopback
def test_under_overload_requests_are_answered_or_refused_at_once():
    """Twelve parallel requests worth three time limits: the first is answered, many are
    refused at once with Retry-After, and (throughput being steady enough) fewer than half
    run out their time (without admission every one did: fair turns, nobody finishes)."""
    pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[serve]'")
    import httpx

    from seq2seq.config import ServeConfig
    from seq2seq.serving import create_app, load_models, running

    models = load_models([str(SHIPPED)])
    # Every text runs to its length limit, so the estimate of its work is its work. The limit
    # grows until one request takes 0.75 s alone: on a fast CPU twelve short requests fit in
    # the 3 s floor of the time limit and nothing would be refused.
    body = {"texts": ["Ein Hund rennt durch den Schnee."] * 16, "max_len_b": 30,
            "min_len": 1_000_000}
    with running(create_app(models, ServeConfig(request_timeout_s=60.0))) as url:
        while True:
            for _ in range(2):  # the second is warm: how long one request takes alone
                start = time.monotonic()
                assert httpx.post(url + "/translate", json=body, timeout=120).status_code == 200
                alone = time.monotonic() - start
            if alone >= 0.75 or body["max_len_b"] >= 480:
                break
            body["max_len_b"] *= 2
    timeout_s = min(max(4 * alone, 3.0), 60.0)
    app = create_app(models, ServeConfig(request_timeout_s=timeout_s))
    outcomes: list[tuple[int, float, str | None]] = []

    ready = threading.Barrier(12)

    def client() -> None:
        with httpx.Client(timeout=2 * timeout_s + 60) as http:  # its set-up is not timed
            ready.wait()
            start = time.monotonic()
            got = http.post(url + "/translate", json=body)
            outcomes.append((got.status_code, time.monotonic() - start,
                             got.headers.get("retry-after")))

    with running(app) as url:
        assert httpx.post(url + "/translate", json=body, timeout=120).status_code == 200  # measured
        threads = [threading.Thread(target=client) for _ in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(outcomes) == 12 and {s for s, _, _ in outcomes} <= {200, 503}
    refused = [(t, after) for s, t, after in outcomes if s == 503 and after is not None]
    timed_out = [t for s, t, after in outcomes if s == 503 and after is None]
    assert any(s == 200 for s, _, _ in outcomes) and refused
    assert all(t < timeout_s / 2 and int(after) >= 1 for t, after in refused), (timeout_s, outcomes)
    assert len(timed_out) < 6, (timeout_s, outcomes)


# ---------------------------------------------------------------- answers nobody reads
def read_answer(sock) -> tuple[int, dict[str, str]]:
    """The status and headers of the next answer on ``sock`` (its body read and dropped)."""
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(1)
        assert chunk, "the server closed the connection"
        head += chunk
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:] if ": " in line)
    left = int(headers["content-length"])
    while left:
        left -= len(sock.recv(min(left, 1 << 16)))
    return int(lines[0].split()[1]), headers


def test_answers_nobody_reads_stay_within_the_servers_budget():
    """Eight clients pipeline three /attention requests each and read nothing: the answers
    made but not sent (reserved while being made, then what the sockets did not take) never
    pass the budget; what does not fit gets 503 with Retry-After; all of it is given back
    once the clients read or leave."""
    pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[serve]'")
    import json
    import socket

    from seq2seq.config import ServeConfig
    from seq2seq.serving import create_app, load_models, running
    from seq2seq.serving.server import bind

    text = ("Ein Mann fährt mit dem Fahrrad eine Straße entlang, während es regnet und die "
            "Kinder im Park spielen.")
    limit = 4_000_000  # about four of these answers as estimated (each ~300 KB in fact)
    app = create_app(load_models([str(SHIPPED)]),
                     ServeConfig(max_response_bytes=2_000_000, max_unsent_bytes=limit))
    listener = bind("127.0.0.1", 0)  # small socket buffers: the process holds what is unread
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 32_768)
    body = json.dumps({"text": text}).encode()
    request = (b"POST /attention HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\n\r\n" % len(body)) + body
    with running(app, sock=listener) as url:
        answers = app.state.answers
        host, port = url.removeprefix("http://").split(":")
        clients = []
        for _ in range(8):
            client = socket.socket()
            client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            client.connect((host, int(port)))
            client.sendall(request * 3)
            clients.append(client)
        last, still = None, 0
        while still < 8:  # until the work is done: the counts stop changing
            time.sleep(0.25)
            now = (answers.held, answers.peak, answers.refused)
            still, last = (still + 1 if now == last else 0), now
        unread = answers.held  # held now only by connections whose client does not read
        assert 0 < unread <= limit and answers.peak <= limit and answers.refused > 0
        statuses = []
        for client in clients:
            client.settimeout(30)
            for _ in range(3):
                status, headers = read_answer(client)
                statuses.append(status)
                assert status == 200 or (status == 503 and int(headers["retry-after"]) >= 1)
            client.close()
        assert 200 in statuses and 503 in statuses and answers.peak <= limit
        deadline = time.monotonic() + 30
        while answers.held and time.monotonic() < deadline:
            time.sleep(0.1)
        assert answers.held == 0


def test_a_refusal_is_a_503_with_retry_after_in_each_apis_shape():
    """Both APIs answer the batcher's refusal (here: the queue is full) with 503, the
    ``Retry-After`` header and their own error shape."""
    pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[serve]'")
    from types import SimpleNamespace

    from fastapi.testclient import TestClient

    from seq2seq.config import ServeConfig
    from seq2seq.serving import create_app, load_models

    app = create_app(load_models([str(SHIPPED)]), ServeConfig(max_queue=1))
    busy = SimpleNamespace(future=SimpleNamespace(done=lambda: False), remaining=lambda: 100)
    with TestClient(app) as client:
        app.state.server.batcher._jobs.append(busy)  # one request in progress: the queue's bound
        for path, body, field in (
            ("/translate", {"texts": ["Ein Hund."]}, "detail"),
            ("/libretranslate/translate", {"q": "Ein Hund.", "source": "de", "target": "en"}, "error"),
        ):
            got = client.post(path, json=body)
            assert got.status_code == 503 and int(got.headers["retry-after"]) >= 1, got.text
            assert "1 requests in progress" in got.json()[field]


def test_a_full_answer_budget_is_a_503_with_retry_after_in_each_api():
    pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[serve]'")
    import httpx

    from seq2seq.config import ServeConfig
    from seq2seq.serving import create_app, load_models, running

    app = create_app(load_models([str(SHIPPED)]), ServeConfig())
    with running(app) as url:
        answers = app.state.answers
        answers.take(answers.limit, force=True)  # as if unread answers filled it
        for path, body, field in (
            ("/translate", {"texts": ["Ein Hund."]}, "detail"),
            ("/attention", {"text": "Ein Hund."}, "detail"),
            ("/libretranslate/translate", {"q": "Ein Hund.", "source": "de", "target": "en"}, "error"),
        ):
            got = httpx.post(url + path, json=body, timeout=60)
            assert got.status_code == 503 and got.headers.get("retry-after") == "1", (path, got.text)
            assert "clients have not read yet" in got.json()[field]
        answers.give(answers.limit)
        assert httpx.post(url + "/translate", json={"texts": ["Ein Hund."]}, timeout=60).status_code == 200
        # the server gives the answer's bytes back once its socket took them, which may come
        # a moment after the client has read them
        deadline = time.monotonic() + 10
        while answers.held and time.monotonic() < deadline:
            time.sleep(0.01)
        assert answers.held == 0
