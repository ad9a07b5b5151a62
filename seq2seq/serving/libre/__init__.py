"""LibreTranslate's HTTP API, so that its clients (``libretranslatepy``, ``deep-translator``,
the npm ``libretranslate`` package, browser extensions, bots, CMS plug-ins) work with
``seq2seq-serve`` unchanged.

Served under ``/libretranslate/`` (a client is given ``http://HOST:PORT/libretranslate/``),
or at the server root with ``--api libretranslate`` (the app's path middleware maps the root
onto ``PREFIX``: every route registered under ``PREFIX`` is at the root then, the file
routes too). Routes, methods, statuses and error texts are LibreTranslate's own:
``POST /translate``, ``POST /detect``, ``GET /languages``, ``GET /frontend/settings``,
``POST /suggest`` (403: suggestions are off), ``GET /spec``, ``GET /health``,
``POST /translate_file`` and ``GET /download_file/<name>``; a wrong method gets 405. Errors
are ``{"error": "..."}``: 400 bad request, 403 API key, 429 rate limit, 500 translation
failure.

This module is the API's surface: where it is served, its error shape, its words (our API
answers in the same words where it has the same errors) and the mapping of our limits'
statuses onto its 400. It imports nothing of the server, so that every module may use it.
The package's other modules: :mod:`.fields` (parameters, read as LibreTranslate reads
them), :mod:`.routes` (its routes, models routed by language pair) and :mod:`.files` (its
file routes).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from fastapi import HTTPException, Request
from fastapi.responses import JSONResponse

PREFIX = "/libretranslate"  # LibreTranslate's API, unless --api libretranslate puts it at /
OURS = "/seq2seq"  # our API and the explorer, with --api libretranslate

MISSING = "Please contact the server operator to get an API key"  # keys
INVALID = "Invalid API key"
SUGGESTIONS_OFF = "Suggestions are disabled on this server."
FAILED = "Cannot translate text"  # any failure no other error names (a 500)

# Routes only LibreTranslate's API has: asked of ours, the answer says where its API is.
LIBRE_ONLY = {"/detect", "/languages", "/frontend/settings", "/suggest", "/spec", "/translate_file"}
FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")


def bad(message: str) -> HTTPException:
    """A 400 for a missing or malformed parameter, in LibreTranslate's words."""
    return HTTPException(400, f"Invalid request: {message}")


def unsupported(what: str) -> HTTPException:
    """A 400 for a language or a format the server does not have."""
    return HTTPException(400, f"{what} is not supported")


def slowdown(limit: int) -> str:
    """A 429's words: ``limit`` requests per minute were reached."""
    return f"Slowdown: {limit} per 1 minute"


@contextmanager
def limits_as_400() -> Iterator[None]:
    """Our limits' 413 (too much work) and 422 (a request the model cannot take) as
    LibreTranslate's 400: its clients know no other status for a refused request."""
    try:
        yield
    except HTTPException as e:
        if e.status_code not in (413, 422):
            raise
        raise HTTPException(400, e.detail, e.headers) from None


def is_libre(path: str) -> bool:
    """Whether ``path`` (after the app's path middleware) is LibreTranslate's API."""
    return path == PREFIX or path.startswith(PREFIX + "/")


def error(path: str, status: int, message: str, headers: dict | None = None) -> JSONResponse:
    """An error as each API words it: LibreTranslate's ``{"error"}``, our ``{"detail"}``."""
    field = "error" if is_libre(path) else "detail"
    return JSONResponse({field: message}, status_code=status, headers=headers)


def hint(request: Request, body: object = None) -> str:
    """Where LibreTranslate's API is, for a LibreTranslate client given our root (its
    routes, or ``q`` sent to our ``/translate``); "" for anything else."""
    path = request.url.path
    asks_libre = path in LIBRE_ONLY or path == "/translate" and (
        "q" in request.query_params or (isinstance(body, dict) and "q" in body)
        or request.headers.get("content-type", "").startswith(FORMS))
    if not asks_libre:
        return ""
    base = str(request.base_url).rstrip("/")
    return (f"; this is seq2seq's own API: give LibreTranslate clients {base}{PREFIX}/ "
            "(or run seq2seq-serve --api libretranslate)")
