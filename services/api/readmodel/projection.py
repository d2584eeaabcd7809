"""The projection of ``cronlog.run-events`` into job and run documents: ``apply(batch, record)``.

Pure with respect to Kafka: it is fed RunEvents (the consumer loop in ``read_model`` does the
feeding; unit tests feed them by hand). Documents hold ISO-8601 UTC strings (``Z``) for instants
and seconds for durations, ready to serve.

Idempotency: every applied event leaves a marker keyed by its ``event_id`` (``eid:``), so an
event re-delivered by the fold after a crash is skipped instead of re-applied (re-applying an
old TaskClaimed after a TaskSucceeded would move a finished run back to running). The event
itself is kept under its command's idem_key (``ev:``) for read-your-writes (``events_for``).
Not (idem_key, job_id, index): the refusal of a command that re-used an applied idem_key
(``idempotency_conflict``) carries that idem_key and index 0 like the first command's first
event, with an event_id of its own; it is kept beside it (``_event_key``), never dropped.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from cronlog import events as ev
from cronlog.time import iso, to_ms
from cronlog.vocabulary import RejectReason, RunTrigger
from services.api.readmodel import dead_letters, live_runs, metrics, run_doc, skips, task_instances
from services.api.readmodel import retention as history
from services.api.readmodel.event_json import dump_run_event
from services.api.readmodel.keys import job_key, run_key, tick_runs_prefix
from services.api.readmodel.store import Batch
from services.api.shapes.mapping import spec_to_json

TERMINAL_RUN_STATES = frozenset({"succeeded", "failed", "cancelled"})
"""Run states after which nothing changes."""
WAITING_RUN_STATES = frozenset({"buffered", "queued"})
"""Run states of a run that has not started: its RunScheduled moves it to ``scheduled``."""


def events_prefix(idem_key: str, job_id: str | None = None) -> bytes:
    """Return the key prefix of the events a command caused (for one job, or any job)."""
    prefix = b"ev:" + idem_key.encode() + b"\x00"
    return prefix + job_id.encode() + b"\x00" if job_id is not None else prefix


def _event_key(record: ev.RunEvent) -> bytes:
    """The key an applied event is kept under, in its command's (job_id, index) order.

    A refusal of a re-used idem_key (``is_conflict``) is kept after the event of the same index
    that the key's first command caused, suffixed with its own event_id.
    """
    key = events_prefix(record.idem_key, record.job_id) + b"%06d" % record.index
    return key + b"\x00" + record.event_id.encode() if is_conflict(record) else key


def _marker_key(record: ev.RunEvent) -> bytes:
    return b"eid:" + record.event_id.encode()


def is_conflict(record: ev.RunEvent) -> bool:
    """True for the refusal of a command that re-used an applied idem_key with other content.

    It carries the idem_key of the command it refused, not of the one that caused the key's
    events (``cronlog.decide.event_key``): a reader of ``events_for`` tells the two apart.
    """
    event = record.event
    return (
        isinstance(event, ev.CommandRejected) and event.reason is RejectReason.IDEMPOTENCY_CONFLICT
    )


def _iso(instant: datetime | None) -> str | None:
    return iso(instant) if instant is not None else None


def _lag_s(scheduled_for: str, at: datetime) -> float:
    return round((to_ms(at) - to_ms(datetime.fromisoformat(scheduled_for))) / 1000, 3)


def apply(batch: Batch, record: ev.RunEvent) -> bool:
    """Apply one run-event to the documents in ``batch``.

    Args:
        batch: the write batch of the current poll (reads see its pending writes).
        record: the event as published by the fold.

    Returns:
        True if applied, False if it was a duplicate (already applied; nothing written).

    Idempotency: applying the same record twice writes once.
    """
    marker = _marker_key(record)
    if batch.get(marker) is not None:
        return False
    batch.put(marker, b"")
    event_key = _event_key(record)
    batch.put(event_key, dump_run_event(record))
    history.saw(batch, record, event_key)
    event = record.event
    metrics.count(event, record.job_id, record.at)
    if isinstance(event, ev.RunScheduled | ev.RunBuffered | ev.RunQueued):
        _run_scheduled(batch, record, event)
        if isinstance(event, ev.RunScheduled):
            dead_letters.replayed(batch, record.job_id, event)
    elif isinstance(event, ev.TaskDeadLettered):
        dead_letters.record(batch, record, event, batch.get_json(run_key(event.run_id)))
    elif isinstance(event, ev.RunCancelled):
        _run_cancelled(batch, record, event)
    elif isinstance(event, ev.RunReopened):
        _run_reopened(batch, record, event)
    elif isinstance(event, RunChange):
        _run_event(batch, record, event)
    elif not isinstance(event, ev.CommandRejected):
        _job_event(batch, record, event)
        live_runs.track_job(batch, record.job_id, event)
    if isinstance(event, LiveChange):
        live_runs.track_run(batch, record, run_key(event.run_id))
        history.track_run(batch, run_key(event.run_id))
    return True


def _job_event(batch: Batch, record: ev.RunEvent, event: ev.Event) -> None:
    key, at = job_key(record.job_id), iso(record.at)
    job = batch.get_json(key)
    if isinstance(event, ev.JobRegistered):
        # a registration of a job_id seen before (deleted: the fold refuses the others) is a
        # new incarnation, part of its schedule run_ids (cronlog.ids.run_id_for_tick)
        incarnation = job.get("incarnation", 0) + 1 if job is not None else 0
        job = job or {
            "job_id": record.job_id,
            "runs": 0,
            "succeeded": 0,
            "failed": 0,
            "last_run_id": None,
            "last_scheduled_for": None,
        }
        job.update(
            incarnation=incarnation,
            suspended=None,  # a new incarnation starts with a closed circuit
            tenant=event.spec.tenant,
            definition=spec_to_json(event.spec),
            status="active",
            created_at=at,
            deleted_at=None,
            next_fire_at=_iso(event.next_fire_at),
            runs_remaining=event.runs_remaining,
        )
    elif job is None:
        return  # a job event for a job never registered: nothing to show
    elif isinstance(event, ev.JobRedefined):
        job.update(
            definition=spec_to_json(event.spec),
            next_fire_at=_iso(event.next_fire_at),
            runs_remaining=event.runs_remaining,
        )
    elif isinstance(event, ev.JobPaused):
        job["status"] = "paused"
    elif isinstance(event, ev.JobResumed):
        job.update(status="active", next_fire_at=_iso(event.next_fire_at))
    elif isinstance(event, ev.JobDeleted):
        job.update(status="deleted", next_fire_at=None, deleted_at=at)
    elif isinstance(event, ev.JobSuspended):
        job["suspended"] = {
            "reason": event.reason.value,
            "failed_attempts": event.failed_attempts,
            "since": at,
            "resume_at": iso(event.resume_at),
            "probe_run_id": None,
        }
    elif isinstance(event, ev.JobProbing):
        if job.get("suspended"):
            job["suspended"]["probe_run_id"] = event.run_id
    elif isinstance(event, ev.JobUnsuspended):
        job["suspended"] = None
    elif isinstance(event, ev.TenantSlotsAsked):  # the tenant ledger (docs/tenants.md)
        job["slots_waiting"] = event.waiting
    elif isinstance(event, ev.TenantSlotsReceived):
        job["slots_held"] = job.get("slots_held", 0) + event.count
        job["slots_waiting"] = max(0, job.get("slots_waiting", 0) - event.count)
    elif isinstance(event, ev.TenantSlotsReturned):
        job["slots_held"] = max(0, job.get("slots_held", 0) - event.count)
    elif isinstance(event, ev.TickSkipped):
        job["next_fire_at"] = _iso(event.next_fire_at)
        skips.record(batch, record.job_id, event, at)
    else:
        return
    job["updated_at"] = at
    batch.put_json(key, job)


def _run_scheduled(
    batch: Batch, record: ev.RunEvent, event: ev.RunScheduled | ev.RunBuffered | ev.RunQueued
) -> None:
    """A run document for RunScheduled, or for a run that waits: RunBuffered (state
    ``buffered``) or RunQueued (``queued``); the RunScheduled that starts a waiting run later
    moves it to ``scheduled`` without counting it twice. The job counts a queued run in
    ``runs`` when it is queued and in ``queued`` until it starts or is cancelled."""
    key, at = run_key(event.run_id), iso(record.at)
    scheduled_for = iso(event.scheduled_for)
    job = batch.get_json(job_key(record.job_id))
    definition = job["definition"] if job else None
    existing = batch.get_json(key)
    if (
        existing is not None
        and existing["state"] in WAITING_RUN_STATES
        and isinstance(event, ev.RunScheduled)
    ):
        if existing["state"] == "queued" and job is not None:
            job["queued"] = max(0, job.get("queued", 0) - 1)
        existing.update(
            state="scheduled",
            tasks=list(event.tasks),
            task_instances=task_instances.initial(event.tasks, definition),
            release_at=_iso(event.release_at),
            runs_remaining=event.runs_remaining,
        )
        batch.put_json(key, existing)
    if existing is None:
        metrics.run_created(record.job_id, event.trigger, record.at)
        batch.put_json(key, run_doc.new(record, event, job))
        batch.put(tick_runs_prefix(record.job_id, event.scheduled_for) + event.run_id.encode(), b"")
        if job is not None:
            job["runs"] += 1
            if isinstance(event, ev.RunQueued):
                job["queued"] = job.get("queued", 0) + 1
    if job is None:
        return
    if event.trigger not in (RunTrigger.MANUAL, RunTrigger.BACKFILL):
        job["next_fire_at"] = _iso(event.next_fire_at)
        if existing is None:
            job["runs_remaining"] = event.runs_remaining
    if job["last_scheduled_for"] is None or scheduled_for >= job["last_scheduled_for"]:
        job.update(last_run_id=event.run_id, last_scheduled_for=scheduled_for)
    job["updated_at"] = at
    batch.put_json(job_key(record.job_id), job)


def _run_cancelled(batch: Batch, record: ev.RunEvent, event: ev.RunCancelled) -> None:
    key = run_key(event.run_id)
    run = batch.get_json(key)
    if run is None or run["state"] in TERMINAL_RUN_STATES:
        return
    queued = run["state"] == "queued"
    run.update(
        state="cancelled",
        lease_expires_at=None,
        cancelled_by=event.replaced_by,
        cancel_reason=event.reason.value,
        finished_at=run["finished_at"] or iso(record.at),
    )
    task_instances.cancel_unfinished(run, iso(record.at))
    for entry in run["attempts"]:  # the attempts it stopped end with it
        if entry["state"] in ("ready", "running"):
            entry.update(state="cancelled", finished_at=iso(record.at))
    batch.put_json(key, run)
    job = batch.get_json(job_key(record.job_id))
    if job is not None:  # counted as failed: it did not succeed, and counts stay consistent
        job["cancelled"] = job.get("cancelled", 0) + 1
        job["failed"] += 1
        if queued:  # a queued run that never started (a user's cancel, or its job deleted)
            job["queued"] = max(0, job.get("queued", 0) - 1)
        batch.put_json(job_key(record.job_id), job)


def _attempt(run: dict[str, Any], task: str, attempt: int) -> dict[str, Any]:
    entry: dict[str, Any]
    for entry in run["attempts"]:
        if entry["task"] == task and entry["attempt"] == attempt:
            return entry
    entry = {
        "task": task,
        "attempt": attempt,
        "state": "ready",
        "worker_id": None,
        "epoch": None,
        "claimed_at": None,
        "started_at": None,
        "finished_at": None,
        "exit_code": None,
        "failure_kind": None,
    }
    run["attempts"].append(entry)
    return entry


RunChange = (
    ev.TaskReady
    | ev.TaskClaimed
    | ev.LeaseRenewed
    | ev.TaskSucceeded
    | ev.TaskFailed
    | ev.RetryScheduled
    | ev.RunSucceeded
    | ev.RunFailed
    | ev.TaskCancelled
    | ev.TaskReleased
    | ev.TaskSkipped
    | ev.TaskUpstreamFailed
    | ev.RunTimedOut
    | ev.TaskReset
    | ev.LeaseExpired
)
"""The events that change a run document after its RunScheduled."""
LiveChange = (
    ev.RunScheduled | ev.RunBuffered | ev.RunQueued | ev.RunCancelled | ev.RunReopened | RunChange
)
"""The events that change a run's entry in the live-run index (``live_runs``)."""


def _run_event(batch: Batch, record: ev.RunEvent, event: RunChange) -> None:
    key, at = run_key(event.run_id), iso(record.at)
    run = batch.get_json(key)
    if run is None or run["state"] in TERMINAL_RUN_STATES:
        return  # never scheduled here, or finished: terminal states absorb
    match event:
        case ev.TaskReady(task=task, attempt=attempt):
            run.update(state="ready", attempt=attempt, ready_at=at, retry_at=None, claimed_by=None)
            _attempt(run, task, attempt)
        case ev.TaskClaimed(task=task, attempt=attempt, epoch=epoch, worker_id=worker):
            run.update(
                state="running",
                attempt=attempt,
                epoch=epoch,
                claimed_by=worker,
                claimed_at=at,
                lease_expires_at=iso(event.lease_expires_at),
            )
            if attempt == 1 and run["trigger_lag_s"] is None:
                # a run's lag is its first task's (a DAG's later tasks wait for upstream)
                run["trigger_lag_s"] = _lag_s(run["scheduled_for"], record.at)
                run["lag_task"] = task
            _attempt(run, task, attempt).update(
                state="running", worker_id=worker, epoch=epoch, claimed_at=at
            )
        case ev.LeaseRenewed(lease_expires_at=until):
            run["lease_expires_at"] = iso(until)
        case ev.LeaseExpired(task=task, attempt=attempt):
            # the holder crashed or hung: the attempt ended without an outcome and is given
            # back (the next attempt's TaskReady follows) — or failed, if it lapsed too often
            _attempt(run, task, attempt).update(
                state="lease_expired", failure_kind="lease_expired", finished_at=at
            )
            run["lease_expires_at"] = None
        case ev.TaskSucceeded() | ev.TaskFailed():
            _task_finished(run, record, event)
        case ev.TaskCancelled(task=task, attempt=attempt):
            _attempt(run, task, attempt).update(state="cancelled", finished_at=at)
            run.update(
                lease_expires_at=None, cancelled_tasks=[*run.get("cancelled_tasks", []), task]
            )
        case ev.TaskReleased(task=task, attempt=attempt):
            # Not a new attempt: the same one runs again under a higher epoch. The release
            # is kept on the attempt's entry so the history shows the hand-over.
            entry = _attempt(run, task, attempt)
            entry["releases"] = [
                *entry.get("releases", []),
                {
                    "worker_id": event.worker_id,
                    "epoch": event.epoch,
                    "at": at,
                    "reason": event.reason,
                },
            ]
            entry.update(state="ready", worker_id=None)
            run.update(state="ready", claimed_by=None, lease_expires_at=None)
        case ev.RetryScheduled(attempt=attempt, retry_at=retry_at):
            run.update(state="retrying", retry_at=iso(retry_at), lease_expires_at=None)
        case ev.RunTimedOut(timeout_at=timeout_at):
            run["timed_out_at"] = iso(timeout_at)  # TaskCancelled + RunFailed follow
        case ev.RunSucceeded() | ev.RunFailed():
            state = "succeeded" if isinstance(event, ev.RunSucceeded) else "failed"
            run.update(state=state, lease_expires_at=None)
            run["finished_at"] = run["finished_at"] or at
            _count_terminal(batch, record.job_id, state)
        case ev.TaskSkipped() | ev.TaskUpstreamFailed():
            pass  # a task that never executes: only its task instance changes
    if isinstance(event, task_instances.TaskChange):
        task_instances.apply(run, event, at)
    batch.put_json(key, run)


def _task_finished(
    run: dict[str, Any], record: ev.RunEvent, event: ev.TaskSucceeded | ev.TaskFailed
) -> None:
    failure = event.failure_kind.value if isinstance(event, ev.TaskFailed) else None
    state = "succeeded" if failure is None else "failed"
    started, finished = _iso(event.started_at), iso(event.finished_at)
    first = run.get("lag_task") in (None, event.task)  # the run's first task to be claimed
    run.update(
        exit_code=event.exit_code,
        failure_kind=failure,
        output_tail=event.output_tail,
        started_at=(started or run["started_at"]) if first else run["started_at"],
        finished_at=finished,
        lease_expires_at=None,
    )
    if event.attempt == 1 and event.started_at is not None and first:
        run["trigger_lag_s"] = _lag_s(run["scheduled_for"], event.started_at)
    _attempt(run, event.task, event.attempt).update(
        state=state,
        worker_id=event.worker_id,
        epoch=event.epoch,
        started_at=started,
        finished_at=finished,
        exit_code=event.exit_code,
        failure_kind=failure,
    )


def _run_reopened(batch: Batch, record: ev.RunEvent, event: ev.RunReopened) -> None:
    """A rerun reopened an ended run: it is running again and its old outcome no longer
    counts (the job's counters move back; the next RunSucceeded/RunFailed counts anew)."""
    key = run_key(event.run_id)
    run = batch.get_json(key)
    if run is None:
        return
    ended = run["state"]
    history.reopened(batch, run)
    if ended in TERMINAL_RUN_STATES:
        job = batch.get_json(job_key(record.job_id))
        if job is not None:
            counter = "failed" if ended == "cancelled" else ended
            job[counter] = max(0, job.get(counter, 0) - 1)
            if ended == "cancelled":
                job["cancelled"] = max(0, job.get("cancelled", 0) - 1)
            batch.put_json(job_key(record.job_id), job)
    run.update(
        state="running",
        finished_at=None,
        timed_out_at=None,
        reopened_at=[*run.get("reopened_at", []), iso(record.at)],
    )
    batch.put_json(key, run)


def _count_terminal(batch: Batch, job_id: str, state: str) -> None:
    job = batch.get_json(job_key(job_id))
    if job is not None:
        job[state] += 1
        batch.put_json(job_key(job_id), job)
