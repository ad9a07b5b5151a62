"""``MicroBatcher``: requests that arrive together become one model call, off the event loop.

Each request (a list of texts) is queued with a *key* saying which requests may share a call
(same model, same decoding settings) and the work to do. The collector waits ``window_s``
after the first request of a round, takes everything queued by then, groups it by key and
runs each group in chunks of at most ``max_tokens`` source tokens: one call per chunk, on
one worker thread (the model is not shared between threads; torch parallelises inside the
call). Requests that arrive while a call runs are queued for the next round, so under load
rounds grow towards ``max_tokens`` and throughput approaches offline batching.

A call that raises is retried request by request, so one bad request fails alone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

Work = Callable[[list[str]], Sequence[Any]]  # texts -> one result per text, in order


@dataclass
class _Job:
    key: Hashable
    texts: list[str]
    tokens: int
    work: Work
    future: asyncio.Future


class MicroBatcher:
    """Start with ``await start()`` inside the serving event loop, ``await stop()`` at the end."""

    def __init__(self, window_s: float, max_tokens: int):
        self.window_s, self.max_tokens = window_s, max_tokens
        self.requests = 0  # requests submitted
        self.model_calls = 0  # calls of a Work (merged requests count once)
        self._executor: ThreadPoolExecutor | None = None
        self._queue: asyncio.Queue[_Job] | None = None
        self._task: asyncio.Task | None = None

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

    async def submit(self, key: Hashable, texts: list[str], tokens: int, work: Work) -> list:
        """Results of ``work(texts)``, computed together with other requests of the same key."""
        if self._queue is None:
            raise RuntimeError("MicroBatcher.submit before start()")
        future = asyncio.get_running_loop().create_future()
        self.requests += 1
        self._queue.put_nowait(_Job(key, texts, tokens, work, future))
        return await future

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` alone on the model's worker thread (not merged with others)."""
        if self._executor is None:
            raise RuntimeError("MicroBatcher.call before start()")
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    # ------------------------------------------------------------ the collector
    async def _collect(self) -> None:
        assert self._queue is not None
        while True:
            jobs = [await self._queue.get()]
            if self.window_s > 0:
                await asyncio.sleep(self.window_s)  # the collection window
            while not self._queue.empty():
                jobs.append(self._queue.get_nowait())
            for chunk in self.chunks(jobs):
                await self._execute(chunk)

    def chunks(self, jobs: list[_Job]) -> list[list[_Job]]:
        """Jobs grouped by key (first come first), each group cut into runs of at most
        ``max_tokens`` tokens; a job larger than that runs alone."""
        groups: dict[Hashable, list[list[_Job]]] = {}
        for job in jobs:
            runs = groups.setdefault(job.key, [[]])
            if runs[-1] and sum(j.tokens for j in runs[-1]) + job.tokens > self.max_tokens:
                runs.append([])
            runs[-1].append(job)
        return [run for runs in groups.values() for run in runs]

    async def _execute(self, chunk: list[_Job]) -> None:
        live = [j for j in chunk if not j.future.done()]  # a client may have gone away
        if not live:
            return
        texts = [t for j in live for t in j.texts]
        try:
            results = await self._run(live[0].work, texts)
        except Exception as e:
            if len(live) > 1:  # find the culprit: the others still get their answers
                for job in live:
                    await self._execute([job])
                return
            log.exception("model call failed")
            _settle(live[0].future, error=e)
            return
        start = 0
        for job in live:
            _settle(job.future, result=list(results[start : start + len(job.texts)]))
            start += len(job.texts)

    async def _run(self, work: Work, texts: list[str]) -> Sequence[Any]:
        self.model_calls += 1
        return await self.call(work, texts)


def _settle(future: asyncio.Future, result: Any = None, error: BaseException | None = None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
