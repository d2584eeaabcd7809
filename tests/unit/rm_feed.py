"""A read model fed RunEvents by hand (no Kafka), for the API's unit tests: one hourly job
``JOB`` registered, its runs in each outcome, a dead-lettered run, a job of another tenant.

Every record is applied as the API's projection applies it (``apply`` in one ``Batch``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cronlog import events as ev
from cronlog.ids import event_id, run_id_for_tick
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task
from cronlog.vocabulary import FailureKind, RunTrigger
from services.api.readmodel.projection import apply
from services.api.readmodel.reader import ReadModel
from services.api.readmodel.store import Batch

T0 = datetime(2024, 3, 1, 12, 0, 0, tzinfo=UTC)
HOURLY = Schedule(ScheduleKind.CRON, "0 * * * *")
CURSOR = datetime(2030, 1, 1, tzinfo=UTC)  # the schedule's next tick: far ahead of the range
JOB = "bf-job"


def feed(rm: ReadModel, idem_key: str, *events: ev.Event, job_id: str = JOB) -> None:
    batch = Batch(rm.store)
    for i, event in enumerate(events):
        apply(
            batch,
            ev.RunEvent(
                event_id=event_id(idem_key, job_id, i),
                job_id=job_id,
                at=T0,
                idem_key=idem_key,
                index=i,
                event=event,
            ),
        )
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
    events: list[ev.Event] = [
        ev.RunScheduled(
            run_id=rid, scheduled_for=tick, trigger=trigger, tasks=("main",), next_fire_at=CURSOR
        )
    ]
    if outcome != "active":
        events += [
            ev.TaskReady(run_id=rid, task="main", attempt=1, scheduled_for=tick),
            ev.TaskClaimed(
                run_id=rid,
                task="main",
                attempt=1,
                epoch=1,
                worker_id="w",
                lease_expires_at=tick,
                lease_ttl=timedelta(60),
                scheduled_for=tick,
                command=("x",),
                timeout=timedelta(60),
            ),
        ]
        if outcome == "succeeded":
            events += [
                ev.TaskSucceeded(
                    run_id=rid,
                    task="main",
                    attempt=1,
                    epoch=1,
                    worker_id="w",
                    exit_code=0,
                    output_tail="",
                    started_at=tick,
                    finished_at=tick,
                ),
                ev.RunSucceeded(run_id=rid),
            ]
        else:
            events += [
                ev.TaskFailed(
                    run_id=rid,
                    task="main",
                    attempt=1,
                    epoch=1,
                    worker_id="w",
                    failure_kind=FailureKind.NONZERO_EXIT,
                    exit_code=1,
                    output_tail="",
                    started_at=tick,
                    finished_at=tick,
                ),
                ev.RunFailed(run_id=rid),
            ]
    feed(rm, f"run-{rid}", *events)
    return rid


def dead_letter(rm: ReadModel, hours: int, job_id: str = JOB) -> str:
    tick = T0 + timedelta(hours=hours)
    rid = run_id_for_tick(job_id, tick)
    events: list[ev.Event] = [
        ev.RunScheduled(
            run_id=rid,
            scheduled_for=tick,
            trigger=RunTrigger.SCHEDULE,
            tasks=("main",),
            next_fire_at=None,
        ),
        ev.TaskReady(run_id=rid, task="main", attempt=1, scheduled_for=tick),
        ev.TaskFailed(
            run_id=rid,
            task="main",
            attempt=1,
            epoch=1,
            worker_id="w",
            failure_kind=FailureKind.NONZERO_EXIT,
            exit_code=3,
            output_tail="boom",
            started_at=tick,
            finished_at=tick,
        ),
        ev.TaskDeadLettered(
            run_id=rid,
            task="main",
            attempt=1,
            failure_kind=FailureKind.NONZERO_EXIT,
            exit_code=3,
            output_tail="boom",
        ),
        ev.RunFailed(run_id=rid),
    ]
    batch_at = T0 + timedelta(hours=hours)  # the fold's now: when it was dead-lettered
    batch = Batch(rm.store)
    for i, event in enumerate(events):
        apply(
            batch,
            ev.RunEvent(
                event_id=event_id(f"dl-{rid}", job_id, i),
                job_id=job_id,
                at=batch_at,
                idem_key=f"dl-{rid}",
                index=i,
                event=event,
            ),
        )
    batch.commit()
    return rid


def register_for(rm: ReadModel, tenant: str, job_id: str) -> None:
    spec = JobSpec("j", HOURLY, main_task(("true",)), tenant=tenant)
    feed(rm, f"reg-{job_id}", ev.JobRegistered(spec=spec, next_fire_at=None), job_id=job_id)
