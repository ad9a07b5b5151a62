"""Running an app with uvicorn: in the foreground (``seq2seq-serve``) or in a background
thread (tests, the load test). The socket is bound first, so a bad host or a busy port is
a one-line ``OSError`` before any model is loaded."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from fastapi import FastAPI


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


def serve(app: FastAPI, sock: socket.socket, log_level: str = "info") -> None:
    """Serve until interrupted (Ctrl-C / SIGTERM)."""
    uvicorn.Server(uvicorn.Config(app, log_level=log_level)).run(sockets=[sock])


@contextmanager
def running(app: FastAPI, host: str = "127.0.0.1", port: int = 0,
            timeout_s: float = 60.0) -> Iterator[str]:
    """Serve ``app`` in a daemon thread while the block runs; yields its base URL."""
    sock = bind(host, port)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
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
