"""Prometheus metrics of a worker process (docs/architecture.md, "Scheduler and worker
metrics").

Counted where a worker already learns the fact (an attempt ending, an answer on its replies
partition), once per attempt or answer; busy slots are read when scraped. Served by ``serve``
on ``metrics_port``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, get_args

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from cronlog.vocabulary import FailureKind, RejectReason
from services import metrics_http

Outcome = Literal["succeeded", "failed", "timeout", "cancelled", "released", "lost"]
"""How an attempt ended on this worker: completed (succeeded / failed / timeout), given back
(released: ReleaseTask), or killed after its lease was refused (cancelled: the task instance is
gone, its run cancelled or ended; lost: another epoch holds it, the lease had expired)."""

REGISTRY = CollectorRegistry()
SLOTS = Gauge("cronlog_worker_slots", "Slots configured", registry=REGISTRY)
BUSY = Gauge("cronlog_worker_slots_busy", "Slots holding a lease now", registry=REGISTRY)
TASKS = Counter(
    "cronlog_worker_tasks",
    "Attempts ended on this worker, by outcome",
    ["outcome"],
    registry=REGISTRY,
)
CLAIM_SECONDS = Histogram(
    "cronlog_worker_claim_seconds",
    "Poll sent to lease granted, seconds (claim latency seen by the worker)",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    registry=REGISTRY,
)
RENEWALS = Counter(
    "cronlog_worker_lease_renewals",
    "Lease renewals answered, by result",
    ["result"],
    registry=REGISTRY,
)
for _outcome in get_args(Outcome):  # every series from the start: rate() needs the zero
    TASKS.labels(_outcome)
for _result in ("ok", "refused"):
    RENEWALS.labels(_result)


def serve(port: int, host: str = "127.0.0.1") -> str | None:
    """Serve the worker's metrics (``services.metrics_http.serve``); return the URL."""
    return metrics_http.serve(REGISTRY, port, host)


def configure(slots: int, busy: Callable[[], int]) -> None:
    """Set the slots configured, and ``busy`` as the source of the busy slots (read when
    scraped: no work on the hot path)."""
    SLOTS.set(slots)
    BUSY.set_function(lambda: float(busy()))


def completed(failure: FailureKind | None) -> None:
    """Count an attempt whose completion was sent (``failure``: None on success)."""
    if failure is None:
        TASKS.labels("succeeded").inc()
    elif failure is FailureKind.TIMEOUT:
        TASKS.labels("timeout").inc()
    else:
        TASKS.labels("failed").inc()


def ended(outcome: Outcome) -> None:
    """Count an attempt that ended without a completion (released, cancelled or lost)."""
    TASKS.labels(outcome).inc()


def refused_as(reason: RejectReason) -> Outcome:
    """Return the outcome of an attempt killed because its renewal was refused for ``reason``."""
    return "cancelled" if reason is RejectReason.UNKNOWN_TASK_INSTANCE else "lost"


def claimed(seconds: float, grants: int) -> None:
    """Observe ``grants`` leases granted ``seconds`` after the poll that asked for them."""
    for _ in range(grants):
        CLAIM_SECONDS.observe(seconds)


def renewal(result: Literal["ok", "refused"]) -> None:
    """Count one answer to this worker's lease renewal."""
    RENEWALS.labels(result).inc()
