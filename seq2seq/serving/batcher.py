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
its next piece. The first request of an idle batcher waits ``window_s`` for others to join.
A call that raises is retried piece by piece, so one bad request fails alone.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

Work = Callable[[list[str]], Sequence[Any]]  # texts -> one result per text, in order


@dataclass(eq=False)
class _Job:
    key: Hashable
    texts: list[str]
    costs: list[int]
    work: Work
    future: asyncio.Future
    done: int = 0  # texts answered so far
    results: list = field(default_factory=list)


Piece = tuple[_Job, int, int]  # texts [start, end) of a job


class MicroBatcher:
    """Start with ``await start()`` inside the serving event loop, ``await stop()`` at the end."""

    def __init__(self, window_s: float, max_cost: int):
        self.window_s, self.max_cost = window_s, max_cost
        self.requests = 0  # requests submitted
        self.model_calls = 0  # calls of a Work (merged requests count once)
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
        self._queue.put_nowait(_Job(key, list(texts), list(costs), work, future))
        return await future

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
        try:
            results = await self._run(pieces[0][0].work, texts)
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

    async def _run(self, work: Work, texts: list[str]) -> Sequence[Any]:
        self.model_calls += 1
        return await self.call(work, texts)
