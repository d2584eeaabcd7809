"""Prometheus metrics of the API process (``GET /metrics``, prometheus-client's text format).

Counted as the read model applies run-events (each event once: the projection dedupes by
event_id), so they count what this process has seen since it started, like any Prometheus
counter; a rebuilt read model counts the history it re-reads.

- ``cronlog_ticks_skipped_total{reason}``: ticks not fired (``TickSkipped``), by reason;
  ``queue_full`` is the one overload causes (issue 13: delay, never drop; past a job's
  ``max_queued_runs`` the tick is skipped and counted here).
- ``cronlog_runs_queued_total{reason}``: runs that waited: for a slot under
  ``max_active_runs``, or behind an open circuit (``suspended``).
- ``cronlog_jobs_suspended``: jobs whose circuit is open now (``cronlog.breaker``); alert on
  it being above 0. ``cronlog_circuits_opened_total{reason}``: circuits opened.
- ``cronlog_run_events_total{type}``: run-events applied, by type.
"""

from __future__ import annotations

from fastapi import APIRouter, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    generate_latest,
)

from cronlog import events as ev

REGISTRY = CollectorRegistry()
TICKS_SKIPPED = Counter(
    "cronlog_ticks_skipped", "Ticks not fired, by reason", ["reason"], registry=REGISTRY
)
RUNS_QUEUED = Counter(
    "cronlog_runs_queued", "Runs queued, by reason", ["reason"], registry=REGISTRY
)
SUSPENDED_NOW = Gauge(
    "cronlog_jobs_suspended", "Jobs whose circuit is open (runs queue)", registry=REGISTRY
)
SUSPENSIONS = Counter(
    "cronlog_circuits_opened", "Job circuits opened, by reason", ["reason"], registry=REGISTRY
)
_suspended: set[str] = set()
RUN_EVENTS = Counter(
    "cronlog_run_events", "Run-events applied, by type", ["type"], registry=REGISTRY
)

router = APIRouter()


def count(event: ev.Event, job_id: str = "") -> None:
    """Count one newly applied run-event of ``job_id``."""
    RUN_EVENTS.labels(type(event).__name__).inc()
    if isinstance(event, ev.TickSkipped):
        TICKS_SKIPPED.labels(event.reason.value).inc()
    elif isinstance(event, ev.RunQueued):
        RUNS_QUEUED.labels(event.reason.value).inc()
    elif isinstance(event, ev.JobSuspended):
        SUSPENSIONS.labels(event.reason.value).inc()
        _suspended.add(job_id)
        SUSPENDED_NOW.set(len(_suspended))
    elif isinstance(event, ev.JobUnsuspended | ev.JobDeleted):
        _suspended.discard(job_id)
        SUSPENDED_NOW.set(len(_suspended))


@router.get("/metrics", include_in_schema=False)
def metrics() -> Response:
    """Return the metrics in Prometheus' text exposition format."""
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)
