"""The app ``seq2seq-serve`` runs: our API (:mod:`api`), LibreTranslate's (:mod:`libre`,
under ``/libretranslate/``), the attention explorer at ``/`` (static files, no build step,
no CDN), the body limit around all of it, and errors in each API's own shape (one handler
for the unexpected ones: :class:`Failures`). With ``--api libretranslate`` LibreTranslate's
API is at the root and ours and the explorer under ``/seq2seq/`` (:class:`Paths`). Every
answer carries CORS headers allowing any origin, and preflights are answered, as
LibreTranslate does: browser pages and extensions call it.

The OpenAPI schema is at ``/openapi.json``; FastAPI's ``/docs`` and ``/redoc`` pages are
off, since their scripts come from a CDN (blank pages offline).
"""

from __future__ import annotations

import asyncio
import logging
import re
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from seq2seq.config import ServeConfig
from seq2seq.serving.api import Server
from seq2seq.serving.libre import FAILED, OURS, PREFIX, error, hint
from seq2seq.serving.libre.routes import add_routes
from seq2seq.serving.limits import BodyLimit
from seq2seq.serving.models import ServedModel

STATIC = Path(__file__).with_name("static")
CORS_MAX_AGE_S = 60 * 60 * 24 * 20  # how long a browser may reuse a preflight (LibreTranslate's)
CORS_METHODS = ["GET", "POST"]
CORS_HEADERS = ["Authorization", "Content-Type", "X-API-Key"]


class Paths:
    """ASGI: repeated slashes merged (``//languages``, from a client given a base URL that
    ends in ``/``; LibreTranslate's server merges them too) and, with ``libre_at_root``, each
    path outside ``OURS`` served by the LibreTranslate route under ``PREFIX``; a path under
    ``OURS`` is ours, with ``OURS`` as its ``root_path`` (the explorer's links stay relative)."""

    def __init__(self, app: ASGIApp, libre_at_root: bool):
        self.app, self.libre_at_root = app, libre_at_root

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = re.sub("/{2,}", "/", scope["path"])
        raw = re.sub(rb"/{2,}", b"/", scope.get("raw_path") or path.encode())
        root = scope.get("root_path", "")
        if self.libre_at_root:
            if path == OURS:  # the explorer's relative links need the slash
                return await RedirectResponse(OURS + "/")(scope, receive, send)
            if path.startswith(OURS + "/"):
                root = OURS
            elif path != PREFIX and not path.startswith(PREFIX + "/"):
                path, raw = PREFIX + path, PREFIX.encode() + raw
        await self.app({**scope, "path": path, "raw_path": raw, "root_path": root}, receive, send)


class Cors(CORSMiddleware):
    """Starlette's CORS (any origin), with a refused preflight (a method or header the server
    does not allow) answered in the asked API's JSON error shape, not as a text/plain line."""

    def __init__(self, app: ASGIApp):
        super().__init__(app, allow_origins=["*"], allow_methods=CORS_METHODS,
                         allow_headers=CORS_HEADERS, expose_headers=["Authorization"],
                         max_age=CORS_MAX_AGE_S)

    def preflight_response(self, request_headers: Headers) -> ASGIApp:
        response = super().preflight_response(request_headers)
        if response.status_code != 400:
            return response
        message = (f"{response.body.decode()}: this server allows the methods "
                   f"{', '.join(CORS_METHODS)} and the headers {', '.join(CORS_HEADERS)}")
        headers = {k: v for k, v in response.headers.items()
                   if k.startswith("access-control-") or k == "vary"}

        async def refused(scope: Scope, receive: Receive, send: Send) -> None:
            await error(scope["path"], 400, message, headers)(scope, receive, send)
        return refused


class Failures:
    """ASGI, inside CORS: an exception no handler took becomes a one-line 500 in its API's
    shape, logged with its traceback. The app's one handler of unexpected exceptions:
    Starlette's (``exception_handler(Exception)``) would answer outside every middleware,
    without CORS headers, so that a page on another origin could not read it."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def sending(message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception as exc:
            if scope["type"] != "http" or started:
                raise
            logging.getLogger("uvicorn.error").exception("request failed: %s", scope["path"])
            await error(scope["path"], 500, f"{FAILED}: {type(exc).__name__}")(
                scope, receive, send)


def create_app(models: dict[str, ServedModel], cfg: ServeConfig | None = None) -> FastAPI:
    """The FastAPI app serving ``models`` (the first is the default of our API)."""
    server = Server(models, cfg or ServeConfig())

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        await server.batcher.start()
        await asyncio.to_thread(server.documents.warm)
        try:
            yield
        finally:
            await server.batcher.stop()
            for close in _app.state.on_shutdown:  # e.g. the translated-file store
                close()

    app = FastAPI(title="seq2seq", summary="Translation and attention weights of seq2seq models",
                  lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.server = server
    app.state.on_shutdown = []
    app.add_middleware(BodyLimit, max_bytes=server.cfg.max_body_bytes,
                       timeout_s=server.cfg.body_timeout_s, render=error)
    app.add_middleware(Failures)
    # added last = outermost: a refused body gets CORS headers too, and paths are final first
    app.add_middleware(Cors)
    app.add_middleware(Paths, libre_at_root=server.cfg.api == "libretranslate")

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        where = hint(request) if exc.status_code in (404, 405) else ""
        return error(request.url.path, exc.status_code, str(exc.detail) + where, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def one_line(request: Request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI's default echoes the input, which may not even be JSON (NaN): name the field
        problems = [_where(e["loc"]) + e["msg"] for e in exc.errors()]
        where = hint(request, getattr(exc, "body", None))
        return error(request.url.path, 422, "; ".join(problems) + where)

    _routes(app, server)
    add_routes(app, server)
    return app


def _where(loc: tuple) -> str:
    if tuple(loc) == ("body",):  # no body at all, or not JSON: say what is expected
        return "body: a JSON object is expected (Content-Type: application/json); "
    return "/".join(str(p) for p in loc[1:]) + ": "


def _routes(app: FastAPI, server: Server) -> None:
    def api_key(request: Request) -> None:
        """With --api-keys, our API takes the key as ``X-API-Key`` or ``?api_key=``."""
        server.authorize(request.headers.get("x-api-key") or request.query_params.get("api_key"))

    keyed = [Depends(api_key)]
    app.post("/translate", summary="Translate texts (one result per text)",
             dependencies=keyed)(server.translate)
    app.post("/attention", summary="Pieces and attention weights of one translation",
             dependencies=keyed)(server.attention)
    app.get("/health", summary="Liveness, models, request and model-call counters")(server.health)
    app.get("/models", summary="The models this server holds (the first is the default)")(
        server.models_json)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/", include_in_schema=False)
    def explorer() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> FileResponse:
        return FileResponse(STATIC / "favicon.svg", media_type="image/svg+xml")
