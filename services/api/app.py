"""The FastAPI application: ``create_app`` wires settings, the read model and the command producer.

Kafka parts are created in the lifespan unless passed in, so an app built without entering its
lifespan (``TestClient(app)`` outside ``with``) serves validation errors and 503s without a broker.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Protocol

from confluent_kafka import Producer
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from cronlog.vocabulary import RunTrigger
from services.api import console
from services.api.access.auth import Authenticator, Caller, principal
from services.api.access.headers import SecurityHeaders
from services.api.access.scope import visible_job, visible_run
from services.api.readmodel import listings, metrics_live, paging
from services.api.readmodel import retention as history
from services.api.readmodel.paging import LIMIT_DOC, MAX_PAGE, Cursor
from services.api.readmodel.pruner import HistoryPruner
from services.api.readmodel.reader import ReadModel
from services.api.routes import backfill as backfill_api
from services.api.routes import logs, operate, tenants, workers, writes
from services.api.routes import metrics as metrics_route
from services.api.routes.sender import CommandSender
from services.api.settings import ApiSettings
from services.api.shapes.definition import Instant
from services.api.shapes.responses import (
    JobList,
    JobOut,
    RunList,
    RunOut,
    SkippedList,
    TickList,
    documented,
)
from services.archive.settings import ArchiveSettings
from topology.kafka.topics import Topics

log = logging.getLogger("cronlog.api")
reads = APIRouter(prefix="/api/v1", dependencies=[Depends(principal)])
health = APIRouter()


def _read_model(request: Request) -> ReadModel:
    rm: ReadModel | None = request.app.state.read_model
    if rm is None:
        raise HTTPException(503, "the read model is not running")
    return rm


@reads.get("/jobs", response_model=JobList, responses=documented(503))
def list_jobs(
    request: Request,
    caller: Caller,
    status: Annotated[str | None, Query(pattern="^(active|paused|deleted)$")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description=LIMIT_DOC)] = 100,
    cursor: Cursor = None,
) -> Any:
    """The caller's tenant's jobs (deleted ones included, with ``status: deleted``), ordered by
    job_id, a page at a time: ``next_cursor`` (null on the last page) goes in ``cursor``."""
    rm = _read_model(request)
    after = _position(cursor, "jobs", "", listings.JOB_POSITION)
    page = listings.jobs_page(
        rm.store, limit=limit, after=after, status=status, visible=caller.sees
    )
    return {"jobs": page.rows, "next_cursor": _next(page, "jobs", "")}


@reads.get("/jobs/{job_id}", response_model=JobOut, responses=documented(404, 503))
def get_job(job_id: str, request: Request, caller: Caller) -> Any:
    """One job: definition, status, next_run_at, counts, last run."""
    return visible_job(_read_model(request), caller, job_id)


@reads.get("/jobs/{job_id}/runs", response_model=RunList, responses=documented(404, 503))
def list_runs(
    job_id: str,
    request: Request,
    caller: Caller,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description=LIMIT_DOC)] = 20,
    cursor: Cursor = None,
    state: Annotated[
        listings.RunState | None, Query(description="Only runs in this state.")
    ] = None,
    trigger: Annotated[RunTrigger | None, Query(description="Only runs this started.")] = None,
    since: Annotated[Instant | None, Query(description="scheduled_for at or after.")] = None,
    until: Annotated[Instant | None, Query(description="scheduled_for before.")] = None,
) -> Any:
    """A job's runs, newest scheduled_for first (ties by run_id), a page of at most ``limit``
    at a time: ``next_cursor`` (null on the last page) goes in ``cursor``. Filters: ``state``,
    ``trigger``, ``since <= scheduled_for < until`` (ISO-8601 with an offset). A filtered page
    may hold fewer than ``limit`` runs and still carry a ``next_cursor``. Runs pruned by the hot
    history retention (``CRONLOG_HISTORY_HOT_DAYS``) are not listed."""
    rm = _read_model(request)
    visible_job(rm, caller, job_id)
    after = _position(cursor, "runs", job_id, listings.RUN_POSITION)
    where = listings.RunFilter(
        state=state, trigger=trigger.value if trigger else None, since=since, until=until
    )
    page = listings.runs_page(rm.store, job_id, limit=limit, after=after, where=where)
    return {"job_id": job_id, "runs": page.rows, "next_cursor": _next(page, "runs", job_id)}


@reads.get("/jobs/{job_id}/ticks", response_model=TickList, responses=documented(404, 503))
def list_ticks(
    job_id: str,
    request: Request,
    caller: Caller,
    count: Annotated[int, Query(ge=1, le=1000)] = 10,
    after: Annotated[Instant | None, Query()] = None,
) -> Any:
    """Preview: the job's next ``count`` ticks strictly after ``after`` (default: now).

    Computed from the job's current definition with the scheduler's own functions (``H``
    hashed on the job_id, the job's DST policies), each as ``{utc, local}`` where ``local``
    is the wall time in the job's zone with its offset. A once job previews its ``run_at`` if
    after ``after``; manual and deleted jobs preview nothing; a paused job's ticks are shown.
    """
    rm = _read_model(request)
    visible_job(rm, caller, job_id)
    ticks = rm.ticks(job_id, after or datetime.now(UTC), count)
    if ticks is None:
        raise HTTPException(404, f"job {job_id!r} not found")
    return {"job_id": job_id, "ticks": ticks}


@reads.get("/jobs/{job_id}/skipped", response_model=SkippedList, responses=documented(404, 503))
def list_skipped(
    job_id: str,
    request: Request,
    caller: Caller,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Any:
    """A job's skipped ticks (TickSkipped: scheduled_for, reason, at), newest first."""
    rm = _read_model(request)
    visible_job(rm, caller, job_id)
    return {"job_id": job_id, "skipped": rm.skipped(job_id, limit)}


@reads.get("/runs/{run_id}", response_model=RunOut, responses=documented(404, 503))
def get_run(run_id: str, request: Request, caller: Caller) -> Any:
    """One run: state, attempt, lease, exit code, output tail, timings, trigger lag."""
    return visible_run(_read_model(request), caller, run_id)


def _position(cursor: str | None, kind: str, scope: str, shape: re.Pattern[bytes]) -> bytes | None:
    """Return the position of ``cursor`` (None: first page); 422 naming ``cursor`` if bad."""
    if cursor is None:
        return None
    try:
        return paging.decode(cursor, kind, scope, shape)
    except paging.BadCursor as exc:
        raise paging.invalid_cursor(exc, cursor) from exc


def _next(page: paging.Page, kind: str, scope: str) -> str | None:
    pos = page.next_position
    return paging.encode(kind, scope, pos) if pos is not None else None


def _archive_lookup() -> history.ArchiveLookup:
    """Return the cold archive's run lookup. Its settings are read now (a bad
    ``CRONLOG_ARCHIVE_*`` stops the start); pyarrow is imported at the first lookup."""
    settings = ArchiveSettings()
    found: list[history.ArchiveLookup] = []

    def lookup(run_id: str) -> dict[str, Any] | None:
        if not found:
            from services.api.readmodel.archived import ArchivedRuns

            found.append(ArchivedRuns(settings))
        return found[0](run_id)

    return lookup


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


@health.get("/healthz", responses={503: {}})
def healthz(request: Request) -> Any:
    """Liveness: 200 while the process and its consumer threads make progress; 503 (restart
    the process) when one died or has not gone round its loop for ``api_stall_s`` seconds."""
    stall_s = request.app.state.settings.api_stall_s
    stuck = [m.thread_name for m in _models(request) if m.stuck(stall_s)]
    if stuck:
        return JSONResponse({"status": "stuck", "threads": stuck}, status_code=503)
    return {"status": "ok"}


@health.get("/readyz", responses={503: {}})
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


async def _validation_error(_request: Request, exc: Exception) -> JSONResponse:
    """422 with FastAPI's usual shape, whatever the offending input holds.

    FastAPI's own handler fails with a 500 when the rejected input cannot be written as JSON
    (a ``NaN`` number): inputs are echoed as strings then.
    """
    errors = exc.errors() if isinstance(exc, RequestValidationError) else []
    safe = [
        {
            **e,
            "input": _json_safe(e.get("input")),
            "ctx": {k: str(v) for k, v in e.get("ctx", {}).items()},
        }
        if "ctx" in e
        else {**e, "input": _json_safe(e.get("input"))}
        for e in errors
    ]
    return JSONResponse(status_code=422, content={"detail": jsonable_encoder(safe)})


def _json_safe(value: Any) -> Any:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return repr(value)
    return value


def _pruner(
    settings: ApiSettings, read_model: ReadModel, log_model: logs.LogModel | None
) -> HistoryPruner | None:
    """Start the hot-history pruner unless history is kept forever (``history_hot_days`` 0)."""
    if settings.history_hot_days <= 0:
        return None
    if settings.history_archive_lookup:
        archive = ArchiveSettings()
        needed = archive.archive_hot_window + timedelta(days=1) + archive.archive_interval
        if timedelta(days=settings.history_hot_days) < needed:
            log.warning(
                "hot history shorter than the archive's reach: a pruned run may not be "
                "archived yet (404 until its day is)",
                extra={
                    "action": "history.hot_window_short",
                    "hot_days": settings.history_hot_days,
                    "needed_days": round(needed / timedelta(days=1), 3),
                },
            )
    pruner = HistoryPruner(
        read_model,
        timedelta(days=settings.history_hot_days),
        interval_s=settings.history_prune_interval_s,
        batch_size=settings.history_prune_batch,
        logs=log_model.store if log_model is not None else None,
    )
    pruner.start()
    return pruner


def create_app(
    settings: ApiSettings | None = None,
    read_model: ReadModel | None = None,
    producer: Producer | None = None,
    log_model: logs.LogModel | None = None,
    worker_directory: workers.WorkerDirectory | None = None,
    authenticator: Authenticator | None = None,
) -> FastAPI:
    """Build the API.

    Args:
        settings: defaults to ``ApiSettings()`` (environment).
        read_model: a started ReadModel to use (the caller owns its lifecycle); when None, the
            lifespan opens one at ``settings.state_path()``, starts and stops it.
        producer: a confluent-kafka Producer for commands; when None, the lifespan creates one
            from ``settings.producer_config()``.
        log_model: a started LogModel (task logs) the caller owns; when None, the lifespan
            opens one at ``settings.logs_state_path()``, starts and stops it.
        worker_directory: a WorkerDirectory (worker heartbeats) the caller owns; when None,
            the lifespan makes one, starts and stops it.
        authenticator: checks bearer tokens; default ``settings.authenticator()``.

    Returns:
        The FastAPI app (OpenAPI at /openapi.json).
    """
    settings = settings or ApiSettings()
    paging.use_key(settings.api_cursor_key.get_secret_value())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        log.info("api starting", extra={"action": "api.start", "settings": settings.redacted()})
        own_model = app.state.read_model is None
        if own_model:
            app.state.read_model = ReadModel(
                settings, settings.state_path(), fault=settings.api_test_fault
            )
            if settings.history_archive_lookup:
                app.state.read_model.archived = _archive_lookup()
        # before the read model counts anything: the job label cap holds from the first event
        collector = metrics_live.attach(
            app.state.read_model.store,
            max_jobs=settings.metrics_max_jobs,
            stalled_s=settings.api_stalled_dag_s,
            history_s=settings.metrics_history_s,
        )
        if own_model:
            app.state.read_model.start()
        own_logs = app.state.log_model is None
        if own_logs:
            app.state.log_model = logs.LogModel(settings, settings.logs_state_path())
            app.state.log_model.start()
        own_workers = app.state.workers is None
        if own_workers:
            app.state.workers = workers.WorkerDirectory(settings)
            app.state.workers.start()
        pruner = _pruner(settings, app.state.read_model, app.state.log_model)
        if app.state.sender is None:
            app.state.sender = CommandSender(
                Producer(settings.producer_config()), Topics.of(settings).commands
            )
        try:
            yield
        finally:
            metrics_live.detach(collector)
            if pruner is not None:
                pruner.stop()
            app.state.sender.close()
            if own_model:
                app.state.read_model.stop()
            if own_logs:
                app.state.log_model.stop()
            if own_workers:
                app.state.workers.stop()

    app = FastAPI(
        title="cronlog",
        version="0.1.0",
        lifespan=lifespan,
        description="Distributed cron on a Kafka log: jobs, runs, triggers.",
        # FastAPI's own streaming cap (Starlette's RequestBodyLimitMiddleware): 413 before parsing
        max_body_size=settings.api_max_body_bytes,
    )
    app.state.settings = settings
    app.state.authenticator = authenticator or settings.authenticator()
    app.state.admission = tenants.Admission(settings.api_tenants_file)
    app.state.read_model = read_model
    app.state.log_model = log_model
    app.state.workers = worker_directory
    app.state.sender = (
        CommandSender(producer, Topics.of(settings).commands) if producer is not None else None
    )
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.include_router(writes.router)
    app.include_router(backfill_api.router)
    app.include_router(operate.router)
    app.include_router(reads)
    app.include_router(logs.router)
    app.include_router(workers.router)
    app.include_router(tenants.router)
    app.include_router(health)
    app.include_router(metrics_route.router)
    app.include_router(console.router)
    app.add_middleware(SecurityHeaders)
    return app
