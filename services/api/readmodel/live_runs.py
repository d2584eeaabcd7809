"""The small, bounded index the API's scrape-time metrics read, kept by the projection.

Written in the projection's batch after each applied run-event (so it is exactly as recovered
as the documents), and read by ``metrics_live.LiveCollector`` at scrape time:

- ``live:<run_id>``: one entry per run not yet ended (queued, buffered, scheduled, running,
  retrying): its job, state, queue reason, when its first task was claimed (``started``, epoch
  ms), its last task progress (``progress``), the instant jitter or a retry holds it until
  (``hold``), how many task instances are claimed (``claimed``) and unfinished
  (``unfinished``), and the TaskReady instant of each ready task (``ready``), for the claim
  latency. Deleted when the run ends: the index holds only live runs.
- ``dur:<job_id>``: the job's last ``DURATIONS_KEPT`` successful run durations, seconds
  (first claim → RunSucceeded), oldest first.
- ``crit:<job_id>``: present while the job is tagged ``critical`` and not deleted.
- ``susp:<job_id>``: present while the job's circuit is open or half-open (JobSuspended until
  JobUnsuspended or JobDeleted), so ``cronlog_jobs_suspended`` survives a restart of the API.

A deleted job leaves none of its keys (a job registered again under its id starts afresh).

It also observes the two histograms that need a run's history: the claim latency (TaskReady or
TaskReleased → TaskClaimed, the events' ``at``) and the trigger lag (the run document's
``trigger_lag_s``, once per run: when its first task finishes, or when the run ends).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from cronlog import events as ev
from cronlog.time import to_ms
from services.api.readmodel import metrics
from services.api.readmodel.store import Batch, Store
from services.api.readmodel.task_instances import TERMINAL_TASK_STATES

DURATIONS_KEPT = 50
"""Successful run durations kept per job (the overrun ratio's p99 is over these)."""
ENDED = frozenset({"succeeded", "failed", "cancelled"})
"""Run states after which a run leaves the index."""
WAITING = frozenset({"queued", "buffered"})
"""Run states of a run that has not started (RunQueued, RunBuffered)."""
LIVE = b"live:"
DURATIONS = b"dur:"
CRITICAL = b"crit:"
SUSPENDED = b"susp:"


def live_key(run_id: str) -> bytes:
    """Return the key of a live run's entry."""
    return LIVE + run_id.encode()


def durations_key(job_id: str) -> bytes:
    """Return the key of a job's recent successful run durations."""
    return DURATIONS + job_id.encode()


def critical_key(job_id: str) -> bytes:
    """Return the key marking a job tagged critical."""
    return CRITICAL + job_id.encode()


def suspended_key(job_id: str) -> bytes:
    """Return the key marking a job whose circuit is open."""
    return SUSPENDED + job_id.encode()


def track_job(batch: Batch, job_id: str, event: ev.Event) -> None:
    """Keep a job's ``crit:`` and ``susp:`` keys in step with its events; a deletion drops
    every key of the job (``dur:`` too)."""
    if isinstance(event, ev.JobRegistered | ev.JobRedefined):
        if metrics.CRITICAL_TAG in event.spec.tags:
            batch.put(critical_key(job_id), b"")
        else:
            batch.delete(critical_key(job_id))
    elif isinstance(event, ev.JobSuspended):
        batch.put(suspended_key(job_id), b"")
    elif isinstance(event, ev.JobUnsuspended):
        batch.delete(suspended_key(job_id))
    elif isinstance(event, ev.JobDeleted):
        for key in (critical_key, suspended_key, durations_key):
            batch.delete(key(job_id))


def track_run(batch: Batch, record: ev.RunEvent, run_key: bytes) -> None:
    """Update the live entry of the run ``record``'s event changed (after the projection).

    Args:
        batch: the projection's batch (the run document at ``run_key`` is already updated).
        record: the applied run-event (one that names a run).
        run_key: the run document's key.

    Idempotency: called once per applied event (the projection skips re-deliveries).
    """
    event = record.event
    run = batch.peek_json(run_key)  # the projection just put it: no second parse
    if run is None:
        return
    at_ms = to_ms(record.at)
    key = live_key(run["run_id"])
    _observe_lag(batch, run_key, run, event, at_ms)
    live = batch.peek_json(key)
    if live is None and run["state"] in ENDED:
        return  # an event after the run ended (terminal states absorb): nothing is live
    live = live or {"started": None, "progress": at_ms, "ready": {}}
    _task_event(live, event, at_ms)
    if run["state"] in ENDED:
        if run["state"] == "succeeded" and live["started"] is not None:
            _add_duration(batch, record.job_id, (at_ms - live["started"]) / 1000)
        batch.delete(key)
        return
    instances = run.get("task_instances", [])
    holds = [run.get("release_at")] + [t.get("retry_at") for t in instances]
    live.update(
        job=record.job_id,
        state=run["state"],
        reason=run.get("queued_reason"),
        hold=max((_ms(h) for h in holds if h), default=None),
        claimed=sum(t["state"] == "running" for t in instances),
        unfinished=sum(t["state"] not in TERMINAL_TASK_STATES for t in instances),
    )
    batch.put_json(key, live)


def _task_event(live: dict[str, Any], event: ev.Event, at_ms: int) -> None:
    """Apply a task-level event to a live entry: ready instants, first claim, progress."""
    task = getattr(event, "task", None)
    if isinstance(event, ev.TaskReady | ev.TaskReleased):
        live["ready"][event.task] = at_ms
    elif isinstance(event, ev.TaskClaimed):
        ready = live["ready"].pop(event.task, None)
        if ready is not None and metrics.WINDOW.news_ms(at_ms):
            metrics.CLAIM_LATENCY.observe(max(0, at_ms - ready) / 1000)
        if live["started"] is None:
            live["started"] = at_ms
    elif isinstance(event, ev.RunReopened):
        live["started"] = at_ms  # a rerun's duration counts from its reopening
    if task is not None or isinstance(event, ev.RunScheduled | ev.RunReopened):
        live["progress"] = at_ms


def _observe_lag(
    batch: Batch, run_key: bytes, run: dict[str, Any], event: ev.Event, at_ms: int
) -> None:
    """Observe the run's trigger lag once: its first task finished, or the run ended."""
    lag = run.get("trigger_lag_s")
    if lag is None or run.get("lag_counted"):
        return
    first_done = isinstance(event, ev.TaskSucceeded | ev.TaskFailed) and event.task == run.get(
        "lag_task"
    )
    if (first_done or run["state"] in ENDED) and metrics.WINDOW.news_ms(at_ms):
        metrics.TRIGGER_LAG.labels(run["trigger"]).observe(max(0.0, lag))
        run["lag_counted"] = True
        batch.put_json(run_key, run)


def _add_duration(batch: Batch, job_id: str, seconds: float) -> None:
    raw = batch.get(durations_key(job_id))
    kept: list[float] = json.loads(raw) if raw is not None else []
    kept = [*kept, round(max(0.0, seconds), 3)][-DURATIONS_KEPT:]
    batch.put(durations_key(job_id), json.dumps(kept).encode())


def _ms(instant: str) -> int:
    return to_ms(datetime.fromisoformat(instant))


def live_runs(store: Store) -> Iterator[dict[str, Any]]:
    """Yield the entry of every live run (key order: by run_id)."""
    for _, value in store.scan(LIVE):
        yield json.loads(value)


def durations(store: Store, job_id: str) -> list[float]:
    """Return the job's recent successful run durations, seconds, oldest first (maybe empty)."""
    raw = store.get(durations_key(job_id))
    return json.loads(raw) if raw is not None else []


def suspended_jobs(store: Store) -> int:
    """Return how many jobs have their circuit open or half-open."""
    return sum(1 for _ in store.scan(SUSPENDED))


def critical_jobs(store: Store) -> set[str]:
    """Return the job_ids tagged critical (not deleted)."""
    return {key[len(CRITICAL) :].decode() for key, _ in store.scan(CRITICAL)}
