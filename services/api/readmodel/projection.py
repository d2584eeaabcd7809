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

from cronlog import events as ev
from cronlog.time import iso
from cronlog.vocabulary import RejectReason, RunTrigger
from services.api.readmodel import dead_letters, live_runs, metrics, run_doc, skips, task_instances
from services.api.readmodel import retention as history
from services.api.readmodel.event_json import dump_run_event
from services.api.readmodel.keys import job_key, run_key, tick_runs_prefix
from services.api.readmodel.run_changes import (
    TERMINAL_RUN_STATES,
    LiveChange,
    RunChange,
    change_run,
)
from services.api.readmodel.store import Batch
from services.api.shapes.mapping import spec_to_json

WAITING_RUN_STATES = frozenset({"buffered", "queued"})
"""Run states of a run that has not started: its RunScheduled moves it to ``scheduled``."""


def events_prefix(idem_key: str, job_id: str | None = None) -> bytes:
    """Return the key prefix of the events a command caused (for one job, or any job)."""
    prefix = b"ev:" + idem_key.encode() + b"\x00"
    return prefix + job_id.encode() + b"\x00" if job_id is not None else prefix


def _event_key(record: ev.RunEvent) -> bytes:
    """The key an applied event is kept under, in its command's (job_id, index) order.

    A refusal named by a key of its own (``names_another_command``: a re-used idem_key, or a
    re-send past the dedupe horizon) is kept after the event of the same index that the key's
    first command caused, suffixed with its own event_id.
    """
    key = events_prefix(record.idem_key, record.job_id) + b"%06d" % record.index
    own = names_another_command(record)
    return key + b"\x00" + record.event_id.encode() if own else key


def _marker_key(record: ev.RunEvent) -> bytes:
    return b"eid:" + record.event_id.encode()


def is_conflict(record: ev.RunEvent) -> bool:
    """True for the refusal of a command that re-used an applied idem_key with other content.

    It carries the idem_key of the command it refused, not of the one that caused the key's
    events (``cronlog.dedupe.event_key``): a reader of ``events_for`` tells the two apart.
    """
    event = record.event
    return (
        isinstance(event, ev.CommandRejected) and event.reason is RejectReason.IDEMPOTENCY_CONFLICT
    )


OWN_KEY_REASONS = frozenset(
    {
        RejectReason.IDEMPOTENCY_CONFLICT,
        RejectReason.IDEM_KEY_EXPIRED,
        RejectReason.ISSUED_AT_IN_FUTURE,
    }
)
"""Refusals whose event_ids derive from a key of their own (``cronlog.decide.event_key``)."""


def names_another_command(record: ev.RunEvent) -> bool:
    """True for a refusal that carries an idem_key whose events are another command's.

    ``is_conflict``, or a refusal by the dedupe horizon (``idem_key_expired``,
    ``issued_at_in_future``: a re-send whose key's first command may have been applied):
    neither is the answer of the key's first command.
    """
    event = record.event
    return isinstance(event, ev.CommandRejected) and event.reason in OWN_KEY_REASONS


def _iso(instant: datetime | None) -> str | None:
    return iso(instant) if instant is not None else None


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
        change_run(batch, record, event)
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
