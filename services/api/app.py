"""The FastAPI application: ``create_app`` wires settings, the read model and the command producer.

Kafka parts are created in the lifespan unless passed in, so an app built without entering its
lifespan (``TestClient(app)`` outside ``with``) serves validation errors and 503s without a broker.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

from confluent_kafka import Producer
from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from services.api import console
from services.api.access.auth import Authenticator
from services.api.access.headers import SecurityHeaders
from services.api.readmodel import metrics_live, paging
from services.api.readmodel import retention as history
from services.api.readmodel.pruner import HistoryPruner
from services.api.readmodel.reader import ReadModel
from services.api.routes import backfill as backfill_api
from services.api.routes import health, logs, operate, reads, tenants, workers, writes
from services.api.routes import metrics as metrics_route
from services.api.routes.sender import CommandSender
from services.api.settings import ApiSettings
from services.archive.settings import ArchiveSettings
from topology.kafka.topics import Topics

log = logging.getLogger("cronlog.api")


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
    app.include_router(reads.router)
    app.include_router(logs.router)
    app.include_router(workers.router)
    app.include_router(tenants.router)
    app.include_router(health.router)
    app.include_router(metrics_route.router)
    app.include_router(console.router)
    app.add_middleware(SecurityHeaders)
    return app
