"""A job whose schedule fires no more says ``done`` once its last run ended (issue 24, item 6):
a one-off job after its only run, a job whose ``max_runs`` are spent; fed RunEvents by hand."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cronlog import events as ev
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task
from cronlog.vocabulary import RunTrigger
from services.api.readmodel import listings, views
from services.api.readmodel.store import Store
from tests.unit.store_feed import command, feed

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "rm")
    yield s
    s.close()


def fire(store: Store, job_id: str, spec: JobSpec, *, remaining: int | None) -> None:
    """Register ``job_id``, fire one run that leaves no next tick, and leave it running."""
    scheduled = ev.RunScheduled(
        run_id=f"r-{job_id}",
        scheduled_for=T0,
        trigger=RunTrigger.SCHEDULE,
        tasks=("main",),
        next_fire_at=None,
        runs_remaining=remaining,
    )
    feed(
        store,
        *command(f"reg-{job_id}", ev.JobRegistered(spec=spec, next_fire_at=T0), job_id=job_id),
        *command(f"tick-{job_id}", scheduled, job_id=job_id),
    )


def status(store: Store, job_id: str) -> str:
    job = views.get_job(store, job_id)
    assert job is not None
    return str(job["status"])


def test_a_one_off_job_is_done_once_its_only_run_ended(store: Store) -> None:
    once = JobSpec("once", Schedule(ScheduleKind.ONCE, run_at=T0), main_task(("true",)))
    fire(store, "once", once, remaining=None)
    assert status(store, "once") == "active"  # its run is still going
    feed(store, *command("end", ev.RunSucceeded(run_id="r-once"), job_id="once"))
    assert status(store, "once") == "done"
    assert [j["job_id"] for j in views.list_jobs(store, "done")] == ["once"]
    assert views.list_jobs(store, "active") == []
    page = listings.jobs_page(store, limit=10, status="done")
    assert [j["job_id"] for j in page.rows] == ["once"]


def test_a_cron_job_is_done_when_its_max_runs_are_spent_and_not_before(store: Store) -> None:
    cron = JobSpec("c", Schedule(ScheduleKind.CRON, "* * * * *"), main_task(("true",)))
    fire(store, "spent", replace(cron, schedule=replace(cron.schedule, max_runs=1)), remaining=0)
    feed(store, *command("end", ev.RunFailed(run_id="r-spent"), job_id="spent"))
    assert status(store, "spent") == "done"
    feed(
        store,
        *command("reg-live", ev.JobRegistered(spec=cron, next_fire_at=T0), job_id="live"),
    )
    assert status(store, "live") == "active"  # never fired: not done
    feed(store, *command("pause", ev.JobPaused(), job_id="spent"))
    assert status(store, "spent") == "paused"
