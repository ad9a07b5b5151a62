"""What one request may cost the server, checked as early as it can be:

- the body, counted while it is read (``Content-Length`` or chunked), and each piece of it
  awaited at most ``body_timeout_s`` (:class:`BodyLimit`, an ASGI middleware: everything
  that reads a body, JSON or form, reads it through the limit);
- the work of a translation and the size of its answer, estimated from the source lengths
  and the max-length rule before any work starts (:func:`check_cost`);
- the answers made but not yet sent, server-wide (:class:`AnswerBudget`): an answer's
  estimated size is reserved before its work starts (503 with ``Retry-After`` when the
  budget is full) and counted until the socket has taken it;
- its time, and its client: work is cancelled when the time limit passes or the client
  hangs up, and work the batcher cannot finish in time is refused at once with 503 and
  ``Retry-After`` (:func:`bounded`).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import torch
from fastapi import HTTPException, Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from seq2seq.config import DecodingConfig, ServeConfig
from seq2seq.decoding.rules import length_limits
from seq2seq.serving.batcher import Overloaded

BYTES_PER_TOKEN = 16  # an output piece in a JSON answer, pessimistic (escapes included)
BYTES_PER_WEIGHT = 24  # an attention weight in JSON: "0.0123456789012345678, "
CLIENT_GONE = 499  # nginx's "client closed request": the answer is never read


class BodyLimit:
    """Refuse a body over ``max_bytes`` (413) as soon as it is known to be, and one that
    stalls for ``timeout_s`` (408), without reading the rest: ``render(path, status,
    message)`` builds the refusal sent before the app runs (an oversized Content-Length)."""

    def __init__(self, app: ASGIApp, max_bytes: int, timeout_s: float,
                 render: Callable[[str, int, str], Callable]):
        self.app, self.max_bytes, self.timeout_s, self.render = app, max_bytes, timeout_s, render

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        too_big = f"request body over {self.max_bytes} bytes"
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            response = self.render(scope["path"], 413, too_big)
            return await response(scope, receive, send)
        received, done = 0, False

        async def limited() -> Message:
            nonlocal received, done
            if done:  # after the body: the wait for a disconnect has no time limit
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), self.timeout_s)
            except TimeoutError:
                raise HTTPException(408, f"the request body stalled for {self.timeout_s:g} s") from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise HTTPException(413, too_big)
                done = not message.get("more_body", False)
            return message

        await self.app(scope, limited, send)


class AnswerBudget:
    """Bytes of answers made but not yet sent, across the server, at most ``limit``: each
    request reserves its answer's estimated size before any work (:func:`reserve_answer`,
    called by :func:`check_cost`) and holds it until the answer is handed to its connection;
    a connection whose client does not read then holds what its socket has not taken
    (counted by the server's protocol while writing is paused, see
    :mod:`seq2seq.serving.server`). A reservation that does not fit is refused (503)."""

    def __init__(self, limit: int):
        self.limit, self.held, self.peak, self.refused = limit, 0, 0, 0

    def take(self, n: int, force: bool = False) -> bool:
        """Hold ``n`` more bytes if they fit (or the budget is empty, or ``force``: bytes
        already made)."""
        if not force and self.held > 0 and self.held + n > self.limit:
            self.refused += 1
            return False
        self.held += n
        self.peak = max(self.peak, self.held)
        return True

    def give(self, n: int) -> None:
        self.held -= n


@dataclass
class _Ticket:  # one request's reservation
    budget: AnswerBudget
    held: int = 0

    def release(self) -> None:
        self.budget.give(self.held)
        self.held = 0


_TICKET: contextvars.ContextVar[_Ticket | None] = contextvars.ContextVar("answer_ticket",
                                                                       default=None)


def reserve_answer(size: int) -> None:
    """Reserve ``size`` bytes of answer for the current request (nothing outside a server
    that counts answers, e.g. a test client); 503 with ``Retry-After`` if they do not fit."""
    ticket = _TICKET.get()
    if ticket is None:
        return
    if not ticket.budget.take(size):
        raise HTTPException(503, f"the server holds {ticket.budget.held} bytes of answers its "
                                 "clients have not read yet (its limit: "
                                 f"{ticket.budget.limit}); try again shortly",
                            {"Retry-After": "1"})
    ticket.held += size


def hand_over_answer() -> None:
    """The current request's answer is in its connection's buffer now, counted there: its
    reservation ends (called by the server's protocol from inside the write)."""
    ticket = _TICKET.get()
    if ticket is not None:
        ticket.release()


class AnswerAccounting:
    """ASGI middleware: gives each HTTP request a ticket of :class:`AnswerBudget`, released
    once its answer is handed to the connection (or the request ends without one)."""

    def __init__(self, app: ASGIApp, budget: AnswerBudget):
        self.app, self.budget = app, budget

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        ticket = _Ticket(self.budget)

        async def counted(message: Message) -> None:
            await send(message)  # a paused connection waits here, still holding the ticket
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                ticket.release()  # the connection holds what its socket did not take

        token = _TICKET.set(ticket)
        try:
            await self.app(scope, receive, counted)
        finally:
            ticket.release()
            _TICKET.reset(token)


def output_limits(src_tokens: list[int], decoding: DecodingConfig, max_positions: int) -> list[int]:
    """Longest output of each text (tokens with EOS included) under the max-length rule."""
    limits = length_limits(torch.tensor(src_tokens), decoding, max_positions)
    return [n + 1 for n in limits.tolist()]


def check_cost(src_tokens: list[int], decoding: DecodingConfig, arch, cfg: ServeConfig,
               attention: bool = False) -> list[int]:
    """The work of each text; 413 if translating texts of ``src_tokens`` tokens (EOS
    included) with ``decoding`` could take more work than the server allows (per text: one
    model call's ``call_work``; per request: ``max_work``) or build a bigger answer than
    ``max_response_bytes``; reserves the answer's size (:func:`reserve_answer`). Work = output positions x (source + output positions, what each
    step attends to) x hypotheses kept (beam, or samples). Worst case: every output runs to
    its length limit (``min_len`` can force that)."""
    if not src_tokens:
        return []
    outs = output_limits(src_tokens, decoding, arch.max_positions)
    kept = decoding.beam_size if decoding.method == "beam" else decoding.nbest
    costs = [o * (s + o) * kept for s, o in zip(src_tokens, outs)]
    advice = "send shorter texts, or ask a smaller beam, nbest, max_len_a or max_len_b"
    for i, cost in enumerate(costs):
        if cost > cfg.call_work:
            raise HTTPException(413, f"text {i} may take {cost} units of work ({src_tokens[i]} "
                                     f"source tokens, up to {outs[i]} output tokens, {kept} "
                                     f"hypotheses); this server allows {cfg.call_work} per text: "
                                     + advice)
    if sum(costs) > cfg.max_work:
        raise HTTPException(413, f"this request may take {sum(costs)} units of work; this "
                                 f"server allows at most {cfg.max_work} per request: " + advice)
    size = sum(len_ * (decoding.nbest + 1) for len_ in outs) * BYTES_PER_TOKEN
    if attention:
        (s,), (t,) = src_tokens, outs
        weights = arch.n_heads * (arch.encoder_layers * s * s + arch.decoder_layers * (t * t + t * s))
        size += weights * BYTES_PER_WEIGHT
    if size > cfg.max_response_bytes:
        raise HTTPException(413, f"the answer may be {size} bytes; this server sends at most "
                                 f"{cfg.max_response_bytes}: send a shorter text, or ask a smaller "
                                 "nbest, max_len_a or max_len_b")
    reserve_answer(size)
    return costs


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def bounded(request: Request, work: Awaitable, timeout_s: float):
    """``await work``, cancelled if it takes over ``timeout_s`` (503) or if the client hangs
    up first (499: nobody reads the answer; the batcher drops what it has not started);
    503 with ``Retry-After`` if the batcher refuses it (:class:`Overloaded`)."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        done, _ = await asyncio.wait({task, gone}, timeout=timeout_s,
                                     return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # the server is stopping: nothing is waited for
        task.cancel()
        raise
    finally:
        gone.cancel()
    if task in done:
        try:
            return task.result()
        except Overloaded as e:
            raise HTTPException(503, str(e), {"Retry-After": str(e.retry_after_s)}) from None
    task.cancel()
    if gone in done:
        raise HTTPException(CLIENT_GONE, "the client closed the connection")
    raise HTTPException(503, f"the request took longer than this server's limit of {timeout_s:g} s; "
                             "send fewer or shorter texts, or ask a smaller beam")
