"""Health and readiness probes: ``/healthz`` and ``/readyz``.

Liveness of the consumer threads; readiness: the read model caught up, no reader stuck or
failing.
"""

from __future__ import annotations

from typing import Any, Protocol

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from services.api.readmodel.reader import ReadModel

router = APIRouter()


class _Reader(Protocol):
    """What health answers ask of a reader thread (ReadModel, LogModel, WorkerDirectory)."""

    thread_name: str
    liveness: Any

    @property
    def working(self) -> bool: ...

    def stuck(self, max_age_s: float) -> bool: ...


def _models(request: Request) -> list[_Reader]:
    state = request.app.state
    readers = (state.read_model, getattr(state, "log_model", None), getattr(state, "workers", None))
    return [m for m in readers if m is not None]


@router.get("/healthz", responses={503: {}})
def healthz(request: Request) -> Any:
    """Liveness: 200 while the process and its consumer threads make progress; 503 (restart
    the process) when one died or has not gone round its loop for ``api_stall_s`` seconds."""
    stall_s = request.app.state.settings.api_stall_s
    stuck = [m.thread_name for m in _models(request) if m.stuck(stall_s)]
    if stuck:
        return JSONResponse({"status": "stuck", "threads": stuck}, status_code=503)
    return {"status": "ok"}


@router.get("/readyz", responses={503: {}})
def readyz(request: Request) -> Any:
    """Readiness: the read model has consumed up to the end offsets seen at start, and no
    consumer thread (run-events, logs, workers) is stuck or in an episode of broker errors."""
    rm: ReadModel | None = request.app.state.read_model
    models = _models(request)
    stall_s = request.app.state.settings.api_stall_s
    working = all(m.working and not m.stuck(stall_s) for m in models)
    if rm is not None and rm.ready and working:
        return {"status": "ready"}
    body = {
        "status": "catching_up" if working else "unavailable",
        "lag": rm.lag() if rm is not None else None,
        "threads": [m.liveness.status() for m in models],
    }
    return JSONResponse(body, status_code=503)
