"""A run's summary names the task that decided it (issue 24, item 1): the read model fed a
three-task DAG's events by hand, whose middle task fails and whose ``all_done`` cleanup
succeeds after it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from cronlog import events as ev
from cronlog.model import JobSpec, Schedule, ScheduleKind, TaskSpec, TriggerRule
from cronlog.vocabulary import FailureKind, RunTrigger
from services.api.readmodel import views
from services.api.readmodel.store import Store
from services.api.shapes.responses import RunOut
from services.cli import render
from tests.unit.store_feed import command, feed

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
JOB, RUN = "etl", "r-etl"
TASKS = ("extract", "transform", "cleanup")
SPEC = JobSpec(
    "etl",
    Schedule(ScheduleKind.MANUAL),
    task_specs=(
        TaskSpec("extract", ("true",)),
        TaskSpec("transform", ("false",), depends_on=("extract",)),
        TaskSpec(
            "cleanup", ("true",), depends_on=("transform",), trigger_rule=TriggerRule.ALL_DONE
        ),
    ),
)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "rm")
    yield s
    s.close()


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def ready(task: str, attempt: int = 1) -> ev.TaskReady:
    return ev.TaskReady(run_id=RUN, task=task, attempt=attempt, scheduled_for=T0)


def claimed(task: str, when: float, attempt: int = 1) -> list[ev.RunEvent]:
    event = ev.TaskClaimed(
        run_id=RUN,
        task=task,
        attempt=attempt,
        epoch=attempt,
        worker_id=f"w-{task}",
        lease_expires_at=at(when + 60),
        lease_ttl=timedelta(seconds=60),
        scheduled_for=T0,
        command=("true",),
        timeout=timedelta(hours=1),
    )
    return command(f"claim-{task}-{attempt}", event, at=at(when), job_id=JOB)


def ended(task: str, when: float, exit_code: int, *then: ev.Event, attempt: int = 1) -> Any:
    common: dict[str, Any] = {
        "run_id": RUN,
        "task": task,
        "attempt": attempt,
        "epoch": attempt,
        "worker_id": f"w-{task}",
        "exit_code": exit_code,
        "output_tail": f"{task} says {exit_code}\n",
        "started_at": at(when - 0.5),
        "finished_at": at(when),
    }
    event: ev.Event = (
        ev.TaskSucceeded(**common)
        if exit_code == 0
        else ev.TaskFailed(failure_kind=FailureKind.NONZERO_EXIT, **common)
    )
    return command(f"done-{task}-{attempt}", event, *then, at=at(when), job_id=JOB)


def start(store: Store) -> None:
    scheduled = ev.RunScheduled(
        run_id=RUN, scheduled_for=T0, trigger=RunTrigger.MANUAL, tasks=TASKS, next_fire_at=None
    )
    feed(
        store,
        *command("reg", ev.JobRegistered(spec=SPEC, next_fire_at=None), job_id=JOB),
        *command("trigger", scheduled, ready("extract"), job_id=JOB),
    )


def run_doc(store: Store) -> dict[str, Any]:
    run = views.get_run(store, RUN)
    assert run is not None
    RunOut.model_validate(run)  # what GET /runs/{run_id} answers
    return run


def summary(run: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(run[k] for k in ("decided_by", "exit_code", "failure_kind", "output_tail"))


def test_a_failed_run_is_summarised_by_the_failing_task_not_the_cleanup(store: Store) -> None:
    start(store)
    feed(
        store,
        *claimed("extract", 0.1),
        *ended("extract", 1, 0, ready("transform")),
        *claimed("transform", 1.1),
        *ended("transform", 2, 5, ready("cleanup")),
        *claimed("cleanup", 2.1),
    )
    assert summary(run_doc(store)) == ("transform", 5, "nonzero_exit", "transform says 5\n")
    feed(store, *ended("cleanup", 3, 0, ev.RunFailed(run_id=RUN)))
    run = run_doc(store)
    assert run["state"] == "failed"
    assert summary(run) == ("transform", 5, "nonzero_exit", "transform says 5\n")
    assert (run["attempt"], run["claimed_by"]) == (1, "w-transform")
    assert render.outcome(run) == "5 transform"


def test_a_task_that_failed_then_succeeded_on_its_retry_decides_nothing(store: Store) -> None:
    start(store)
    retry = ev.RetryScheduled(run_id=RUN, task="extract", attempt=2, retry_at=at(2))
    feed(
        store,
        *claimed("extract", 0.1),
        *ended("extract", 1, 3, retry),
        *command("retry", ready("extract", 2), at=at(2), job_id=JOB),
        *claimed("extract", 2.1, attempt=2),
        *ended("extract", 3, 0, ready("transform"), attempt=2),
        *claimed("transform", 3.1),
        *ended("transform", 4, 7, ready("cleanup")),
        *claimed("cleanup", 4.1),
        *ended("cleanup", 5, 0, ev.RunFailed(run_id=RUN)),
    )
    assert summary(run_doc(store)) == ("transform", 7, "nonzero_exit", "transform says 7\n")


def test_the_summary_instants_are_the_first_tasks_and_in_order(store: Store) -> None:
    start(store)
    feed(
        store,
        *claimed("extract", 0.1),
        *ended("extract", 1, 0, ready("transform")),
        *claimed("transform", 1.1),
        *ended("transform", 2, 0, ready("cleanup")),
        *claimed("cleanup", 2.1),
        *ended("cleanup", 3, 0, ev.RunSucceeded(run_id=RUN)),
    )
    run = run_doc(store)
    instants = [run[k] for k in ("ready_at", "claimed_at", "started_at", "finished_at")]
    assert instants == [
        "2026-03-01T12:00:00.000Z",
        "2026-03-01T12:00:00.100Z",
        "2026-03-01T12:00:00.500Z",
        "2026-03-01T12:00:03.000Z",
    ]
    assert summary(run) == ("cleanup", 0, None, "cleanup says 0\n")
