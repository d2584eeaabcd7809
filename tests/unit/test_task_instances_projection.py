"""The run document's ``task_instances``: one entry per task of a DAG run, fed RunEvents by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from cronlog import events as ev
from cronlog.model import JobSpec, Schedule, ScheduleKind, TaskSpec, TriggerRule, main_task
from cronlog.vocabulary import CancelReason, RunTrigger
from services.api.readmodel import views
from services.api.readmodel.store import Store
from services.api.shapes.responses import RunOut
from tests.run_records import failed as task_failed
from tests.unit.store_feed import command, feed

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
JOB = "etl"
RUN = "r-etl"
TASKS = ("extract", "transform", "load")
SPEC = JobSpec(
    "etl",
    Schedule(ScheduleKind.MANUAL),
    task_specs=(
        TaskSpec("extract", ("true",)),
        TaskSpec("transform", ("true",), depends_on=("extract",)),
        TaskSpec("load", ("true",), depends_on=("transform",), trigger_rule=TriggerRule.ALL_DONE),
    ),
)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def start(store: Store) -> None:
    feed(
        store,
        *command("reg", ev.JobRegistered(spec=SPEC, next_fire_at=None), job_id=JOB),
        *command(
            "trigger",
            ev.RunScheduled(
                run_id=RUN,
                scheduled_for=T0,
                trigger=RunTrigger.MANUAL,
                tasks=TASKS,
                next_fire_at=None,
            ),
            ev.TaskReady(run_id=RUN, task="extract", attempt=1, scheduled_for=T0),
            job_id=JOB,
        ),
    )


def claim(task: str, attempt: int, epoch: int, when: float) -> list[ev.RunEvent]:
    return command(
        f"claim-{task}-{epoch}",
        ev.TaskClaimed(
            run_id=RUN,
            task=task,
            attempt=attempt,
            epoch=epoch,
            worker_id="w1",
            lease_expires_at=at(when + 60),
            lease_ttl=timedelta(seconds=60),
            scheduled_for=T0,
            command=("true",),
            timeout=timedelta(hours=1),
        ),
        at=at(when),
        job_id=JOB,
    )


def succeeded(task: str, when: float, *then: ev.Event) -> list[ev.RunEvent]:
    return command(
        f"done-{task}",
        ev.TaskSucceeded(
            run_id=RUN,
            task=task,
            attempt=1,
            epoch=1,
            worker_id="w1",
            exit_code=0,
            output_tail="",
            started_at=at(when - 0.5),
            finished_at=at(when),
        ),
        *then,
        at=at(when),
        job_id=JOB,
    )


def instances(store: Store) -> dict[str, dict[str, Any]]:
    run = views.get_run(store, RUN)
    assert run is not None
    RunOut.model_validate(run)  # what GET /runs/{run_id} answers
    return {ti["task"]: ti for ti in run["task_instances"]}


def test_a_scheduled_dag_run_lists_every_task_in_order_root_ready_others_pending(
    store: Store,
) -> None:
    start(store)
    run = views.get_run(store, RUN)
    assert run is not None
    assert [ti["task"] for ti in run["task_instances"]] == list(TASKS)
    tis = instances(store)
    assert tis["extract"]["state"] == "ready"
    assert tis["extract"]["ready_at"] == "2026-03-01T12:00:00.000Z"
    assert tis["transform"]["state"] == tis["load"]["state"] == "pending"
    assert tis["load"]["trigger_rule"] == "all_done"
    assert tis["transform"]["trigger_rule"] == "all_success"


def test_each_task_keeps_its_own_state_worker_and_timings(store: Store) -> None:
    start(store)
    feed(
        store,
        *claim("extract", 1, 1, 0.1),
        *succeeded(
            "extract", 1, ev.TaskReady(run_id=RUN, task="transform", attempt=1, scheduled_for=T0)
        ),
        *claim("transform", 1, 1, 1.1),
    )
    tis = instances(store)
    assert (tis["extract"]["state"], tis["extract"]["exit_code"]) == ("succeeded", 0)
    assert tis["extract"]["started_at"] == "2026-03-01T12:00:00.500Z"
    assert tis["extract"]["finished_at"] == "2026-03-01T12:00:01.000Z"
    assert tis["transform"]["state"] == "running"
    assert tis["transform"]["worker_id"] == "w1"
    assert tis["transform"]["claimed_at"] == "2026-03-01T12:00:01.100Z"
    assert tis["load"]["state"] == "pending"
    run = views.get_run(store, RUN)
    assert run is not None and run["state"] == "running"  # run-level: the latest task event


def test_a_retry_shows_retrying_then_the_next_attempt_ready(store: Store) -> None:
    start(store)
    failed = task_failed(RUN, task="extract", exit_code=3, started_at=at(0.5), finished_at=at(1))
    feed(
        store,
        *claim("extract", 1, 1, 0.1),
        *command(
            "fail-1",
            failed,
            ev.RetryScheduled(run_id=RUN, task="extract", attempt=2, retry_at=at(3)),
            at=at(1),
            job_id=JOB,
        ),
    )
    ti = instances(store)["extract"]
    assert (ti["state"], ti["attempt"], ti["exit_code"]) == ("retrying", 1, 3)
    assert ti["failure_kind"] == "nonzero_exit"
    assert ti["retry_at"] == "2026-03-01T12:00:03.000Z"
    feed(
        store,
        *command(
            "retry",
            ev.TaskReady(run_id=RUN, task="extract", attempt=2, scheduled_for=T0),
            at=at(3),
            job_id=JOB,
        ),
    )
    ti = instances(store)["extract"]
    assert (ti["state"], ti["attempt"], ti["exit_code"], ti["retry_at"]) == ("ready", 2, None, None)


def test_a_failed_root_leaves_its_downstream_upstream_failed_and_all_done_runs(
    store: Store,
) -> None:
    start(store)
    failed = task_failed(RUN, task="extract", exit_code=1, started_at=at(0.5), finished_at=at(1))
    feed(
        store,
        *claim("extract", 1, 1, 0.1),
        *command(
            "fail",
            failed,
            ev.TaskUpstreamFailed(run_id=RUN, task="transform", trigger_rule="all_success"),
            ev.TaskReady(run_id=RUN, task="load", attempt=1, scheduled_for=T0),
            at=at(1),
            job_id=JOB,
        ),
    )
    tis = instances(store)
    assert tis["extract"]["state"] == "failed"
    assert tis["transform"]["state"] == "upstream_failed"
    assert tis["transform"]["finished_at"] == "2026-03-01T12:00:01.000Z"
    assert tis["transform"]["worker_id"] is None
    assert tis["load"]["state"] == "ready"


def test_skipped_tasks_show_their_rule(store: Store) -> None:
    start(store)
    feed(
        store,
        *claim("extract", 1, 1, 0.1),
        *succeeded(
            "extract",
            1,
            ev.TaskSkipped(run_id=RUN, task="transform", trigger_rule="one_failed"),
            ev.TaskSkipped(run_id=RUN, task="load", trigger_rule="all_success"),
            ev.RunSucceeded(run_id=RUN),
        ),
    )
    tis = instances(store)
    assert (tis["transform"]["state"], tis["transform"]["trigger_rule"]) == (
        "skipped",
        "one_failed",
    )
    assert tis["load"]["state"] == "skipped"
    run = views.get_run(store, RUN)
    assert run is not None and run["state"] == "succeeded"


def test_a_released_task_is_ready_again_and_a_cancelled_run_cancels_the_rest(store: Store) -> None:
    start(store)
    feed(
        store,
        *claim("extract", 1, 1, 0.1),
        *command(
            "release",
            ev.TaskReleased(
                run_id=RUN, task="extract", attempt=1, epoch=1, worker_id="w1", reason="drain"
            ),
            ev.TaskReady(run_id=RUN, task="extract", attempt=1, scheduled_for=T0),
            at=at(1),
            job_id=JOB,
        ),
    )
    ti = instances(store)["extract"]
    assert (ti["state"], ti["worker_id"], ti["epoch"]) == ("ready", None, 1)
    feed(
        store,
        *claim("extract", 1, 2, 1.5),
        *command(
            "cancel", ev.RunCancelled(run_id=RUN, reason=CancelReason.USER), at=at(2), job_id=JOB
        ),
    )
    tis = instances(store)
    assert {t: ti["state"] for t, ti in tis.items()} == dict.fromkeys(TASKS, "cancelled")
    assert tis["extract"]["epoch"] == 2
    run = views.get_run(store, RUN)
    assert run is not None  # the attempt it stopped ends with it, not "running" forever
    assert [(a["task"], a["state"], a["finished_at"] is not None) for a in run["attempts"]] == [
        ("extract", "cancelled", True)
    ]


def test_one_task_cancelled_alone(store: Store) -> None:
    start(store)
    feed(
        store,
        *command(
            "cancel-t",
            ev.TaskCancelled(run_id=RUN, task="extract", attempt=1),
            ev.TaskUpstreamFailed(run_id=RUN, task="transform", trigger_rule="all_success"),
            ev.TaskReady(run_id=RUN, task="load", attempt=1, scheduled_for=T0),
            at=at(1),
            job_id=JOB,
        ),
    )
    tis = instances(store)
    assert [tis[t]["state"] for t in TASKS] == ["cancelled", "upstream_failed", "ready"]


def test_a_one_task_run_has_one_instance_named_main(store: Store) -> None:
    spec = JobSpec("one", Schedule(ScheduleKind.MANUAL), main_task(("true",)))
    feed(
        store,
        *command("reg", ev.JobRegistered(spec=spec, next_fire_at=None), job_id="one"),
        *command(
            "trigger",
            ev.RunScheduled(
                run_id="r1",
                scheduled_for=T0,
                trigger=RunTrigger.MANUAL,
                tasks=("main",),
                next_fire_at=None,
            ),
            ev.TaskReady(run_id="r1", task="main", attempt=1, scheduled_for=T0),
            job_id="one",
        ),
    )
    run = views.get_run(store, "r1")
    assert run is not None
    assert [(ti["task"], ti["state"], ti["trigger_rule"]) for ti in run["task_instances"]] == [
        ("main", "ready", None)
    ]


def test_a_dag_runs_trigger_lag_and_start_are_its_first_tasks(store: Store) -> None:
    start(store)
    feed(
        store,
        *claim("extract", 1, 1, 0.2),
        *succeeded(
            "extract", 1.0, ev.TaskReady(run_id=RUN, task="transform", attempt=1, scheduled_for=T0)
        ),
        *claim("transform", 1, 1, 3.0),
        *succeeded("transform", 5.0),
    )
    run = views.get_run(store, RUN)
    assert run is not None  # extract started 0.5 s after the tick; transform's later start
    # (it waited for extract) is not the run's lag
    assert (run["trigger_lag_s"], run["started_at"]) == (0.5, "2026-03-01T12:00:00.500Z")
