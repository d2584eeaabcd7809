"""Which task decided a run's outcome: the run summary's ``decided_by`` and its fields.

Part of the projection (``run_changes`` calls it). While a run is active its summary's
``exit_code``, ``failure_kind`` and ``output_tail`` are those of the task that finished last
(``decided_by``). A failed run is summarised by the task whose failure failed it: the first
task, in the run's task order, that ended ``failed`` (an ``upstream_failed`` task never ran, and
an ``all_done`` cleanup that succeeded after it decided nothing); with none, the first task
cancelled (a run timeout, or a task cancelled by a user). Airflow's DAG run page shows the same
choice as "the first failed task instance" (issue 24, item 1).

``failed_tasks`` keeps, per task whose latest attempt failed, that attempt's outcome (bounded:
one entry per failed task, each output tail bounded by ``cronlog.limits``), since the
run-level fields have moved on to later tasks by the time the run ends.
"""

from __future__ import annotations

from typing import Any

from cronlog import events as ev


def task_finished(run: dict[str, Any], event: ev.TaskSucceeded | ev.TaskFailed) -> None:
    """Note a finished attempt: it is the summary's task until the run ends.

    Args:
        run: the run document (mutated): ``decided_by`` and ``failed_tasks``.
        event: the attempt's outcome.
    """
    run["decided_by"] = event.task
    failed: dict[str, Any] = run.setdefault("failed_tasks", {})
    if isinstance(event, ev.TaskFailed):
        failed[event.task] = {
            "attempt": event.attempt,
            "worker_id": event.worker_id,
            "exit_code": event.exit_code,
            "failure_kind": event.failure_kind.value,
            "output_tail": event.output_tail,
        }
    else:
        failed.pop(event.task, None)


def task_reset(run: dict[str, Any], task: str) -> None:
    """Forget a task's failure: a rerun starts a new attempt series (TaskReset)."""
    run.get("failed_tasks", {}).pop(task, None)


def run_failed(run: dict[str, Any]) -> None:
    """Summarise a failed run by the task that failed it (module docstring), in place.

    Leaves the summary as it is when no task failed or was cancelled (a run failed before any
    task ran).
    """
    instances = run.get("task_instances") or []
    failed = run.get("failed_tasks") or {}
    for state in ("failed", "cancelled"):
        for ti in instances:
            if ti["state"] != state:
                continue
            outcome = failed.get(ti["task"]) if state == "failed" else None
            if outcome is None:
                timed_out = state == "cancelled" and run.get("timed_out_at")
                outcome = {
                    "attempt": ti["attempt"],
                    "worker_id": ti["worker_id"],
                    "exit_code": ti["exit_code"],
                    "failure_kind": "timeout" if timed_out else ti["failure_kind"],
                    "output_tail": "",
                }
            run.update(decided_by=ti["task"], **outcome)
            run["claimed_by"] = run.pop("worker_id")
            return
