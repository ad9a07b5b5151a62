"""The load test: N concurrent clients x M requests against a server on this machine.

Loopback only (a non-loopback URL is refused), bounded in requests and in time (clients
start no request after ``time_limit_s``; each request times out then too), and it stops by
itself. Reports throughput, p50/p95/p99 latency, errors, and whether every request got its
own correct answer: the translations the offline ``Translator`` gives for the same texts
with the same options (computed first, and timed: the offline batch throughput).
"""

from __future__ import annotations

import asyncio
import gzip
import ipaddress
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from seq2seq.config import ServeConfig
from seq2seq.decoding.translator import Translator
from seq2seq.serving.api import DecodingOptions, decoding_for

MAX_CLIENTS, MAX_REQUESTS = 256, 100_000


@dataclass
class LoadReport:
    url: str
    clients: int
    requests: int  # planned: clients x requests per client
    texts_per_request: int
    options: dict
    answered: int = 0
    errors: int = 0  # transport errors and non-200 answers
    wrong: int = 0  # answered, but not the offline translation of its own texts
    wall_s: float = 0.0
    latencies_ms: list[float] = field(default_factory=list, repr=False)
    offline_sent_per_s: float = 0.0
    model_calls: int | None = None  # the server's merged calls during the test
    first_problems: list[str] = field(default_factory=list)

    def summary(self) -> dict:
        out = {k: v for k, v in asdict(self).items() if k != "latencies_ms"}
        lat = sorted(self.latencies_ms)
        if len(lat) >= 2:
            q = statistics.quantiles(lat, n=100, method="inclusive")
            out.update(p50_ms=q[49], p95_ms=q[94], p99_ms=q[98], max_ms=lat[-1])
        sentences = self.answered * self.texts_per_request
        out["sent_per_s"] = sentences / self.wall_s if self.wall_s else 0.0
        out["requests_per_s"] = self.answered / self.wall_s if self.wall_s else 0.0
        return out

    def lines(self) -> list[str]:
        s = self.summary()
        out = [
            f"load test: {self.clients} clients x {self.requests // self.clients} requests x "
            f"{self.texts_per_request} sentence(s) against {self.url}, options {self.options or 'defaults'}",
            f"answered {self.answered}/{self.requests}: errors {self.errors}, wrong answers {self.wrong}"
            + (" (every answer equals the offline Translator's)" if not self.errors + self.wrong
               and self.answered == self.requests else ""),
            f"throughput {s['sent_per_s']:.1f} sentences/s ({s['requests_per_s']:.1f} requests/s) in "
            f"{self.wall_s:.2f} s; offline batch {self.offline_sent_per_s:.1f} sentences/s "
            f"(served / offline {s['sent_per_s'] / max(self.offline_sent_per_s, 1e-9):.2f})",
        ]
        if "p50_ms" in s:
            out.append(f"latency ms: p50 {s['p50_ms']:.1f}, p95 {s['p95_ms']:.1f}, "
                       f"p99 {s['p99_ms']:.1f}, max {s['max_ms']:.1f}")
        if self.model_calls:
            out.append(f"model calls: {self.model_calls} for {self.answered} requests "
                       f"({self.answered / self.model_calls:.1f} requests per call)")
        return out + [f"problem: {p}" for p in self.first_problems]


def check_loopback(url: str) -> None:
    host = urlsplit(url).hostname
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)} if host else set()
    except OSError:
        addresses = set()
    if not addresses or not all(ipaddress.ip_address(a).is_loopback for a in addresses):
        raise ValueError(f"--url {url}: the load test only targets this machine (127.0.0.1, "
                         "localhost, ::1)")


def read_sentences(path: str | Path, limit: int) -> list[str]:
    """Up to ``limit`` non-blank lines of a text file (``.gz`` too)."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()]
    if not lines:
        raise ValueError(f"{path}: no sentences to send")
    return lines[:limit]


def offline(checkpoint: str | Path, texts: list[str], options: dict) -> tuple[list[str], float]:
    """The reference translations and the offline batch throughput (sentences/s)."""
    decoding = decoding_for(DecodingOptions(**options), ServeConfig())
    translator = Translator.from_checkpoint(checkpoint, decoding=decoding)
    translator.translate(texts[:8])  # warm-up
    start = time.perf_counter()
    hyps = translator.translate(texts)
    return hyps, len(texts) / (time.perf_counter() - start)


@contextmanager
def server_process(checkpoint: str | Path | Sequence[str | Path], window_ms: float | None = None,
                   timeout_s: float = 120.0, args: Sequence[str] = ()) -> Iterator[str]:
    """``seq2seq-serve`` (one ``-m`` per checkpoint, then ``args``) in a child process on a
    free loopback port; yields its URL."""
    with server_child(checkpoint, window_ms, timeout_s, args) as (url, _child):
        yield url


@contextmanager
def server_child(checkpoint: str | Path | Sequence[str | Path], window_ms: float | None = None,
                 timeout_s: float = 120.0, args: Sequence[str] = (),
                 **popen) -> Iterator[tuple[str, subprocess.Popen]]:
    """:func:`server_process`, yielding the child process too."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    checkpoints = [checkpoint] if isinstance(checkpoint, (str, Path)) else list(checkpoint)
    cmd = [sys.executable, "-m", "seq2seq.cli.serve", *(a for c in checkpoints for a in ("-m", str(c))),
           "--port", str(port), "--log-level", "warning", *args]
    cmd += ["--window-ms", str(window_ms)] if window_ms is not None else []
    child = subprocess.Popen(cmd, **popen)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, child, timeout_s)
        yield url, child
    finally:
        child.terminate()
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def _wait_healthy(url: str, child: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise OSError(f"seq2seq-serve exited with status {child.returncode} before answering")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise OSError(f"seq2seq-serve did not answer {url}/health within {timeout_s:.0f} s")


# ---------------------------------------------------------------- the clients
def _problem(report: LoadReport, text: str) -> None:
    if len(report.first_problems) < 5:
        report.first_problems.append(" ".join(text.split())[:300])


async def _client(http: httpx.AsyncClient, report: LoadReport, jobs: list[list[str]],
                  expected: dict[str, str], deadline: float) -> None:
    """One client: its requests one after another, each checked against ``expected``."""
    for texts in jobs:
        if time.monotonic() > deadline:
            return
        start = time.perf_counter()
        try:
            response = await http.post("/translate", json={"texts": texts, **report.options})
        except httpx.HTTPError as e:
            report.errors += 1
            _problem(report, f"{type(e).__name__}: {e}")
            continue
        if response.status_code != 200:
            report.errors += 1
            _problem(report, f"HTTP {response.status_code}: {response.text}")
            continue
        report.answered += 1
        report.latencies_ms.append((time.perf_counter() - start) * 1000.0)
        got = [r["hyp"] for r in response.json()["results"]]
        want = [expected[t] for t in texts]
        if got != want:
            report.wrong += 1
            _problem(report, f"{texts!r}: served {got!r}, offline {want!r}")


async def _model_calls(http: httpx.AsyncClient) -> int | None:
    return (await http.get("/health")).json().get("model_calls")


async def drive(url: str, report: LoadReport, pool: list[str], expected: dict[str, str],
                time_limit_s: float) -> None:
    """Run every client concurrently; fills ``report``."""
    per_client, k = report.requests // report.clients, report.texts_per_request
    jobs = [[[pool[(n * k + t) % len(pool)] for t in range(k)]
             for n in range(i * per_client, (i + 1) * per_client)] for i in range(report.clients)]
    limits = httpx.Limits(max_connections=report.clients)
    async with httpx.AsyncClient(base_url=url, timeout=time_limit_s, limits=limits) as http:
        before = await _model_calls(http)
        deadline = time.monotonic() + time_limit_s
        start = time.perf_counter()
        await asyncio.gather(*(_client(http, report, j, expected, deadline) for j in jobs))
        report.wall_s = time.perf_counter() - start
        after = await _model_calls(http)
    if before is not None and after is not None:
        report.model_calls = after - before


def run_loadtest(checkpoint: str | Path, sentences: str | Path, clients: int, requests: int,
                 texts_per_request: int = 1, options: dict | None = None, url: str | None = None,
                 time_limit_s: float = 120.0, window_ms: float | None = None) -> LoadReport:
    """Translate offline (reference + timing), then load a server: a fresh ``seq2seq-serve``
    child process on loopback, or the one at ``url`` (this machine only; it must serve
    ``checkpoint`` as its default model)."""
    if not 1 <= clients <= MAX_CLIENTS:
        raise ValueError(f"--clients {clients}: must be in [1, {MAX_CLIENTS}]")
    if requests < 1 or texts_per_request < 1 or clients * requests > MAX_REQUESTS:
        raise ValueError(f"--requests {requests} x --clients {clients}: each >= 1, at most "
                         f"{MAX_REQUESTS} requests in all")
    if time_limit_s <= 0:
        raise ValueError(f"--time-limit {time_limit_s}: must be > 0 seconds")
    if url is not None:
        check_loopback(url)
    options = dict(options or {})
    DecodingOptions(**options)  # unknown or mistyped options fail here, not in every request
    pool = read_sentences(sentences, clients * requests * texts_per_request)
    hyps, offline_rate = offline(checkpoint, pool, options)
    report = LoadReport(url or "", clients, clients * requests, texts_per_request, options,
                        offline_sent_per_s=offline_rate)
    serving = _existing(url) if url is not None else server_process(checkpoint, window_ms)
    with serving as report.url:
        asyncio.run(drive(report.url, report, pool, dict(zip(pool, hyps)), time_limit_s))
    return report


@contextmanager
def _existing(url: str) -> Iterator[str]:
    yield url.rstrip("/")
