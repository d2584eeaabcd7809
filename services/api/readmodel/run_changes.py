"""How the events of a started run change its run document (``change_run``).

Part of the projection (``projection.apply`` routes a run's later events here): task
instances' attempts, leases and outcomes, and the run's own end.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from cronlog import events as ev
from cronlog.time import iso, to_ms
from services.api.readmodel import run_outcome, task_instances
from services.api.readmodel.keys import job_key, run_key
from services.api.readmodel.store import Batch


def _iso(instant: datetime | None) -> str | None:
    return iso(instant) if instant is not None else None


TERMINAL_RUN_STATES = frozenset({"succeeded", "failed", "cancelled"})
"""Run states after which nothing changes."""


def _lag_s(scheduled_for: str, at: datetime) -> float:
    return round((to_ms(at) - to_ms(datetime.fromisoformat(scheduled_for))) / 1000, 3)


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


def change_run(batch: Batch, record: ev.RunEvent, event: RunChange) -> None:
    """Apply one of a started run's events (``RunChange``) to its run document in ``batch``.

    Terminal states absorb: an event for a run never scheduled here, or already ended,
    changes nothing.
    """
    key, at = run_key(event.run_id), iso(record.at)
    run = batch.get_json(key)
    if run is None or run["state"] in TERMINAL_RUN_STATES:
        return  # never scheduled here, or finished: terminal states absorb
    match event:
        case ev.TaskReady(task=task, attempt=attempt):
            run.update(state="ready", attempt=attempt, retry_at=None, claimed_by=None)
            if _first(run, task):  # the summary's instants are all the first task's
                run["ready_at"] = at
            _attempt(run, task, attempt)
        case ev.TaskClaimed(task=task, attempt=attempt, epoch=epoch, worker_id=worker):
            if _first(run, task):
                run["claimed_at"] = at
            run.update(
                state="running",
                attempt=attempt,
                epoch=epoch,
                claimed_by=worker,
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
            if state == "failed":
                run_outcome.run_failed(run)
            _count_terminal(batch, record.job_id, state)
        case ev.TaskSkipped() | ev.TaskUpstreamFailed():
            pass  # a task that never executes: only its task instance changes
    if isinstance(event, ev.TaskReset):
        run_outcome.task_reset(run, event.task)
    if isinstance(event, task_instances.TaskChange):
        task_instances.apply(run, event, at)
    batch.put_json(key, run)


def _first(run: dict[str, Any], task: str) -> bool:
    """True for the run's first task to be claimed (or any task before a claim): the summary's
    ready_at, claimed_at and started_at are its, so they never contradict each other."""
    return run.get("lag_task") in (None, task)


def _task_finished(
    run: dict[str, Any], record: ev.RunEvent, event: ev.TaskSucceeded | ev.TaskFailed
) -> None:
    failure = event.failure_kind.value if isinstance(event, ev.TaskFailed) else None
    state = "succeeded" if failure is None else "failed"
    started, finished = _iso(event.started_at), iso(event.finished_at)
    first = _first(run, event.task)
    run_outcome.task_finished(run, event)
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
        # a worker sends no log record for a completion without output (logs.attempt_log)
        output_empty=event.output_tail == "",
    )


def _count_terminal(batch: Batch, job_id: str, state: str) -> None:
    job = batch.get_json(job_key(job_id))
    if job is not None:
        job[state] += 1
        batch.put_json(job_key(job_id), job)
