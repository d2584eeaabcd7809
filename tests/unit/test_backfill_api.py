"""``POST /api/v1/jobs/{id}/backfill`` planned against a read model fed RunEvents by hand (no
Kafka): dry runs list the ticks, reprocess filters them, bad ranges are 422s."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.decide import handle
from cronlog.ids import run_id_for_backfill, run_id_for_tick
from cronlog.limits import MAX_BACKFILL_TASK_INSTANCES
from cronlog.model import JobSpec, Schedule, ScheduleKind, TaskSpec, main_task
from cronlog.time import iso
from cronlog.vocabulary import RunTrigger
from services.api.readmodel.reader import ReadModel
from tests.unit.rm_feed import CURSOR, HOURLY, JOB, T0, feed, register, run


def post(client: TestClient, job_id: str = JOB, **body: Any) -> Any:
    body = {"start": iso(T0), "end": iso(T0 + timedelta(hours=4)), "dry_run": True, **body}
    return client.post(f"/api/v1/jobs/{job_id}/backfill", json=body)


def ticks(answer: Any) -> list[str]:
    return [r["scheduled_for"] for r in answer.json()["runs"]]


HOURS = [iso(T0 + timedelta(hours=h)) for h in (1, 2, 3, 4)]  # (start, end]: 12:00 excluded


def test_dry_run_lists_the_ticks_in_the_half_open_range_with_their_run_ids(
    rm: ReadModel, client: TestClient
) -> None:
    register(rm)
    answer = post(client)
    assert answer.status_code == 200, answer.text
    assert answer.json()["dry_run"] is True
    assert ticks(answer) == HOURS
    assert [r["run_id"] for r in answer.json()["runs"]] == [
        run_id_for_tick(JOB, T0 + timedelta(hours=h)) for h in (1, 2, 3, 4)
    ]


def test_reprocess_filters_by_the_runs_each_tick_had(rm: ReadModel, client: TestClient) -> None:
    register(rm)
    h = [T0 + timedelta(hours=k) for k in range(5)]
    run(rm, h[1], "succeeded")
    run(rm, h[2], "failed")
    run(rm, h[3], "failed")
    run(rm, h[3], "succeeded", run_id_for_backfill(JOB, h[3], "k"), RunTrigger.BACKFILL)
    run(rm, h[4], "active")
    assert ticks(post(client)) == []  # every tick has a run
    assert ticks(post(client, reprocess="failed")) == [iso(h[2])]  # h3 succeeded once
    assert ticks(post(client, reprocess="all")) == HOURS
    assert [r["run_id"] for r in post(client, reprocess="all").json()["runs"]] == [None] * 4


def test_max_runs_takes_the_oldest_ticks(rm: ReadModel, client: TestClient) -> None:
    register(rm)
    run(rm, T0 + timedelta(hours=1), "succeeded")
    assert ticks(post(client, max_runs=2)) == HOURS[1:3]


def test_ticks_the_schedule_still_owns_are_left_out(rm: ReadModel, client: TestClient) -> None:
    register(rm, cursor=T0 + timedelta(hours=3))
    assert ticks(post(client)) == HOURS[:2]
    now = datetime.now(UTC)
    register(rm, job_id="future", cursor=None)
    answer = post(
        client, "future", start=iso(now - timedelta(hours=2)), end=iso(now + timedelta(hours=5))
    )
    assert all(t <= iso(now) for t in ticks(answer)) and len(ticks(answer)) in (1, 2)


def test_every_and_once_schedules_backfill_their_own_ticks(
    rm: ReadModel, client: TestClient
) -> None:
    register(rm, Schedule(ScheduleKind.EVERY, interval=timedelta(minutes=90)), job_id="every")
    assert ticks(post(client, "every")) == [iso(T0 + timedelta(hours=h)) for h in (1.5, 3)]
    register(
        rm, Schedule(ScheduleKind.ONCE, run_at=T0 + timedelta(hours=2)), job_id="once", cursor=None
    )
    assert ticks(post(client, "once")) == [HOURS[1]]
    register(rm, Schedule(ScheduleKind.MANUAL), job_id="manual", cursor=None)
    assert ticks(post(client, "manual")) == []


def test_more_than_1000_runs_is_422_naming_end_unless_max_runs(
    rm: ReadModel, client: TestClient
) -> None:
    register(rm, Schedule(ScheduleKind.CRON, "* * * * *"))
    end = iso(T0 + timedelta(minutes=1001))
    answer = post(client, end=end)
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["loc"] == ["body", "end"]
    assert len(ticks(post(client, end=end, max_runs=1000))) == 1000
    assert post(client, end=iso(T0 + timedelta(minutes=1000))).status_code == 200
    too_big = post(client, max_runs=1001)
    assert too_big.status_code == 422 and too_big.json()["detail"][0]["loc"] == ["body", "max_runs"]


@pytest.mark.parametrize(
    "body",
    [
        {"end": iso(T0)},  # empty range
        {"end": iso(T0 - timedelta(hours=1))},  # reversed
        {"start": "2024-03-01T12:00:00"},  # no zone
        {"reprocess": "some"},
    ],
)
def test_bad_requests_are_422(rm: ReadModel, client: TestClient, body: dict[str, Any]) -> None:
    register(rm)
    assert post(client, **body).status_code == 422


def test_unknown_job_is_404_and_deleted_job_409(rm: ReadModel, client: TestClient) -> None:
    assert post(client, "nope").status_code == 404
    register(rm)
    feed(rm, "del", ev.JobDeleted())
    assert post(client).status_code == 409


def test_backfill_runs_do_not_move_the_jobs_next_run(rm: ReadModel, client: TestClient) -> None:
    register(rm)
    tick = T0 + timedelta(hours=1)
    feed(
        rm,
        "bf",
        ev.RunScheduled(
            run_id=run_id_for_tick(JOB, tick),
            scheduled_for=tick,
            trigger=RunTrigger.BACKFILL,
            tasks=("main",),
            next_fire_at=None,
        ),
    )
    job = client.get(f"/api/v1/jobs/{JOB}").json()
    assert job["next_run_at"] == iso(CURSOR)
    assert client.get(f"/api/v1/runs/{run_id_for_tick(JOB, tick)}").json()["trigger"] == "backfill"


def test_dry_run_names_the_run_ids_a_re_registered_job_will_get(
    rm: ReadModel, client: TestClient
) -> None:
    # The fold's run ids of a job registered again after a delete carry its incarnation
    # (cronlog.ids.run_id_for_tick); the dry run must list those, not the first
    # registration's.
    spec = JobSpec("j", HOURLY, main_task(("true",)))
    state, _ = handle(
        None, cmd.Envelope(idem_key="r1", job_id=JOB, command=cmd.RegisterJob(spec=spec)), T0
    )
    state, _ = handle(state, cmd.Envelope(idem_key="d", job_id=JOB, command=cmd.DeleteJob()), T0)
    state, _ = handle(
        state, cmd.Envelope(idem_key="r2", job_id=JOB, command=cmd.RegisterJob(spec=spec)), T0
    )
    assert state is not None and state.incarnation == 1
    register(rm)
    feed(rm, "del", ev.JobDeleted())
    feed(rm, "reg-again", ev.JobRegistered(spec=spec, next_fire_at=CURSOR))
    answer = post(client)
    assert answer.status_code == 200, answer.text
    assert [r["run_id"] for r in answer.json()["runs"]] == [
        run_id_for_tick(JOB, T0 + timedelta(hours=h), state.incarnation) for h in (1, 2, 3, 4)
    ]


def test_a_job_of_many_tasks_may_backfill_only_as_many_runs_as_its_record_holds(
    rm: ReadModel, client: TestClient
) -> None:
    """The fold refuses a backfill of more than MAX_BACKFILL_TASK_INSTANCES task instances
    (record_too_large); the API refuses such a request first, naming the field."""
    names = tuple(f"t{i}" for i in range(200))
    spec = JobSpec(
        "j",
        Schedule(ScheduleKind.CRON, "* * * * *"),
        task_specs=tuple(TaskSpec(n, ("true",)) for n in names),
        max_active_runs=1,
        max_active_tasks=200,
    )
    feed(rm, "reg-wide", ev.JobRegistered(spec=spec, next_fire_at=CURSOR))
    most = MAX_BACKFILL_TASK_INSTANCES // 200
    assert most == 17
    over = post(client, end=iso(T0 + timedelta(minutes=most + 1)))
    assert over.status_code == 422, over.text
    [error] = over.json()["detail"]
    assert error["loc"] == ["body", "end"]
    assert "more than 17 ticks need a run (runs of 200 tasks)" in error["msg"]
    assert len(ticks(post(client, end=iso(T0 + timedelta(minutes=most))))) == most
    too_many = post(client, end=iso(T0 + timedelta(minutes=60)), max_runs=most + 1)
    assert too_many.status_code == 422, too_many.text
    [error] = too_many.json()["detail"]
    assert error["loc"] == ["body", "max_runs"]
    assert "at most 17 for this job" in error["msg"]
    capped = post(client, end=iso(T0 + timedelta(minutes=60)), max_runs=most)
    assert len(ticks(capped)) == most
