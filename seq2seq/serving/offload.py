"""Document work off the server's process: reading an uploaded document for its
sentences, and writing it back with their translations, each in a child process.

A megabyte of hostile markup takes seconds of pure Python; in a thread it would hold the
GIL against the event loop, and a thread cannot be stopped, so work past the time limit
would run on after its 503. A child process leaves ``/health`` and other requests
answering, and is killed when its request is cancelled (the time limit, a client that
hangs up, a shutdown). Children are forked from a fork server (a clean process that has
already imported the document modules: a start costs milliseconds, and the server's
threads are never forked); ``spawn`` where there is none (Windows).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import threading
from collections.abc import Callable

from seq2seq.documents import DocumentError, translate_document
from seq2seq.documents.align import Aligned
from seq2seq.documents.inline import sentence_splitter

PRELOAD = ["seq2seq.documents", "seq2seq.serving.offload"]


def _context():
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    if "forkserver" in methods:
        ctx.set_forkserver_preload(PRELOAD)
    return ctx


class WorkFailed(RuntimeError):
    """The child ended without an answer, or failed on something other than the document."""


def _child(conn) -> None:
    try:
        fn, args = conn.recv()
        answer = (True, fn(*args))
    except DocumentError as e:  # the upload's fault: its one-line message goes to the client
        answer = (False, str(e))
    except BaseException as e:  # noqa: BLE001 -- anything else is the server's: named, not shown
        answer = (None, type(e).__name__)
    conn.send(answer)
    conn.close()


class DocumentWork:
    """Child processes for document work, at most ``workers`` at a time (the rest wait their
    turn, within their request's time limit). ``running`` counts live children; ``started``
    and ``stopped`` (killed before they answered) count since the server started."""

    def __init__(self, workers: int | None = None):
        self.workers = workers or min(4, os.cpu_count() or 1)
        self.running = self.started = self.stopped = 0
        self._ctx = _context()
        self._turns: asyncio.Semaphore | None = None  # made on the server's loop

    def warm(self) -> None:
        """Start the fork server and let it import the document modules now, not in the
        first document's time (blocking: call it off the event loop)."""
        proc = self._ctx.Process(target=int, daemon=True)  # a child that does nothing
        proc.start()
        proc.join()

    async def run(self, fn: Callable, *args):
        """``fn(*args)`` in a child process (``fn`` and ``args`` picklable); its
        :class:`DocumentError` raised here, any other failure as :class:`WorkFailed`. When
        the awaiting task is cancelled the child is killed at once."""
        self._turns = self._turns or asyncio.Semaphore(self.workers)
        async with self._turns:
            job = _Job(self._ctx, fn, args)
            self.running, self.started = self.running + 1, self.started + 1
            life = asyncio.ensure_future(asyncio.to_thread(job))
            life.add_done_callback(self._ended)
            try:
                ok, value = await asyncio.shield(life)  # cancelled: the thread sees the kill
            except asyncio.CancelledError:
                job.kill()
                self.stopped += 1
                raise
        if ok is None:
            raise WorkFailed(f"document work failed: {value}")
        if not ok:
            raise DocumentError(value)
        return value

    def _ended(self, life: asyncio.Future) -> None:
        self.running -= 1  # the child is reaped
        if not life.cancelled():
            life.exception()  # read: a killed child's WorkFailed is expected, not news


class _Job:
    """One child's life, lived in a thread: started (a fork server may still be importing:
    seconds on a busy machine, never on the event loop), sent its work, its answer awaited,
    then reaped. :meth:`kill` may come at any point of it, from the event loop."""

    def __init__(self, ctx, fn: Callable, args: tuple):
        self.conn, self._theirs = ctx.Pipe()
        self.proc = ctx.Process(target=_child, args=(self._theirs,), daemon=True)
        self.work = (fn, args)
        self._started, self._killed = threading.Event(), threading.Event()

    def __call__(self) -> tuple:
        try:
            self.proc.start()
            self._started.set()
            self._theirs.close()
            if self._killed.is_set():  # killed while it started
                self.proc.kill()
            self.conn.send(self.work)
            return self.conn.recv()
        except (EOFError, OSError):  # killed (cancelled, or out of memory) before it answered
            self.proc.join()
            raise WorkFailed("document work ended without an answer (exit code "
                             f"{self.proc.exitcode})") from None
        finally:
            if self._started.is_set():
                self.proc.join()
            self.conn.close()

    def kill(self) -> None:
        self._killed.set()
        if self._started.is_set():
            self.proc.kill()


# ------------------------------------------------------------ the work, run in a child
def document_sentences(data: bytes, filename: str, lang: str | None) -> list[str]:
    """The sentences of a document, in order (what its translator will be asked)."""
    asked: list[str] = []

    def record(sentences: list[str]) -> list[Aligned]:
        asked.extend(sentences)
        return [Aligned(s) for s in sentences]

    translate_document(data, filename, record, lang)
    return asked


def rebuild_document(data: bytes, filename: str, done: list[Aligned], split_lang: str | None,
                     lang: str, target: str) -> bytes:
    """The document written with ``done`` (the translations of its sentences, cut in
    ``split_lang`` as :func:`document_sentences` cut them), labelled from ``lang`` to
    ``target``."""
    return translate_document(data, filename, lambda _: done, lang, sentence_splitter(split_lang),
                              target)
