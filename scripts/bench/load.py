"""The load test: N concurrent clients x M requests against a server on this machine.

Loopback only (a non-loopback URL is refused), bounded in requests and in time (clients
start no request after ``time_limit_s``; each request times out then too), and it stops by
itself. Reports throughput, p50/p95/p99 latency, errors, and whether every request got its
own correct answer: the translations the offline ``Translator`` gives for the same texts
with the same options (computed first, and timed: the offline batch throughput).

It uses only what a user has: the server's HTTP API (``seq2seq-serve`` started as a command),
``Translator`` and the decoding options by their flag names (``seq2seq.config.decoding``).
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

from seq2seq import DecodingConfig, ServeConfig, Translator, load_checkpoint
from seq2seq.serving.api import DecodingOptions, api_message, decoding_for

MAX_CLIENTS, MAX_REQUESTS = 256, 100_000
START_S = 900.0  # a started server's time to answer /health (--compile start compiles first)
# the decoding options of a /translate request: seq2seq-translate's flags by name
OPTIONS = set(DecodingOptions.model_fields) - {"model", "target_lang", "source_lang"}


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
    libre_share: float = 0.0  # the part of the requests sent to LibreTranslate's API
    libre_requests: int = 0
    rss_before_mb: float | None = None  # the server's resident memory (its /health)
    rss_peak_mb: float | None = None  # highest seen during the test (sampled every 0.25 s)
    rss_after_mb: float | None = None
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
        if self.libre_share:
            out.append(f"LibreTranslate requests: {self.libre_requests} of {self.requests} "
                       "(the rest: our /translate)")
        if self.rss_before_mb is not None:
            out.append(f"server memory (RSS): {self.rss_before_mb:.0f} MB before, peak "
                       f"{self.rss_peak_mb or 0:.0f} MB, {self.rss_after_mb or 0:.0f} MB after")
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


def decoding_of(options: dict) -> DecodingConfig:
    """The ``DecodingConfig`` a server decodes a request with ``options`` by (the server's
    own reading, with its default limits); ValueError naming a bad one as the server does."""
    unknown = sorted(set(options) - OPTIONS)
    if unknown:
        raise ValueError(f"option {unknown[0]!r}: not a decoding option of /translate "
                         f"(those are {', '.join(sorted(OPTIONS))})")
    try:
        return decoding_for(DecodingOptions(**options), ServeConfig())
    except ValueError as e:  # pydantic's ValidationError too
        raise ValueError(api_message(e)) from None


def offline(checkpoint: str | Path, texts: list[str], options: dict) -> tuple[list[str], float]:
    """The reference translations and the offline batch throughput (sentences/s)."""
    decoding = decoding_of(options)
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
    """:func:`server_process`, yielding the child process too. Without ``--compile`` in
    ``args`` the server decodes eagerly (``--compile off``): a test's server ends long before
    packages would be made."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    checkpoints = [checkpoint] if isinstance(checkpoint, (str, Path)) else list(checkpoint)
    cmd = [sys.executable, "-m", "seq2seq.cli.serve", *(a for c in checkpoints for a in ("-m", str(c))),
           "--port", str(port), "--log-level", "warning", *args]
    cmd += [] if "--compile" in args else ["--compile", "off"]
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


Job = tuple[list[str], bool]  # texts, and whether it goes to LibreTranslate's API


async def _ask(http: httpx.AsyncClient, report: LoadReport, texts: list[str],
               pair: tuple[str, str] | None) -> list[str] | None:
    """One request (LibreTranslate's API when ``pair``); its translations, or None after
    counting the failure."""
    try:
        if pair is not None:
            body = {"q": texts, "source": pair[0], "target": pair[1]}
            response = await http.post("/libretranslate/translate", json=body)
        else:
            response = await http.post("/translate", json={"texts": texts, **report.options})
    except httpx.HTTPError as e:
        report.errors += 1
        _problem(report, f"{type(e).__name__}: {e}")
        return None
    if response.status_code != 200:
        report.errors += 1
        _problem(report, f"HTTP {response.status_code}: {response.text}")
        return None
    answer = response.json()
    return answer["translatedText"] if pair is not None else [r["hyp"] for r in answer["results"]]


async def _client(http: httpx.AsyncClient, report: LoadReport, jobs: list[Job],
                  expected: dict[bool, dict[str, str]], pair: tuple[str, str],
                  deadline: float) -> None:
    """One client: its requests one after another, each checked against ``expected``."""
    for texts, libre in jobs:
        if time.monotonic() > deadline:
            return
        start = time.perf_counter()
        got = await _ask(http, report, texts, pair if libre else None)
        if got is None:
            continue
        report.answered += 1
        report.libre_requests += libre
        report.latencies_ms.append((time.perf_counter() - start) * 1000.0)
        want = [expected[libre][t] for t in texts]
        if got != want:
            report.wrong += 1
            _problem(report, f"{texts!r}: served {got!r}, offline {want!r}")


async def _health(http: httpx.AsyncClient) -> dict:
    try:
        return (await http.get("/health")).json()
    except (httpx.HTTPError, ValueError):
        return {}


async def _sample_rss(http: httpx.AsyncClient, seen: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        rss = (await _health(http)).get("rss_mb")
        if rss is not None:
            seen.append(rss)
        try:
            await asyncio.wait_for(stop.wait(), 0.25)
        except TimeoutError:
            pass


def plan(report: LoadReport, pool: list[str]) -> list[list[Job]]:
    """Each client's requests; request n goes to LibreTranslate's API for an exact
    ``libre_share`` of them, spread evenly."""
    per_client, k, share = report.requests // report.clients, report.texts_per_request, report.libre_share
    return [[([pool[(n * k + t) % len(pool)] for t in range(k)], int((n + 1) * share) > int(n * share))
             for n in range(i * per_client, (i + 1) * per_client)] for i in range(report.clients)]


async def drive(url: str, report: LoadReport, pool: list[str], expected: dict[bool, dict[str, str]],
                pair: tuple[str, str], time_limit_s: float) -> None:
    """Run every client concurrently, sampling the server's memory; fills ``report``."""
    limits = httpx.Limits(max_connections=report.clients)
    async with httpx.AsyncClient(base_url=url, timeout=time_limit_s, limits=limits) as http, \
            httpx.AsyncClient(base_url=url, timeout=time_limit_s) as probe:
        before = await _health(probe)
        seen: list[float] = []
        stop = asyncio.Event()
        sampler = asyncio.create_task(_sample_rss(probe, seen, stop))
        deadline = time.monotonic() + time_limit_s
        start = time.perf_counter()
        await asyncio.gather(*(_client(http, report, j, expected, pair, deadline)
                               for j in plan(report, pool)))
        report.wall_s = time.perf_counter() - start
        stop.set()
        await sampler
        after = await _health(probe)
    if before.get("model_calls") is not None and after.get("model_calls") is not None:
        report.model_calls = after["model_calls"] - before["model_calls"]
    report.rss_before_mb, report.rss_after_mb = before.get("rss_mb"), after.get("rss_mb")
    report.rss_peak_mb = max(seen, default=report.rss_after_mb)


def run_loadtest(checkpoint: str | Path, sentences: str | Path, clients: int, requests: int,
                 texts_per_request: int = 1, options: dict | None = None, url: str | None = None,
                 time_limit_s: float = 120.0, window_ms: float | None = None,
                 libre_share: float = 0.0, compile: str = "start") -> LoadReport:
    """Translate offline (reference + timing), then load a server: a fresh ``seq2seq-serve``
    child process on loopback, or the one at ``url`` (this machine only; it must serve
    ``checkpoint`` as its default model). ``libre_share`` of the requests go to
    LibreTranslate's API (default decoding), the rest to ours (with ``options``). The
    started server's ``--compile`` is ``compile``: "start" (the default) measures it as it
    runs once its packages are made (made first if not cached: minutes, once a machine)."""
    if not 1 <= clients <= MAX_CLIENTS:
        raise ValueError(f"--clients {clients}: must be in [1, {MAX_CLIENTS}]")
    if requests < 1 or texts_per_request < 1 or clients * requests > MAX_REQUESTS:
        raise ValueError(f"--requests {requests} x --clients {clients}: each >= 1, at most "
                         f"{MAX_REQUESTS} requests in all")
    if time_limit_s <= 0:
        raise ValueError(f"--time-limit {time_limit_s}: must be > 0 seconds")
    if not 0.0 <= libre_share <= 1.0:
        raise ValueError(f"--libre-share {libre_share}: must be in [0, 1]")
    if url is not None:
        check_loopback(url)
    options = dict(options or {})
    decoding_of(options)  # unknown or mistyped options fail here, not in every request
    pool = read_sentences(sentences, clients * requests * texts_per_request)
    hyps, offline_rate = offline(checkpoint, pool, options)
    expected = {False: dict(zip(pool, hyps))}
    expected[True] = expected[False] if not options else dict(zip(pool, offline(checkpoint, pool, {})[0]))
    meta = load_checkpoint(checkpoint)["seq2seq"]
    pair = (str(meta.get("src_lang", "?")).lower(), str(meta.get("tgt_lang", "?")).lower())
    report = LoadReport(url or "", clients, clients * requests, texts_per_request, options,
                        offline_sent_per_s=offline_rate, libre_share=libre_share)
    serving = _existing(url) if url is not None else server_process(
        checkpoint, window_ms, timeout_s=START_S, args=["--compile", compile])
    with serving as report.url:
        asyncio.run(drive(report.url, report, pool, expected, pair, time_limit_s))
    return report


@contextmanager
def _existing(url: str) -> Iterator[str]:
    yield url.rstrip("/")
