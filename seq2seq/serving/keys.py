"""Optional API keys (``seq2seq-serve --api-keys FILE``), as LibreTranslate uses them.

The file has one key per line, optionally followed by that key's own limit of requests per
minute (``KEY`` or ``KEY 120``); blank lines and ``#`` comments are skipped. A request
without a key, or with one not in the file, gets 403 from our API; a key over its limit in
the last 60 s gets 429. LibreTranslate's API serves a request without a key under the
default limit per client address (:meth:`ApiKeys.check_anonymous`), as LibreTranslate does.
Keys are compared in constant time: each candidate is hashed and compared with every stored
hash by ``hmac.compare_digest``, never stopping at the first match, so the
time taken tells nothing about how much of a key was right.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from seq2seq.serving.libre import INVALID, MISSING, slowdown  # LibreTranslate's words


class KeyRefused(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


class ApiKeys:
    def __init__(self, limits: dict[str, int], window_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic, default_limit: int = 60):
        self._limits = {_digest(k): n for k, n in limits.items()}  # digest -> requests per window
        self._recent: dict[bytes, deque[float]] = {d: deque() for d in self._limits}
        self._anonymous: dict[str, deque[float]] = {}  # client address -> its recent requests
        self.window_s, self._clock, self.default_limit = window_s, clock, default_limit

    @classmethod
    def load(cls, path: str | Path, default_limit: int) -> ApiKeys:
        """Keys from ``path``; a line without its own limit gets ``default_limit``."""
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"--api-keys {path}: cannot read it ({e})") from None
        limits: dict[str, int] = {}
        for n, line in enumerate(lines, 1):
            fields = line.split("#", 1)[0].split()
            if not fields:
                continue
            limit = fields[1] if len(fields) > 1 else str(default_limit)
            if len(fields) > 2 or not limit.isdigit() or int(limit) < 1:
                raise ValueError(f"--api-keys {path}:{n}: expected 'KEY' or 'KEY REQUESTS_PER_MINUTE' "
                                 "(a whole number >= 1)")
            limits[fields[0]] = int(limit)
        if not limits:
            raise ValueError(f"--api-keys {path}: no keys in it (one key per line)")
        return cls(limits, default_limit=default_limit)

    def __len__(self) -> int:
        return len(self._limits)

    def check(self, key: object) -> None:
        """Count one request for ``key``; ``KeyRefused`` (403 or 429) if it may not run."""
        if not key:
            raise KeyRefused(403, MISSING)
        if not isinstance(key, str):  # a JSON list, number, object or true: no key of ours
            raise KeyRefused(403, INVALID)
        candidate, found = _digest(key), None
        for stored in self._limits:  # every comparison runs, match or not
            if hmac.compare_digest(candidate, stored):
                found = stored
        if found is None:
            raise KeyRefused(403, INVALID)
        self._count(self._recent[found], self._limits[found])

    def check_anonymous(self, address: str) -> None:
        """Count one request without a key from ``address``, under the default limit;
        ``KeyRefused`` (429) past it."""
        now = self._clock()
        for other in [a for a, r in self._anonymous.items() if not r or r[-1] <= now - self.window_s]:
            del self._anonymous[other]  # addresses idle for a window: forget them (bounded memory)
        self._count(self._anonymous.setdefault(address, deque()), self.default_limit)

    def _count(self, recent: deque[float], limit: int) -> None:
        now = self._clock()
        while recent and recent[0] <= now - self.window_s:
            recent.popleft()
        if len(recent) >= limit:
            raise KeyRefused(429, slowdown(limit))
        recent.append(now)
