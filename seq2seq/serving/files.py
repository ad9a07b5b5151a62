"""LibreTranslate's file routes: ``POST /translate_file`` (multipart: ``file``, ``source``,
``target``, ``api_key``) answers ``{"translatedFileUrl": ".../download_file/<name>"}``, and
``GET /download_file/<name>`` sends the translated file once (as an attachment named like
the upload). Documents are ``seq2seq.documents``' formats (.txt, .html, .htm, .docx, .srt).

Bounded like ``/translate``: the upload by the body limit, the document's sentences by the
work limit (all of them together), the whole request by the time limit. Translated files
live in a private temporary folder (removed when the server exits), at most
``KEEP_FILES`` files and ``KEEP_BYTES`` bytes, each for ``KEEP_SECONDS``; the oldest go first.
"""

from __future__ import annotations

import asyncio
import re
import tempfile
import time
import uuid
from collections import OrderedDict
from pathlib import Path

from fastapi import HTTPException, Request
from fastapi.responses import FileResponse

from seq2seq.documents import (
    SUFFIXES,
    Aligned,
    DocumentError,
    check_format,
    suffix,
    translate_document,
)
from seq2seq.serving.limits import bounded
from seq2seq.serving.markup import run_aligned

KEEP_FILES, KEEP_BYTES, KEEP_SECONDS = 100, 256 * 2**20, 3600
SUPPORTED = list(SUFFIXES)
MEDIA = {".txt": "text/plain; charset=utf-8", ".html": "text/html; charset=utf-8",
         ".htm": "text/html; charset=utf-8", ".srt": "application/x-subrip",
         ".docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document"}


def bad(message: str) -> HTTPException:
    return HTTPException(400, f"Invalid request: {message}")


class Store:
    """Translated files waiting to be downloaded, bounded in count, bytes and age."""

    def __init__(self):
        self._dir = tempfile.TemporaryDirectory(prefix="seq2seq-files-")  # removed at exit
        self.files: OrderedDict[str, tuple[Path, int, float]] = OrderedDict()

    def put(self, filename: str, data: bytes) -> str:
        name = f"{uuid.uuid4().hex}.{safe_name(filename)}"
        path = Path(self._dir.name) / name
        path.write_bytes(data)
        self.files[name] = (path, len(data), time.monotonic())
        self._evict()
        return name

    def get(self, name: str) -> Path | None:
        self._evict()
        kept = self.files.get(name)
        return kept[0] if kept else None

    def _evict(self) -> None:
        now = time.monotonic()
        while self.files and (len(self.files) > KEEP_FILES
                              or sum(n for _, n, _ in self.files.values()) > KEEP_BYTES
                              or now - next(iter(self.files.values()))[2] > KEEP_SECONDS):
            _, (path, _, _) = self.files.popitem(last=False)
            path.unlink(missing_ok=True)


def safe_name(filename: str) -> str:
    """The upload's base name with only letters, digits, ``.``, ``-``, ``_`` (werkzeug's
    ``secure_filename`` idea): never a path."""
    base = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(filename.replace("\\", "/")).name).strip("._")
    return base or f"file{suffix(filename)}"


class FileRoutes:
    def __init__(self, libre):
        self.libre, self.store = libre, Store()

    async def _form(self, request: Request):
        """Fields (form over query string, as LibreTranslate reads them) and the upload."""
        values: dict = dict(request.query_params)
        mime = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if mime not in ("multipart/form-data", "application/x-www-form-urlencoded"):
            return values, None
        form = await request.form()
        values.update({k: v for k, v in form.items() if isinstance(v, str)})
        return values, form.get("file")

    async def translate_file(self, request: Request) -> dict:
        p, file = await self._form(request)
        self.libre.server.authorize(p.get("api_key"))
        for name, value in (("file", file), ("source", p.get("source")), ("target", p.get("target"))):
            if not value or (name == "file" and isinstance(value, str)):
                raise bad(f"missing {name} parameter")
        if not file.filename:
            raise bad("empty file")
        if suffix(file.filename) not in SUPPORTED:
            raise bad("file format not supported")
        try:
            check_format(file.filename)
        except DocumentError as e:
            raise bad(str(e)) from None
        data = await file.read()
        source, target = p["source"].lower(), p["target"].lower()
        work = self._translate(data, file.filename, source, target)
        done = await bounded(request, work, self.libre.server.cfg.request_timeout_s)
        name = self.store.put(file.filename, done)
        base = str(request.url.replace(query=None)).rsplit("/translate_file", 1)[0]
        return {"translatedFileUrl": f"{base}/download_file/{name}"}

    async def _translate(self, data: bytes, filename: str, source: str, target: str) -> bytes:
        """Read the document once for its sentences, translate them on the batcher (merged
        with other requests), then write it with their translations."""
        asked: list[str] = []

        def record(sentences: list[str]) -> list[Aligned]:
            asked.extend(sentences)
            return [Aligned(s) for s in sentences]

        try:
            lang = None if source == "auto" else source
            await asyncio.to_thread(translate_document, data, filename, record, lang)
            if source == "auto":
                source = self.libre.detector.detect(" ".join(asked)[:2000])[0]
            self.libre._check_pair(source, target)
            if source == target or not asked:
                return data
            done = await self._run(asked, source, target)
            return await asyncio.to_thread(translate_document, data, filename,
                                           lambda _: done, lang)
        except DocumentError as e:
            raise bad(str(e)) from None

    async def _run(self, sentences: list[str], source: str, target: str) -> list[Aligned]:
        served = self.libre.pairs[(source, target)]
        src, tgt = self.libre.asked[(source, target)]
        direction = {"source_lang": src, "target_lang": tgt} if served.multilingual else {}
        try:
            return await run_aligned(self.libre.server, served, self.libre._decoding(0),
                                     sentences, direction)
        except HTTPException as e:
            raise HTTPException(400 if e.status_code in (413, 422) else e.status_code,
                                e.detail) from None

    def download_file(self, name: str) -> FileResponse:
        path = self.store.get(name)
        if path is None:
            raise HTTPException(404, "Invalid filename: no such translated file (or it expired)")
        download = name.split(".", 1)[1]
        return FileResponse(path, media_type=MEDIA.get(suffix(download), "application/octet-stream"),
                            filename=download)


def add_file_routes(router, libre) -> FileRoutes:
    """``/translate_file`` and ``/download_file/<name>`` on LibreTranslate's ``router``."""
    routes = FileRoutes(libre)
    router.add_api_route("/translate_file", routes.translate_file, methods=["POST"],
                         summary="Translate a document (.txt, .html, .htm, .docx, .srt)")
    router.add_api_route("/download_file/{name}", routes.download_file, methods=["GET"],
                         summary="A translated document, by the name /translate_file gave")
    return routes
