"""``MicroBatcher``: requests that arrive together share model calls, big requests are cut
into bounded pieces that take turns with everyone else's, all off the event loop.

Each request (a list of texts) is queued with a *key* saying which requests may share a call
(same model, same decoding settings), the *cost* of each text (its work: output positions x
hypotheses, see :func:`seq2seq.serving.limits.check_cost`) and the work to do. Scheduling is
round-robin over the requests in progress: a call starts with the next piece of the request
whose turn it is (consecutive texts worth at most ``max_cost``, or one text), is filled up to
``max_cost`` with the next pieces of other requests of the same key, and every request that
had a piece goes to the back of the line. So a one-sentence request waits for at most one
bounded call of a huge one, never for all of it, and requests of one key still merge into
full calls under load (throughput approaches offline batching). Calls run on one worker
thread (the model is not shared between threads; torch parallelises inside the call).

A request whose future is done (its client hung up, or its time ran out) is dropped before
its next piece. The first request of an idle batcher waits ``window_s`` for others to join
(the server's default is 0: requests arriving while a call runs share the next call anyway).
A call that raises is retried piece by piece, so one bad request fails alone.

Admission (with ``timeout_s``): turns are fair, so under overload every request slows down
together and, past the time limit, none finishes. So a request is admitted only if it can
finish in time: the work in progress is measured in the same units as the costs, a
throughput (work/s) is measured from the model calls as they run, and round-robin bounds
when each request ends: request ``j`` with remaining work ``r_j`` is done once at most
``sum_k min(r_k, r_j + max_cost)`` has run (every other request gets at most one more piece
per turn). A new request is admitted if it ends within ``ADMIT_SHARE`` of its time and no
request that would have ended in time no longer does; otherwise, or past ``max_queue``
requests, it is refused at once (:class:`Overloaded`, with the seconds until the work in
progress is done). A request alone is always admitted (nothing else can use the time).
Before the first call is measured requests are admitted provisionally and checked again
when it is.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

Work = Callable[[list[str]], Sequence[Any]]  # texts -> one result per text, in order
ADMIT_SHARE = 0.8  # of its time limit, a request's predicted end; the rest: parsing, JSON, noise
RATE_DECAY = 0.7  # per call, of the measured work and seconds (recent calls weigh most)


class Overloaded(Exception):
    """A request the batcher cannot finish in time; try again after ``retry_after_s``."""

    def __init__(self, message: str, retry_after_s: int):
        super().__init__(message)
        self.retry_after_s = retry_after_s


@dataclass(eq=False)
class _Job:
    key: Hashable
    texts: list[str]
    costs: list[int]
    work: Work
    future: asyncio.Future
    deadline: float = math.inf  # time.monotonic() by which it must be answered
    provisional: bool = False  # admitted before any throughput was measured
    done: int = 0  # texts answered so far
    results: list = field(default_factory=list)

    def remaining(self) -> int:
        return sum(self.costs[self.done:])


Piece = tuple[_Job, int, int]  # texts [start, end) of a job


class MicroBatcher:
    """Start with ``await start()`` inside the serving event loop, ``await stop()`` at the end."""

    def __init__(self, window_s: float, max_cost: int, timeout_s: float | None = None,
                 max_queue: int | None = None, rate: float | None = None):
        """``timeout_s``: admit only requests that can end within it (None: all);
        ``max_queue``: requests in progress at most; ``rate``: a first throughput estimate
        (work/s; None: measured from the first call)."""
        self.window_s, self.max_cost = window_s, max_cost
        self.timeout_s, self.max_queue = timeout_s, max_queue
        self.requests = 0  # requests submitted
        self.refused = 0  # requests refused by admission (Overloaded)
        self.model_calls = 0  # calls of a Work (merged requests count once)
        self._jobs: list[_Job] = []  # admitted and unfinished, oldest first
        # throughput = decayed work / decayed seconds of model calls
        self._work, self._seconds = (rate, 1.0) if rate else (0.0, 0.0)
        self._executor: ThreadPoolExecutor | None = None
        self._queue: asyncio.Queue[_Job] | None = None
        self._task: asyncio.Task | None = None
        self._active: deque[_Job] = deque()  # requests in progress, whose turn first

    async def start(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="seq2seq-model")
        self._queue = asyncio.Queue()
        self._task = asyncio.create_task(self._collect(), name="seq2seq-batcher")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._executor is not None:
            self._executor.shutdown(wait=True)

    async def submit(self, key: Hashable, texts: list[str], costs: Sequence[int], work: Work) -> list:
        """Results of ``work(texts)``, computed in pieces, together with other requests of
        the same key; ``costs``: one per text."""
        if self._queue is None:
            raise RuntimeError("MicroBatcher.submit before start()")
        if not texts:
            return []
        future = asyncio.get_running_loop().create_future()
        self.requests += 1
        job = _Job(key, list(texts), list(costs), work, future)
        self._admit(job)
        self._queue.put_nowait(job)
        return await future

    # ------------------------------------------------------------ admission
    @property
    def rate(self) -> float | None:
        """Measured throughput, work per second (None before any call)."""
        return self._work / self._seconds if self._seconds > 0 and self._work > 0 else None

    def _live(self) -> list[_Job]:
        self._jobs = [j for j in self._jobs if not j.future.done()]
        return self._jobs

    def _late(self, jobs: list[_Job], now: float, share: float) -> set[int]:
        """Ids of the jobs that round-robin may not finish within ``share`` of their time."""
        rate, left = self.rate, [j.remaining() for j in jobs]
        assert rate is not None and self.timeout_s is not None
        late = set()
        for job, r in zip(jobs, left):
            end = now + sum(min(other, r + self.max_cost) for other in left) / rate
            if end > job.deadline - (1.0 - share) * self.timeout_s:
                late.add(id(job))
        return late

    def _fits(self, before: list[_Job], job: _Job, now: float) -> bool:
        """Whether ``job`` ends in time after ``before`` and ends none of them late."""
        if not before:
            return True  # alone: nothing else could use the time
        late_now = self._late(before, now, ADMIT_SHARE)
        late_with = self._late([*before, job], now, ADMIT_SHARE)
        return id(job) not in late_with and late_with <= late_now

    def _refusal(self, why: str) -> Overloaded:
        self.refused += 1
        rate, work = self.rate, sum(j.remaining() for j in self._jobs)
        wait = max(1, math.ceil(work / rate)) if rate else 1
        return Overloaded(f"{why}; try again in {wait} s", wait)

    def _admit(self, job: _Job) -> None:
        """Add ``job`` to the work in progress, or raise :class:`Overloaded`."""
        if self.timeout_s is None and self.max_queue is None:
            return
        live, now = self._live(), time.monotonic()
        if self.max_queue is not None and len(live) >= self.max_queue:
            raise self._refusal(f"the server is busy: {len(live)} requests in progress")
        if self.timeout_s is not None:
            job.deadline = now + self.timeout_s
            if self.rate is None:
                job.provisional = True
            elif not self._fits(live, job, now):
                raise self._refusal("the server is busy: this request would not finish within "
                                    f"its {self.timeout_s:g} s")
        self._jobs.append(job)

    def _recheck(self) -> None:
        """Once throughput is first measured: refuse the provisional jobs that do not fit."""
        now, kept = time.monotonic(), []
        for job in self._live():
            if job.provisional and not self._fits(kept, job, now):
                job.future.set_exception(self._refusal(
                    f"the server is busy: this request would not finish within its "
                    f"{self.timeout_s:g} s"))
                continue
            job.provisional = False
            kept.append(job)
        self._jobs = kept

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` alone on the model's worker thread (not merged with others)."""
        if self._executor is None:
            raise RuntimeError("MicroBatcher.call before start()")
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    # ------------------------------------------------------------ scheduling
    async def _collect(self) -> None:
        assert self._queue is not None
        while True:
            if not self._active:
                self._active.append(await self._queue.get())
                if self.window_s > 0:
                    await asyncio.sleep(self.window_s)  # the collection window
            while not self._queue.empty():
                self._active.append(self._queue.get_nowait())
            pieces = self.next_call()
            if pieces:
                await self._execute(pieces)

    def _piece(self, job: _Job, budget: int) -> Piece | None:
        """The job's next texts worth at most ``budget`` (at least one text if ``budget`` is
        the whole ``max_cost``: a text dearer than that runs alone)."""
        end, spent = job.done, 0
        while end < len(job.texts) and spent + job.costs[end] <= budget:
            spent += job.costs[end]
            end += 1
        if end == job.done and budget == self.max_cost:
            end += 1
        return (job, job.done, end) if end > job.done else None

    def next_call(self) -> list[Piece]:
        """The pieces of the next model call; the jobs in it go to the back of the line."""
        live = [j for j in self._active if not j.future.done()]  # a client may have gone
        self._active = deque(live)
        if not live:
            return []
        first = self._piece(live[0], self.max_cost)
        assert first is not None
        pieces, budget = [first], self.max_cost - sum(first[0].costs[first[1]:first[2]])
        for job in live[1:]:
            if budget <= 0:
                break
            piece = self._piece(job, budget) if job.key == first[0].key else None
            if piece is not None:
                pieces.append(piece)
                budget -= sum(job.costs[piece[1]:piece[2]])
        taken = {id(p[0]) for p in pieces}
        self._active = deque([j for j in live if id(j) not in taken] + [p[0] for p in pieces])
        return pieces

    async def _execute(self, pieces: list[Piece]) -> None:
        texts = [t for job, start, end in pieces for t in job.texts[start:end]]
        cost = sum(sum(job.costs[start:end]) for job, start, end in pieces)
        try:
            results = await self._run(pieces[0][0].work, texts, cost)
        except Exception as e:
            if len(pieces) > 1:  # find the culprit: the others still get their answers
                for piece in pieces:
                    await self._execute([piece])
                return
            log.exception("model call failed")
            self._finish(pieces[0][0], error=e)
            return
        at = 0
        for job, start, end in pieces:
            job.results.extend(results[at : at + end - start])
            job.done, at = end, at + end - start
            if job.done == len(job.texts):
                self._finish(job)

    def _finish(self, job: _Job, error: BaseException | None = None) -> None:
        if job in self._active:
            self._active.remove(job)
        if job.future.done():
            return
        if error is not None:
            job.future.set_exception(error)
        else:
            job.future.set_result(job.results)

    async def _run(self, work: Work, texts: list[str], cost: int) -> Sequence[Any]:
        self.model_calls += 1
        start, first = time.monotonic(), self.rate is None
        results = await self.call(work, texts)
        self._work = self._work * RATE_DECAY + cost
        self._seconds = self._seconds * RATE_DECAY + max(time.monotonic() - start, 1e-6)
        if first and self.timeout_s is not None:
            self._recheck()
        return results
