"""Prometheus metrics of the API process, counted by the read model (served: routes/metrics.py).

Counted as the read model applies run-events (each event once: the projection dedupes by
event_id), so they count what this process has seen since it started, like any Prometheus
counter; a rebuilt read model counts the history it re-reads. The gauges computed at scrape
time (overruns, waiting and stalled runs, critical jobs) live in ``metrics_live.py``; every
series is listed in docs/metrics.md, "API metrics".

- ``cronlog_ticks_skipped_total{reason}``: ticks not fired (``TickSkipped``), by reason;
  ``queue_full`` is the one overload causes (issue 13: delay, never drop; past a job's
  ``max_queued_runs`` the tick is skipped and counted here).
- ``cronlog_ticks_missed_total{job,reason}``: ticks not fired within their ``misfire_grace``:
  ``caught_up`` (fired late, trigger ``catchup``), ``catchup_policy``, ``catchup_window``.
- ``cronlog_runs_queued_total{reason}``: runs that waited: for a slot under
  ``max_active_runs``, or behind an open circuit (``suspended``).
- ``cronlog_jobs_suspended``: jobs whose circuit is open now (``cronlog.breaker``; computed at
  scrape time from the read model, ``metrics_live``, so a restart keeps it); alert on
  it being above 0. ``cronlog_circuits_opened_total{reason}``: circuits opened.
- ``cronlog_lease_expired_total``, ``cronlog_dead_letters_total{job}``: lease reclaims and
  dead-lettered task instances.
- ``cronlog_trigger_lag_seconds{trigger}``, ``cronlog_claim_latency_seconds``: histograms
  (observed by ``live_runs``).
- ``cronlog_run_events_total{type}``: run-events applied, by type.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Histogram

from cronlog import events as ev
from cronlog.time import to_ms
from cronlog.vocabulary import RunTrigger, SkipReason

log = logging.getLogger("cronlog.api")
MAX_CRITICAL_JOBS = 500
"""Most jobs with a critical label of their own (``JobLabels.set_critical``)."""
OTHER = "other"
"""The ``job`` label value shared by the jobs past the cap (``JobLabels``)."""
CRITICAL_TAG = "critical"
"""The tag of a job whose missed tick pages (``cronlog_job_critical``)."""
MISSED_REASONS = frozenset({SkipReason.CATCHUP_POLICY, SkipReason.CATCHUP_WINDOW})
"""The TickSkipped reasons that are missed ticks (older than the schedule's misfire grace)."""


class JobLabels:
    """The ``job`` label values of one process: at most ``max_jobs`` jobs get their own.

    The first ``max_jobs`` distinct jobs seen keep their job_id as label value for the life of
    the process; later ones share ``"other"``. A job tagged ``critical`` gets its own (alerts
    join on it) without using up the cap, and keeps it for the life of the process even once
    untagged or deleted (``pinned``: its series never split between two values). One
    allocation is shared by every metric, so a job is ``other`` in all of them or in none, and
    each metric has at most ``max_jobs`` + 1 + ``MAX_CRITICAL_JOBS`` values. Memory: at most
    ``max_jobs`` + ``MAX_CRITICAL_JOBS`` ids.
    Thread-safe (the read model's thread counts, the scrape thread reads).
    """

    def __init__(self, max_jobs: int = 200) -> None:
        """Start empty with room for ``max_jobs`` (>= 0) jobs of their own."""
        self.max_jobs = max_jobs
        self._own: set[str] = set()
        self._critical: set[str] = set()
        self._pinned: set[str] = set()
        """Jobs critical at some point of this process (at most MAX_CRITICAL_JOBS)."""
        self._lock = threading.Lock()

    def label(self, job_id: str) -> str:
        """Return the ``job`` label value of ``job_id`` (allocating one while there is room)."""
        with self._lock:
            if job_id in self._pinned or job_id in self._own:
                return job_id
            if len(self._own) < self.max_jobs:
                self._own.add(job_id)
                return job_id
            return OTHER

    def set_critical(self, job_id: str, critical: bool) -> None:
        """Mark ``job_id`` critical (its own label whatever the cap) or not any more.

        At most ``MAX_CRITICAL_JOBS`` jobs are critical here (a tag any tenant admin may set
        must not make the labels unbounded): past that a job tagged critical is labelled like
        any other, and a warning says so (its missed ticks then do not page).
        """
        with self._lock:
            if not critical:
                self._critical.discard(job_id)  # its label stays pinned
            elif job_id in self._pinned or len(self._pinned) < MAX_CRITICAL_JOBS:
                self._critical.add(job_id)
                self._pinned.add(job_id)
            else:
                log.warning(
                    "labelled as any job, its missed ticks do not page",
                    extra={
                        "action": "critical_jobs_over_cap",
                        "job_id": job_id,
                        "cap": MAX_CRITICAL_JOBS,
                    },
                )

    def critical(self) -> set[str]:
        """Return the critical jobs that have a label of their own."""
        with self._lock:
            return set(self._critical)

    def is_critical(self, job_id: str) -> bool:
        """True if ``job_id`` is tagged critical (as last registered or redefined)."""
        with self._lock:
            return job_id in self._critical

    def reset(self, max_jobs: int, critical: set[str]) -> None:
        """Forget every allocation; allow ``max_jobs``; ``critical`` are the critical jobs."""
        with self._lock:
            self.max_jobs = max_jobs
            self._own = set()
            self._critical = set(sorted(critical)[:MAX_CRITICAL_JOBS])
            self._pinned = set(self._critical)


REGISTRY = CollectorRegistry()
LABELS = JobLabels()
"""The process's job label allocation (``configure`` sets its cap from ApiSettings)."""
TICKS_SKIPPED = Counter(
    "cronlog_ticks_skipped", "Ticks not fired, by reason", ["reason"], registry=REGISTRY
)
TICKS_MISSED = Counter(
    "cronlog_ticks_missed",
    "Ticks not fired within their misfire grace: caught_up (fired late), catchup_policy, "
    "catchup_window",
    ["job", "reason"],
    registry=REGISTRY,
)
RUNS_QUEUED = Counter(
    "cronlog_runs_queued", "Runs queued, by reason", ["reason"], registry=REGISTRY
)
SUSPENSIONS = Counter(
    "cronlog_circuits_opened", "Job circuits opened, by reason", ["reason"], registry=REGISTRY
)
RUN_EVENTS = Counter(
    "cronlog_run_events", "Run-events applied, by type", ["type"], registry=REGISTRY
)
LEASE_EXPIRED = Counter(
    "cronlog_lease_expired",
    "Leases that lapsed and were reclaimed (LeaseExpired)",
    [],
    registry=REGISTRY,
)
DEAD_LETTERS = Counter(
    "cronlog_dead_letters",
    "Task instances dead-lettered (TaskDeadLettered)",
    ["job"],
    registry=REGISTRY,
)
HISTORY_PRUNED = Counter(
    "cronlog_history_pruned",
    "Rows the hot-history retention deleted from the API's read model, by kind: runs, "
    "dead_letters, events, log_rows (CRONLOG_HISTORY_HOT_DAYS)",
    ["kind"],
    registry=REGISTRY,
)
TRIGGER_LAG = Histogram(
    "cronlog_trigger_lag_seconds",
    "A run's tick (scheduled_for) to its first task started, seconds",
    ["trigger"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600),
    registry=REGISTRY,
)
CLAIM_LATENCY = Histogram(
    "cronlog_claim_latency_seconds",
    "TaskReady (or TaskReleased) to TaskClaimed of a task instance, event timestamps, seconds",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
    registry=REGISTRY,
)

MISSED_LABELS = ("caught_up", *sorted(r.value for r in MISSED_REASONS))


class NewsWindow:
    """Which run-events the counters count: those at or after ``since_ms`` (epoch ms).

    Older ones are history a (re)built read model re-reads, not news: counted, they would
    rise a fresh process's counters by everything that ever happened and fire alerts for
    old misses and dead letters. The scrape-time gauges read the index and are unaffected.
    """

    def __init__(self) -> None:
        """Count everything until ``configure`` says otherwise."""
        self.since_ms = 0

    def news(self, at: datetime) -> bool:
        """True if an event at ``at`` (aware) is counted."""
        return to_ms(at) >= self.since_ms

    def news_ms(self, at_ms: int) -> bool:
        """True if an event at ``at_ms`` (epoch ms) is counted."""
        return at_ms >= self.since_ms


WINDOW = NewsWindow()


def configure(max_jobs: int, critical: set[str], since_ms: int = 0) -> None:
    """Set the job label cap (``CRONLOG_METRICS_MAX_JOBS``), the critical jobs known, and the
    first instant counted (``NewsWindow``; epoch ms, 0: everything)."""
    LABELS.reset(max_jobs, critical)
    WINDOW.since_ms = since_ms
    for job_id in LABELS.critical():
        _zero_missed(job_id)


def _zero_missed(job_id: str) -> None:
    """Export a critical job's missed-tick series at 0 before its first miss, so that
    ``increase()`` sees the first one (a series born at 1 has no earlier sample to rise from;
    ops/prometheus/alerts.yml)."""
    for reason in MISSED_LABELS:
        TICKS_MISSED.labels(job_id, reason)


def count(event: ev.Event, job_id: str = "", at: datetime | None = None) -> None:
    """Count one newly applied run-event of ``job_id`` published at ``at`` (None: now).

    An event before ``WINDOW`` is history: only the critical-label and circuit bookkeeping
    follow it, nothing is counted.
    """
    if isinstance(event, ev.JobRegistered | ev.JobRedefined):
        LABELS.set_critical(job_id, CRITICAL_TAG in event.spec.tags)
        if LABELS.is_critical(job_id):
            _zero_missed(job_id)
    elif isinstance(event, ev.JobDeleted):
        LABELS.set_critical(job_id, False)
    if at is not None and not WINDOW.news(at):
        return
    RUN_EVENTS.labels(type(event).__name__).inc()
    if isinstance(event, ev.TickSkipped):
        TICKS_SKIPPED.labels(event.reason.value).inc()
        if event.reason in MISSED_REASONS:
            TICKS_MISSED.labels(LABELS.label(job_id), event.reason.value).inc()
    elif isinstance(event, ev.RunQueued):
        RUNS_QUEUED.labels(event.reason.value).inc()
    elif isinstance(event, ev.LeaseExpired):
        LEASE_EXPIRED.inc()
    elif isinstance(event, ev.TaskDeadLettered):
        DEAD_LETTERS.labels(LABELS.label(job_id)).inc()
    elif isinstance(event, ev.JobSuspended):
        SUSPENSIONS.labels(event.reason.value).inc()


def run_created(job_id: str, trigger: RunTrigger, at: datetime | None = None) -> None:
    """Count a run that appeared for the first time (its RunScheduled, -Buffered or -Queued).

    A run of trigger ``catchup`` is a tick that was missed and fired late (``caught_up``);
    counted when the run appears, so a queued catch-up run is counted once, not again when it
    starts.
    """
    if trigger is RunTrigger.CATCHUP and (at is None or WINDOW.news(at)):
        TICKS_MISSED.labels(LABELS.label(job_id), "caught_up").inc()
