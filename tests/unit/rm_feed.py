"""A read model fed RunEvents by hand (no Kafka), for the API's unit tests: one hourly job
``JOB`` registered, its runs in each outcome, a dead-lettered run, a job of another tenant.

Every record is applied as the API's projection applies it (``apply`` in one ``Batch``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cronlog import events as ev
from cronlog.ids import run_id_for_tick
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task
from cronlog.vocabulary import FailureKind, RunTrigger
from services.api.readmodel.projection import apply
from services.api.readmodel.reader import ReadModel
from services.api.readmodel.store import Batch
from tests.run_records import claimed, failed, records, scheduled, succeeded

T0 = datetime(2024, 3, 1, 12, 0, 0, tzinfo=UTC)
HOURLY = Schedule(ScheduleKind.CRON, "0 * * * *")
CURSOR = datetime(2030, 1, 1, tzinfo=UTC)  # the schedule's next tick: far ahead of the range
JOB = "bf-job"


def feed(
    rm: ReadModel, idem_key: str, *events: ev.Event, job_id: str = JOB, at: datetime = T0
) -> None:
    """Apply the events of command ``idem_key`` of ``job_id``, decided at ``at``, in one batch."""
    batch = Batch(rm.store)
    for r in records(idem_key, *events, at=at, job_id=job_id):
        apply(batch, r)
    batch.commit()


def register(
    rm: ReadModel, schedule: Schedule = HOURLY, job_id: str = JOB, cursor: datetime | None = CURSOR
) -> None:
    feed(
        rm,
        f"reg-{job_id}",
        ev.JobRegistered(spec=JobSpec("j", schedule, main_task(("true",))), next_fire_at=cursor),
        job_id=job_id,
    )


def run(
    rm: ReadModel,
    tick: datetime,
    outcome: str,
    run_id: str | None = None,
    trigger: RunTrigger = RunTrigger.SCHEDULE,
) -> str:
    rid = run_id or run_id_for_tick(JOB, tick)
    events: list[ev.Event] = [scheduled(rid, tick, trigger=trigger, next_fire_at=CURSOR)]
    if outcome != "active":
        events += [
            ev.TaskReady(run_id=rid, task="main", attempt=1, scheduled_for=tick),
            claimed(
                rid,
                tick,
                expires_at=tick,
                worker="w",
                lease_ttl=timedelta(60),
                command=("x",),
                timeout=timedelta(60),
            ),
        ]
        if outcome == "succeeded":
            events += [
                succeeded(rid, worker="w", started_at=tick, finished_at=tick),
                ev.RunSucceeded(run_id=rid),
            ]
        else:
            events += [
                failed(rid, worker="w", started_at=tick, finished_at=tick),
                ev.RunFailed(run_id=rid),
            ]
    feed(rm, f"run-{rid}", *events)
    return rid


def dead_letter(rm: ReadModel, hours: int, job_id: str = JOB) -> str:
    """Feed a run of ``job_id`` at ``T0 + hours`` whose one attempt failed (exit 3) and was
    dead-lettered, decided at its tick; return its run_id."""
    tick = T0 + timedelta(hours=hours)
    rid = run_id_for_tick(job_id, tick)
    feed(
        rm,
        f"dl-{rid}",
        scheduled(rid, tick),
        ev.TaskReady(run_id=rid, task="main", attempt=1, scheduled_for=tick),
        failed(rid, worker="w", exit_code=3, output_tail="boom", started_at=tick, finished_at=tick),
        ev.TaskDeadLettered(
            run_id=rid,
            task="main",
            attempt=1,
            failure_kind=FailureKind.NONZERO_EXIT,
            exit_code=3,
            output_tail="boom",
        ),
        ev.RunFailed(run_id=rid),
        job_id=job_id,
        at=tick,  # the fold's now: when it was dead-lettered
    )
    return rid


def register_for(rm: ReadModel, tenant: str, job_id: str) -> None:
    spec = JobSpec("j", HOURLY, main_task(("true",)), tenant=tenant)
    feed(rm, f"reg-{job_id}", ev.JobRegistered(spec=spec, next_fire_at=None), job_id=job_id)
