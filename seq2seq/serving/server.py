"""Running an app with uvicorn: in the foreground (``seq2seq-serve``) or in a background
thread (tests, the load test). The socket is bound first, so a bad host or a busy port is
a one-line ``OSError`` before any model is loaded.

Connections are guarded with what uvicorn offers (``limit_concurrency``: 503 past it;
``timeout_keep_alive``; h11's header-size limit) and what it lacks, in a subclass of its
h11 protocol: a cap on open connections (one past it is closed at once, so idle sockets
cannot use up the process's file descriptors) and a deadline for a request's headers (a
client that never finishes them is dropped). Answers made but not yet sent are bounded
server-wide (:class:`~seq2seq.serving.limits.AnswerBudget`): a request reserves its answer
before its work, and a connection whose client does not read holds what is left in its
write buffer while writing is paused (up to asyncio's 64 KiB high-water mark per
connection is not counted). Repeated log messages are rate-limited.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import uvicorn
from fastapi import FastAPI
from uvicorn.protocols.http.h11_impl import H11Protocol

from seq2seq.config import ServeConfig
from seq2seq.serving.limits import AnswerAccounting, AnswerBudget, hand_over_answer


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: any free one)."""
    try:
        family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        return socket.create_server(address[:2], family=family)
    except OSError as e:
        raise OSError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class _GuardedH11(H11Protocol):
    """uvicorn's h11 protocol with a connection cap and a header deadline (set by
    :func:`uvicorn_config` on a subclass made for one server)."""

    max_connections = 512
    header_timeout_s = 10.0
    answers = AnswerBudget(2**62)
    _unsent = 0  # bytes this connection holds in the budget (its buffer while paused)

    def connection_made(self, transport) -> None:  # type: ignore[override]
        if len(self.server_state.connections) >= self.max_connections:
            self.transport = transport
            transport.abort()  # frees the descriptor now; the client sees a reset
            self.logger.warning("connection refused: %d connections open (the cap)",
                                self.max_connections)
            return
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # asyncio sets this only where the socket's proto says TCP (0 here: bind's
            # create_server); without it the answer's body waits for the client's delayed
            # ACK of its headers: one-sentence requests took p50 80 ms instead of ~20
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().connection_made(transport)
        self._arm_header_deadline()

    def pause_writing(self) -> None:
        # asyncio calls this from transport.write once the buffer passes its high-water mark,
        # inside the request's send: its reservation becomes the buffer's count here (never
        # both). Until resume_writing nothing more is written (uvicorn waits for it), so this
        # is the most the buffer holds.
        hand_over_answer()
        self._release_unsent()
        self._unsent = self.transport.get_write_buffer_size()
        self.answers.take(self._unsent, force=True)
        super().pause_writing()

    def resume_writing(self) -> None:
        self._release_unsent()
        super().resume_writing()

    def connection_lost(self, exc) -> None:
        self._release_unsent()
        super().connection_lost(exc)

    def _release_unsent(self) -> None:
        self.answers.give(self._unsent)
        self._unsent = 0

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm_header_deadline()  # the next request on a kept-alive connection too

    def _arm_header_deadline(self) -> None:
        cycle = self.cycle  # unchanged at the deadline = no new request's headers arrived
        self.loop.call_later(self.header_timeout_s, self._header_deadline, cycle)

    def _header_deadline(self, cycle) -> None:
        if self.cycle is cycle and not self.transport.is_closing():
            self.transport.close()


class RateLimitedLog(logging.Filter):
    """Each kind of message (its format string) at most ``per_minute`` times a minute; then
    one line says how many were dropped (an accept loop out of descriptors logged a
    traceback per connection: hundreds of MB a minute)."""

    def __init__(self, per_minute: int):
        super().__init__()
        self.per_minute = per_minute
        self._seen: dict[str, tuple[float, int]] = {}  # msg -> (window start, count)

    def filter(self, record: logging.LogRecord) -> bool:
        now, key = time.monotonic(), str(record.msg)
        start, count = self._seen.get(key, (now, 0))
        if now - start >= 60.0:
            if count > self.per_minute:
                record.msg = f"{record.msg} [{count - self.per_minute} more like this dropped]"
            start, count = now, 0
        self._seen[key] = (start, count + 1)
        if len(self._seen) > 10_000:  # bounded memory, whatever the messages
            self._seen.clear()
        return count < self.per_minute


def uvicorn_config(app: FastAPI, log_level: str) -> uvicorn.Config:
    """uvicorn's config for ``app``, its limits taken from the app's ``ServeConfig``; the
    budget of unsent answers is ``app.state.answers``."""
    server = getattr(app.state, "server", None)
    cfg: ServeConfig = server.cfg if server is not None else ServeConfig()
    app.state.answers = AnswerBudget(cfg.max_unsent_bytes)
    protocol = type("GuardedH11", (_GuardedH11,), {"max_connections": cfg.max_connections,
                                                    "header_timeout_s": cfg.header_timeout_s,
                                                    "answers": app.state.answers})
    config = uvicorn.Config(AnswerAccounting(app, app.state.answers), log_level=log_level,
                            http=protocol,
                            limit_concurrency=cfg.max_connections,
                            timeout_keep_alive=cfg.keep_alive_s,
                            h11_max_incomplete_event_size=cfg.max_header_bytes)
    log_filter = RateLimitedLog(cfg.log_per_minute)  # after uvicorn set up its loggers
    for name in ("asyncio", "uvicorn.error", "seq2seq.serving.batcher"):
        logger = logging.getLogger(name)
        for old in [f for f in logger.filters if isinstance(f, RateLimitedLog)]:
            logger.removeFilter(old)
        logger.addFilter(log_filter)
    return config


class Pending(list):
    """Signals recorded by :func:`deferred_signals`; ``on_signal`` (if set) runs at each."""

    on_signal: Callable[[], None] | None = None


@contextmanager
def deferred_signals() -> Iterator[Pending]:
    """SIGINT and SIGTERM inside the block are recorded (the yielded list), not acted on;
    after it the earlier handlers are back and the first recorded signal is raised to them.
    uvicorn's set-up reconfigures logging, and a KeyboardInterrupt there can land between a
    log handler's acquire and release: a RuntimeError and a traceback, not Ctrl-C's exit."""
    pending = Pending()
    if threading.current_thread() is not threading.main_thread():  # signals: main thread only
        yield pending
        return

    def record(sig: int, _frame) -> None:
        pending.append(sig)
        if pending.on_signal is not None:
            pending.on_signal()

    earlier = {sig: signal.signal(sig, record) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield pending
    finally:
        for sig, handler in earlier.items():
            signal.signal(sig, handler)
    if pending:
        signal.raise_signal(pending[0])


def serve(app: FastAPI, sock: socket.socket, log_level: str = "info") -> None:
    """Serve until interrupted: Ctrl-C ends in ``KeyboardInterrupt``, SIGTERM in its default
    action, after a graceful shutdown (uvicorn hands the signal back to the handlers it found,
    here :func:`deferred_signals`'s) or before the server starts if it came during set-up."""
    with deferred_signals() as pending:
        server = uvicorn.Server(uvicorn_config(app, log_level))
        # A signal after this check but before uvicorn puts its own handlers in place would be
        # recorded while the server serves on: it asks the server to stop, as uvicorn's would.
        pending.on_signal = lambda: setattr(server, "should_exit", True)
        if not pending:
            server.run(sockets=[sock])


@contextmanager
def running(app: FastAPI, host: str = "127.0.0.1", port: int = 0, timeout_s: float = 60.0,
            sock: socket.socket | None = None) -> Iterator[str]:
    """Serve ``app`` in a daemon thread while the block runs (on ``sock`` if given, else
    on ``host:port``); yields its base URL."""
    sock = sock if sock is not None else bind(host, port)
    server = uvicorn.Server(uvicorn_config(app, "warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True,
                              name="seq2seq-serve")
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            sock.close()
            raise RuntimeError("the server did not start (see its log above)")
        time.sleep(0.02)
    try:
        yield url_of(sock)
    finally:
        server.should_exit = True
        thread.join(timeout_s)
        sock.close()
