"""Each connection the server accepts sends without Nagle's delay (TCP_NODELAY): the answer's
headers and body go out as written, not the body after the client's delayed ACK."""

from __future__ import annotations

import socket

import httpx
from helpers import DE_EN

from seq2seq.serving import server as serving_server
from seq2seq.serving.app import create_app
from seq2seq.serving.models import load_models


def test_accepted_connections_send_without_delay(monkeypatch):
    seen = []
    arm = serving_server._GuardedH11._arm_header_deadline

    def record(self):
        sock = self.transport.get_extra_info("socket")
        seen.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        arm(self)

    monkeypatch.setattr(serving_server._GuardedH11, "_arm_header_deadline", record)
    app = create_app(load_models([str(DE_EN)]))
    with serving_server.running(app) as url, httpx.Client() as client:
        for _ in range(2):  # a fresh connection each
            assert client.get(f"{url}/health", headers={"Connection": "close"}).status_code == 200
    assert seen and all(seen), seen
