"""Prometheus metrics of the API process (``GET /metrics``, prometheus-client's text format).

Counted as the read model applies run-events (each event once: the projection dedupes by
event_id), so they count what this process has seen since it started, like any Prometheus
counter; a rebuilt read model counts the history it re-reads.

- ``cronlog_ticks_skipped_total{reason}``: ticks not fired (``TickSkipped``), by reason;
  ``queue_full`` is the one overload causes (issue 13: delay, never drop; past a job's
  ``max_queued_runs`` the tick is skipped and counted here).
- ``cronlog_runs_queued_total``: runs that waited for a slot under ``max_active_runs``.
- ``cronlog_run_events_total{type}``: run-events applied, by type.
"""

from __future__ import annotations

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest

from cronlog import events as ev

REGISTRY = CollectorRegistry()
TICKS_SKIPPED = Counter(
    "cronlog_ticks_skipped", "Ticks not fired, by reason", ["reason"], registry=REGISTRY
)
RUNS_QUEUED = Counter("cronlog_runs_queued", "Runs queued under max_active_runs", registry=REGISTRY)
RUN_EVENTS = Counter(
    "cronlog_run_events", "Run-events applied, by type", ["type"], registry=REGISTRY
)

router = APIRouter()


def count(event: ev.Event) -> None:
    """Count one newly applied run-event."""
    RUN_EVENTS.labels(type(event).__name__).inc()
    if isinstance(event, ev.TickSkipped):
        TICKS_SKIPPED.labels(event.reason.value).inc()
    elif isinstance(event, ev.RunQueued):
        RUNS_QUEUED.inc()


@router.get("/metrics", include_in_schema=False)
def metrics() -> Response:
    """Return the metrics in Prometheus' text exposition format."""
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)
