"""``seq2seq-serve``'s settings (``ServeConfig``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from seq2seq.config.decoding import MAX_BEAM
from seq2seq.fields import ConfigError, check_fields, positive

MAX_WINDOW_MS = 1000.0  # a request never waits longer than this for others to join it


@dataclass
class ServeConfig:
    """``seq2seq-serve``: where it listens, how it merges requests, what one request may ask."""

    host: str = "127.0.0.1"  # loopback unless told otherwise
    port: int = 8000  # 0 = any free port
    # which API answers at the server root: ours ("seq2seq": LibreTranslate's then under
    # /libretranslate/) or LibreTranslate's ("libretranslate": ours and the explorer under /seq2seq/)
    api: Literal["seq2seq", "libretranslate"] = "seq2seq"
    # requests arriving within window_ms of the first one to an idle server share its model
    # call (of at most call_work, below); those arriving while a call runs share the next one
    # whatever the window. 0: a lone request starts at once (one client, one sentence at a
    # time on 2 cores: p50 22.3-22.6 ms against 31.3-34.8 ms with 5; 32 clients: 40 and 41
    # model calls for 640 requests, docs/serving.md). A call pads its texts into batches of at most
    # max_batch_tokens source tokens (+ EOS each: the Translator's max_tokens)
    window_ms: float = 0.0
    max_batch_tokens: int = 2000
    max_texts: int = 64  # texts in one /translate request
    max_text_chars: int = 1000  # characters in one text (tokens are capped by the model)
    max_beam: int = 16
    max_nbest: int = 16
    threads: int | None = None  # torch threads for the model; None = torch's default
    # float32 models on the CPU: the one-token decoder step (greedy, the default beam; other
    # beams once asked for) and the encoder compiled for small batches, as --compile does
    # for seq2seq-translate. "background": answers at once, eagerly, and compiles in a
    # low-priority thread, the calls taking each package once it is made (a minute or two
    # once per machine and model, cached); "start": compiles before listening; "off"
    compile: Literal["background", "start", "off"] = "background"
    # API keys: a file of "KEY [REQUESTS_PER_MINUTE]" lines; None = open server
    api_keys: str | None = None
    req_limit: int = 60  # requests per minute per key, unless its line says otherwise
    # LibreTranslate's rule with api_keys: a LibreTranslate request without a key is served
    # under req_limit per client address, unless this is set and the request's Origin header
    # does not match it (a regular expression, matched at the start): then it gets 400
    require_api_key_origin: str | None = None
    # What one request may cost. Work of a text: output positions the search may fill (the
    # max-length rule, capped by the model) x (source + output positions) x hypotheses kept
    # (beam, or samples). A model call does at most call_work (a bigger request is cut into
    # pieces that take turns with other requests'; a text may not cost more).
    max_body_bytes: int = 1_048_576  # counted while reading, chunked bodies too
    max_work: int = 16_000_000
    call_work: int = 500_000
    max_response_bytes: int = 16_000_000  # estimated before any work is done
    # answers made but not yet taken by their sockets (clients that do not read), over all
    # connections: a request whose answer does not fit gets 503 with Retry-After
    max_unsent_bytes: int = 64_000_000
    request_timeout_s: float = 60.0  # a request still unanswered then gets 503
    # Admission: a translation is taken only if the work in progress and its own can end
    # within request_timeout_s at the measured throughput, and fewer than max_queue are in
    # progress; otherwise 503 at once, with Retry-After
    max_queue: int = 128
    # Connections (uvicorn): beyond max_connections new ones are closed at once; headers
    # must arrive within header_timeout_s, each piece of a body within body_timeout_s.
    max_connections: int = 512
    header_timeout_s: float = 10.0
    body_timeout_s: float = 10.0
    keep_alive_s: int = 5  # an idle kept-alive connection is closed after this
    max_header_bytes: int = 16_384  # request line + headers (h11's incomplete-event limit)
    log_per_minute: int = 20  # each kind of server log message at most this often

    def __post_init__(self) -> None:
        window = self.window_ms  # NaN passes every comparison and inf never ends the wait
        if isinstance(window, (int, float)) and not isinstance(window, bool) and not (
                0 <= window <= MAX_WINDOW_MS):
            raise ConfigError(f"ServeConfig.window_ms must be in [0, {MAX_WINDOW_MS}] "
                              f"(milliseconds), got {window}")
        check_fields(self)  # types: None or "" where a number goes is named, not a TypeError
        positive(self, "max_batch_tokens", "max_texts", "max_text_chars", "max_beam",
                  "max_nbest", "threads", "req_limit", "max_body_bytes", "max_work",
                  "max_response_bytes", "max_unsent_bytes", "call_work", "request_timeout_s",
                  "max_queue", "max_connections", "header_timeout_s", "body_timeout_s",
                  "keep_alive_s", "max_header_bytes", "log_per_minute")
        for name in ("max_beam", "max_nbest"):
            if getattr(self, name) > MAX_BEAM:
                raise ConfigError(f"ServeConfig.{name} must be <= {MAX_BEAM} (the decoder's "
                                  f"own bound), got {getattr(self, name)}")
        if self.require_api_key_origin is not None:
            try:
                re.compile(self.require_api_key_origin)
            except (re.error, RecursionError, OverflowError) as e:
                raise ConfigError(f"ServeConfig.require_api_key_origin is not a regular expression "
                                  f"({e}): {self.require_api_key_origin!r}") from None
        if self.max_unsent_bytes < self.max_response_bytes:
            raise ConfigError(f"ServeConfig.max_unsent_bytes ({self.max_unsent_bytes}) must be "
                              f">= max_response_bytes ({self.max_response_bytes}): one answer "
                              "must fit")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"ServeConfig.port must be in [0, 65535], got {self.port}")
