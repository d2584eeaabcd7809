"""A run document as it is created (the projection changes it with the run's later events)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from cronlog import events as ev
from cronlog.time import iso
from services.api.readmodel import task_instances


def _iso(instant: datetime | None) -> str | None:
    return iso(instant) if instant is not None else None


def new(
    record: ev.RunEvent,
    event: ev.RunScheduled | ev.RunBuffered | ev.RunQueued,
    job: dict[str, Any] | None,
) -> dict[str, Any]:
    """Return the document of a run just scheduled, buffered or queued.

    Args:
        record: the event's record (``at`` is when the run was created).
        event: RunScheduled (state ``scheduled``), RunBuffered (``buffered``) or RunQueued
            (``queued``; ``queued_at`` is set).
        job: the job's document, or None when the job was never registered here.

    Returns:
        The run document; ``answers.RunOut`` documents its fields.
    """
    at = iso(record.at)
    tasks = getattr(event, "tasks", ())
    state = {ev.RunBuffered: "buffered", ev.RunQueued: "queued"}.get(type(event), "scheduled")
    return {
        "run_id": event.run_id,
        "job_id": record.job_id,
        "job_name": job["definition"]["name"] if job else None,
        "scheduled_for": iso(event.scheduled_for),
        "trigger": event.trigger.value,
        "tasks": list(tasks),
        "state": state,
        "attempt": 1,
        "epoch": 0,
        "claimed_by": None,
        "lease_expires_at": None,
        "exit_code": None,
        "failure_kind": None,
        "output_tail": "",
        "decided_by": None,
        "created_at": at,
        "queued_at": at if isinstance(event, ev.RunQueued) else None,
        "queued_reason": event.reason.value if isinstance(event, ev.RunQueued) else None,
        "ready_at": None,
        "claimed_at": None,
        "started_at": None,
        "finished_at": None,
        "retry_at": None,
        "trigger_lag_s": None,
        "attempts": [],
        "task_instances": task_instances.initial(tasks, job["definition"] if job else None),
        "release_at": _iso(getattr(event, "release_at", None)),
        "runs_remaining": event.runs_remaining,
        "cancelled_by": None,
        "cancel_reason": None,
        "replay_of": getattr(event, "replay_of", None),
        "upstream_job_id": getattr(event, "upstream_job_id", None),
        "upstream_run_id": getattr(event, "upstream_run_id", None),
    }
