"""A run document's ``task_instances``: one entry per task of the run, in RunScheduled order.

Part of the projection (``projection.py`` calls it): the run-level fields show whichever task's
event came last, these show every task of a DAG at once. Pure functions on the JSON document.
"""

from __future__ import annotations

from typing import Any

from cronlog import events as ev
from cronlog.time import iso

TaskChange = (
    ev.TaskReady
    | ev.TaskClaimed
    | ev.TaskSucceeded
    | ev.TaskFailed
    | ev.RetryScheduled
    | ev.TaskCancelled
    | ev.TaskReleased
    | ev.TaskSkipped
    | ev.TaskUpstreamFailed
    | ev.TaskReset
)
"""The events that change one task instance."""

TERMINAL_TASK_STATES = frozenset({"succeeded", "failed", "skipped", "upstream_failed", "cancelled"})
"""Task instance states after which only a later attempt's events change nothing."""


def initial(
    tasks: tuple[str, ...] | list[str], definition: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """Return the ``task_instances`` of a run just scheduled: every task ``pending``.

    Args:
        tasks: the run's task names (RunScheduled.tasks), in order.
        definition: the job's definition document (for each task's ``trigger_rule``), or None.

    Returns:
        One entry per task, in ``tasks`` order; ``trigger_rule`` null for a one-task job.
    """
    rules = {t["name"]: t.get("trigger_rule") for t in (definition or {}).get("tasks") or []}
    return [_entry(name, rules.get(name)) for name in tasks]


def _entry(task: str, trigger_rule: str | None = None) -> dict[str, Any]:
    return {
        "task": task,
        "state": "pending",
        "attempt": 1,
        "epoch": None,
        "worker_id": None,
        "ready_at": None,
        "claimed_at": None,
        "started_at": None,
        "finished_at": None,
        "exit_code": None,
        "failure_kind": None,
        "retry_at": None,
        "trigger_rule": trigger_rule,
    }


def instance(run: dict[str, Any], task: str) -> dict[str, Any]:
    """Return the entry of ``task`` in ``run``, adding it (at the end) when missing.

    A run document written before ``task_instances`` existed, or a task the RunScheduled did
    not list, gets its entry on first use rather than losing the event.
    """
    entries: list[dict[str, Any]] = run.setdefault("task_instances", [])
    for entry in entries:
        if entry["task"] == task:
            return entry
    entries.append(_entry(task))
    return entries[-1]


def apply(run: dict[str, Any], event: TaskChange, at: str) -> None:
    """Update the task instance ``event`` names in the run document ``run``, in place.

    Args:
        run: the run document (mutated).
        event: a task-level event of the run.
        at: the event's instant (RunEvent.at), ISO UTC ``Z``.

    Idempotency: the projection skips re-delivered events before calling this.
    """
    ti = instance(run, event.task)
    match event:
        case ev.TaskReady(attempt=attempt):
            ti.update(
                state="ready",
                attempt=attempt,
                ready_at=at,
                worker_id=None,
                retry_at=None,
                claimed_at=None,
                started_at=None,
                finished_at=None,
                exit_code=None,
                failure_kind=None,
            )
        case ev.TaskClaimed(attempt=attempt, epoch=epoch, worker_id=worker):
            ti.update(
                state="running", attempt=attempt, epoch=epoch, worker_id=worker, claimed_at=at
            )
        case ev.TaskSucceeded() | ev.TaskFailed():
            failure = event.failure_kind.value if isinstance(event, ev.TaskFailed) else None
            started = event.started_at
            ti.update(
                state="failed" if failure else "succeeded",
                attempt=event.attempt,
                epoch=event.epoch,
                worker_id=event.worker_id,
                started_at=iso(started) if started else ti["started_at"],
                finished_at=iso(event.finished_at),
                exit_code=event.exit_code,
                failure_kind=failure,
            )
        case ev.RetryScheduled(retry_at=retry_at):
            # The failed attempt's outcome stays visible until the retry becomes ready.
            ti.update(state="retrying", retry_at=iso(retry_at))
        case ev.TaskCancelled():
            ti.update(state="cancelled", finished_at=ti["finished_at"] or at)
        case ev.TaskReleased():
            ti.update(state="ready", worker_id=None, claimed_at=None)
        case ev.TaskSkipped(trigger_rule=rule):
            ti.update(state="skipped", trigger_rule=rule, finished_at=at)
        case ev.TaskUpstreamFailed(trigger_rule=rule):
            ti.update(state="upstream_failed", trigger_rule=rule, finished_at=at)
        case ev.TaskReset(attempt=attempt):  # a rerun: a new attempt series, pending again
            ti.update(
                state="pending",
                attempt=attempt,
                worker_id=None,
                ready_at=None,
                claimed_at=None,
                started_at=None,
                finished_at=None,
                exit_code=None,
                failure_kind=None,
                retry_at=None,
            )


def cancel_unfinished(run: dict[str, Any], at: str) -> None:
    """Mark every task instance not yet terminal ``cancelled`` (the whole run was cancelled)."""
    for ti in run.get("task_instances", []):
        if ti["state"] not in TERMINAL_TASK_STATES:
            ti.update(state="cancelled", finished_at=ti["finished_at"] or at)
