"""Live updates: ``GET /console/stream`` (server-sent events) and the console's static files.

The stream says ``event: changed`` whenever the read model applied new run-events (its
``version`` moved; no Kafka consumer per client); htmx's SSE extension then re-fetches the
page's live part. At most ``api_console_max_streams`` streams are open at once (one more is a
503); every stream ends when the server is asked to exit (``shutdown_streams``), so uvicorn's
graceful shutdown does not wait on them.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path

from fastapi import APIRouter, FastAPI, HTTPException, Request, Response
from fastapi.responses import FileResponse, StreamingResponse
from starlette.types import Receive, Scope, Send

from services.api.console.pages import read_model
from services.api.console.session import ApiCaller, authenticate

router = APIRouter(include_in_schema=False)
STATIC = Path(__file__).parent / "static"
FILES = {
    "htmx.min.js": "text/javascript",
    "htmx-ext-sse.min.js": "text/javascript",
    "console.css": "text/css",
    "times.js": "text/javascript",
}
"""The static files served, with their media types (nothing else under static/ is)."""
WAKE_S = 1.0
"""How often a quiet stream checks whether the server is exiting, seconds."""
KEEPALIVE_S = 15.0
"""A quiet stream sends a comment this often, seconds (proxies drop idle connections)."""
COALESCE_S = 0.2
"""After a change, wait this long so a burst of batches becomes one event, seconds."""
MIN_GAP_S = 1.0
"""At most one event per this many seconds per stream (each makes its page re-render)."""
REAUTH_S = 30.0
"""A stream checks its caller's token again this often, seconds: a revoked or expired token's
stream ends (its page then asks to sign in)."""


def _closing(app: FastAPI) -> threading.Event:
    closing: threading.Event | None = getattr(app.state, "console_closing", None)
    if closing is None:
        closing = app.state.console_closing = threading.Event()
    return closing


def shutdown_streams(app: FastAPI) -> None:
    """End every open stream of ``app`` (within ``WAKE_S``) and refuse new ones (503).

    Safe from a signal handler: it only sets a ``threading.Event``.
    """
    _closing(app).set()


class _Counted(StreamingResponse):
    """A stream that gives its slot back however it ends (even never started)."""

    def __init__(self, body: AsyncIterator[bytes], app: FastAPI) -> None:
        super().__init__(
            body,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )
        self.owner = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.owner.state.console_streams -= 1


@router.get("/console/stream")
async def stream(request: Request, caller: ApiCaller, since: int | None = None) -> Response:
    """Server-sent events: ``changed`` (data: the read model's version) after a change, at
    most one a second.

    ``since``: the version the page was rendered at; a stream that starts past it says
    ``changed`` at once (what changed between the page and its stream is not missed)."""
    rm, app = read_model(request), request.app
    closing = _closing(app)
    open_now = getattr(app.state, "console_streams", 0)
    if closing.is_set():
        raise HTTPException(503, "the server is shutting down")
    if open_now >= app.state.settings.api_console_max_streams:
        raise HTTPException(503, f"too many live-update streams ({open_now})", {"Retry-After": "5"})
    app.state.console_streams = open_now + 1

    async def events() -> AsyncIterator[bytes]:
        seen, quiet = (rm.version if since is None else since), 0.0
        loop = asyncio.get_running_loop()
        last = loop.time() - MIN_GAP_S
        checked = loop.time()
        yield b"retry: 2000\n\n"
        while not closing.is_set():
            if loop.time() - checked >= REAUTH_S:
                if authenticate(request) is None:
                    return  # the token was revoked or expired
                checked = loop.time()
            version = await rm.changed(seen, WAKE_S)
            if version == seen:
                quiet += WAKE_S
                if quiet >= KEEPALIVE_S:
                    quiet = 0.0
                    yield b": keepalive\n\n"
                continue
            await asyncio.sleep(max(COALESCE_S, last + MIN_GAP_S - loop.time()))
            seen, quiet, last = rm.version, 0.0, loop.time()
            yield b"event: changed\ndata: %d\n\n" % seen

    return _Counted(events(), app)


@router.get("/console/static/{name}")
def static(name: str) -> Response:
    """A vendored or hand-written static file (see static/README.md for versions)."""
    if name not in FILES:
        raise HTTPException(404, f"no static file {name!r}")
    return FileResponse(
        STATIC / name, media_type=FILES[name], headers={"Cache-Control": "max-age=3600"}
    )
