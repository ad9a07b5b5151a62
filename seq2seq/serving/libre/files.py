"""LibreTranslate's file routes: ``POST /translate_file`` (multipart: ``file``, ``source``,
``target``, ``api_key``) answers ``{"translatedFileUrl": ".../download_file/<name>"}``, and
``GET /download_file/<name>`` sends the translated file (an attachment named as LibreTranslate
names it: ``NAME_<target>.EXT``, RFC 6266's ``filename*`` for a name beyond ASCII, the media
type of its extension). Documents are ``seq2seq.documents``' formats (.txt, .html, .htm,
.docx, .srt, .odt, .odp, .pptx, .epub).

Bounded like ``/translate``: the upload by the body limit, the document's sentences by the
work limit (all of them together), the whole request by the time limit. Translated files
live in a private temporary folder (removed when the server exits), at most
``KEEP_FILES`` files and ``KEEP_BYTES`` bytes, each for ``KEEP_SECONDS``; the oldest go first.
"""

from __future__ import annotations

import re
import tempfile
import time
import unicodedata
import uuid
from collections import OrderedDict
from pathlib import Path
from urllib.parse import quote

from fastapi import HTTPException, Request
from fastapi.responses import FileResponse

from seq2seq.documents import SUFFIXES, DocumentError, check_format, suffix
from seq2seq.documents.align import Aligned, flag_summary
from seq2seq.serving import offload
from seq2seq.serving.libre import bad, limits_as_400
from seq2seq.serving.libre.fields import form_fields, required
from seq2seq.serving.limits import bounded
from seq2seq.serving.markup import run_aligned

KEEP_FILES, KEEP_BYTES, KEEP_SECONDS = 100, 256 * 2**20, 3600
MAX_NAME_BYTES = 200  # a download's name in UTF-8 (file systems allow 255)
SUPPORTED = list(SUFFIXES)
MEDIA = {".txt": "text/plain; charset=utf-8", ".html": "text/html; charset=utf-8",
         ".htm": "text/html; charset=utf-8", ".srt": "application/x-subrip",
         ".docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
         ".pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
         ".odt": "application/vnd.oasis.opendocument.text",
         ".odp": "application/vnd.oasis.opendocument.presentation", ".epub": "application/epub+zip"}


class Store:
    """Translated files waiting to be downloaded, bounded in count, bytes and age. On disk a
    file is named by its random id alone: an upload's name never reaches the file system."""

    def __init__(self):
        # removed by close() (the server's shutdown), else by the interpreter's exit
        self._dir = tempfile.TemporaryDirectory(prefix="seq2seq-files-")
        self.path = Path(self._dir.name)
        self.files: OrderedDict[str, tuple[Path, int, float]] = OrderedDict()
        self.closed = False

    def close(self) -> None:
        """The folder and every file in it removed: after SIGTERM the process ends without
        running its exit handlers, so the server's shutdown calls this."""
        self.closed = True
        self.files.clear()
        self._dir.cleanup()

    def put(self, download: str, data: bytes) -> str:
        """``data`` kept under a new name, ``<id>.<download>`` (the download's name after the
        first dot, as LibreTranslate's are); 503 once the store is closed."""
        if self.closed:
            raise HTTPException(503, "the server is shutting down", {"Retry-After": "5"})
        key = uuid.uuid4().hex
        path = self.path / key
        path.write_bytes(data)
        name = f"{key}.{download}"
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


# Never in a download's name: what names a path or breaks a header, and what file systems
# refuse (Windows' reserved characters); letters of any script stay.
_UNSAFE = re.compile(r'[\\/:*?"<>|]+')


def download_name(filename: str, target: str) -> str:
    """What a translation of the upload ``filename`` into ``target`` downloads as:
    LibreTranslate's ``NAME_<target>.EXT`` (``brief.docx`` -> ``brief_en.docx``), the base
    name only, without control or reserved characters, at most ``MAX_NAME_BYTES`` in UTF-8."""
    base = unicodedata.normalize("NFC", Path(filename.replace("\\", "/")).name)
    base = "".join(c if unicodedata.category(c)[0] != "C" else " " for c in base)
    ext = suffix(base) and base[-len(suffix(base)):]
    end = _UNSAFE.sub("_", f"_{target}{ext}")
    stem = " ".join(_UNSAFE.sub("_", base[:len(base) - len(ext)]).split()).strip("._ ")
    budget = max(MAX_NAME_BYTES - len(end.encode()), 0)  # cut in bytes: a name may be megabytes
    return (stem.encode()[:budget].decode(errors="ignore").rstrip("._ ") or "file") + end


def content_disposition(name: str) -> str:
    """RFC 6266: an attachment named ``name``; beyond printable ASCII, as ``filename*`` (RFC
    8187's UTF-8), after an ASCII ``filename`` for clients that read only that (accents
    dropped, other letters as ``_``)."""
    if name.isascii() and name.isprintable():
        return f'attachment; filename="{name}"'
    folded = "".join(c for c in unicodedata.normalize("NFKD", name) if not unicodedata.combining(c))
    plain = re.sub(r"[^\x20-\x7e]+", "_", folded)
    plain = plain if plain[:1].isalnum() else "file" + re.sub(r"^_+", "_", plain)
    return f"attachment; filename=\"{plain}\"; filename*=UTF-8''{quote(name, safe='')}"


class FileRoutes:
    def __init__(self, libre):
        self.libre, self.store = libre, Store()

    async def translate_file(self, request: Request) -> dict:
        p, form = await form_fields(request)
        file = form.get("file") if form is not None else None
        self.libre.admit(request, p.get("api_key"))
        if not file or isinstance(file, str):  # a text field named "file" is no upload
            raise bad("missing file parameter")
        required(p, "source", "target")
        if not file.filename:
            raise bad("empty file")
        if suffix(file.filename) not in SUPPORTED:
            raise bad("file format not supported")
        try:
            check_format(file.filename)
        except DocumentError as e:
            raise bad(str(e)) from None
        source, target = p["source"].lower(), p["target"].lower()
        download = download_name(file.filename, target)  # before the work: it cannot fail after
        data = await file.read()
        work = self._translate(data, file.filename, source, target)
        done, flags = await bounded(request, work, self.libre.server.cfg.request_timeout_s)
        name = self.store.put(download, done)
        base = str(request.url.replace(query=None)).rsplit("/translate_file", 1)[0]
        # "flags": ours, beside LibreTranslate's one field (its clients read that one alone)
        return {"translatedFileUrl": f"{base}/download_file/{quote(name, safe='')}",
                "flags": flags}

    async def _translate(self, data: bytes, filename: str, source: str,
                         target: str) -> tuple[bytes, dict]:
        """Read the document once for its sentences, translate them on the batcher (merged
        with other requests), then write it with their translations; the document and its
        translations' :func:`flag_summary`. Reading and writing run in a child process
        (:mod:`offload`): the server answers meanwhile, and a cancelled request's child is
        killed."""
        work = self.libre.server.documents
        lang = None if source == "auto" else source
        try:
            asked = await work.run(offload.document_sentences, data, filename, lang)
            if source == "auto":
                source = self.libre.detector.detect(" ".join(asked)[:2000])[0]
            self.libre.check_pair(source, target)
            if source == target or not asked:
                return data, {}
            done = await self._run(asked, source, target)
            written = await work.run(offload.rebuild_document, data, filename, done, lang,
                                     source, target)  # cut as before, labelled from the source found
        except DocumentError as e:
            raise bad(str(e)) from None
        return written, flag_summary(asked, done)

    async def _run(self, sentences: list[str], source: str, target: str) -> list[Aligned]:
        served, direction = self.libre.route(source, target)
        with limits_as_400():
            return await run_aligned(self.libre.server, served, self.libre.decoding(),
                                     sentences, direction)

    def download_file(self, name: str) -> FileResponse:
        path = self.store.get(name)
        if path is None:
            raise HTTPException(404, "Invalid filename: no such translated file (or it expired)")
        download = name.split(".", 1)[1]
        return FileResponse(path, media_type=MEDIA.get(suffix(download), "application/octet-stream"),
                            headers={"Content-Disposition": content_disposition(download)})


def add_file_routes(router, libre) -> FileRoutes:
    """``/translate_file`` and ``/download_file/<name>`` on LibreTranslate's ``router``."""
    routes = FileRoutes(libre)
    router.add_api_route("/translate_file", routes.translate_file, methods=["POST"],
                         summary=f"Translate a document ({', '.join(SUFFIXES)})")
    router.add_api_route("/download_file/{name}", routes.download_file, methods=["GET"],
                         summary="A translated document, by the name /translate_file gave")
    return routes
