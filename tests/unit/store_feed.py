"""Run-events fed by hand to the API's store (no Kafka), for the projection's and the paging's
unit tests: records of ``JOB`` (every 10 s), its registration, a whole run per tick.

``feed`` applies records as the API's projection does (``apply`` in one ``Batch``); ``fire``
feeds one run's life; ``all_pages`` follows a listing's cursors to its end.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi.testclient import TestClient

from cronlog import events as ev
from cronlog.ids import event_id
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task
from cronlog.vocabulary import FailureKind, RunTrigger
from services.api.readmodel.projection import apply
from services.api.readmodel.reader import ReadModel
from services.api.readmodel.store import Batch, Store

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
SPEC = JobSpec(
    "ten", Schedule(ScheduleKind.CRON, "*/10 * * * * *"), main_task(("sh", "-c", "echo tick"))
)
JOB = "every-10s"


def rec(
    idem_key: str, index: int, event: ev.Event, at: datetime = T0, job_id: str = JOB
) -> ev.RunEvent:
    return ev.RunEvent(
        event_id=event_id(idem_key, job_id, index),
        job_id=job_id,
        at=at,
        idem_key=idem_key,
        index=index,
        event=event,
    )


def feed(store: Store, *records: ev.RunEvent) -> list[bool]:
    batch = Batch(store)
    applied = [apply(batch, r) for r in records]
    batch.commit()
    return applied


def command(
    idem_key: str, *events: ev.Event, at: datetime = T0, job_id: str = JOB
) -> list[ev.RunEvent]:
    return [rec(idem_key, i, e, at, job_id) for i, e in enumerate(events)]


def register(store: Store, next_fire_at: datetime = T0 + timedelta(seconds=10)) -> None:
    feed(store, *command("reg", ev.JobRegistered(spec=SPEC, next_fire_at=next_fire_at)))


def fire(store: Store, tick: datetime, worker: str = "w1", exit_code: int = 0) -> str:
    """Feed the whole life of one scheduled run that starts 0.25 s late; return its run_id."""
    run_id = f"r-{tick:%H%M%S}"
    nxt = tick + timedelta(seconds=10)
    claimed, started = tick + timedelta(seconds=0.2), tick + timedelta(seconds=0.25)
    finished = tick + timedelta(seconds=1)
    if exit_code == 0:
        outcome: list[ev.Event] = [
            ev.TaskSucceeded(
                run_id=run_id,
                task="main",
                attempt=1,
                epoch=1,
                worker_id=worker,
                exit_code=0,
                output_tail="tick\n",
                started_at=started,
                finished_at=finished,
            ),
            ev.RunSucceeded(run_id=run_id),
        ]
    else:
        outcome = [
            ev.TaskFailed(
                run_id=run_id,
                task="main",
                attempt=1,
                epoch=1,
                worker_id=worker,
                failure_kind=FailureKind.NONZERO_EXIT,
                exit_code=exit_code,
                output_tail="boom\n",
                started_at=started,
                finished_at=finished,
            ),
            ev.RunFailed(run_id=run_id),
        ]
    feed(
        store,
        *command(
            f"tick-{tick}",
            ev.RunScheduled(
                run_id=run_id,
                scheduled_for=tick,
                trigger=RunTrigger.SCHEDULE,
                tasks=("main",),
                next_fire_at=nxt,
            ),
            ev.TaskReady(run_id=run_id, task="main", attempt=1, scheduled_for=tick),
            at=tick,
        ),
        *command(
            f"claim-{run_id}",
            ev.TaskClaimed(
                run_id=run_id,
                task="main",
                attempt=1,
                epoch=1,
                worker_id=worker,
                lease_expires_at=claimed + timedelta(seconds=60),
                lease_ttl=timedelta(seconds=60),
                scheduled_for=tick,
                command=SPEC.task_specs[0].command,
                timeout=SPEC.timeout,
            ),
            at=claimed,
        ),
        *command(f"complete-{run_id}", *outcome, at=finished),
    )
    return run_id


URL = f"/api/v1/jobs/{JOB}/runs"


def fire_many(rm: ReadModel, n: int, fail_every: int = 0) -> list[str]:
    """Fire ``n`` runs 10 s apart; every ``fail_every``-th fails. Newest first."""
    ids = [
        fire(
            rm.store,
            T0 + timedelta(seconds=10 * i),
            exit_code=int(bool(fail_every and i % fail_every == 0)),
        )
        for i in range(n)
    ]
    return ids[::-1]


def all_pages(client: TestClient, url: str, key: str, **params: Any) -> tuple[list[str], int]:
    """Follow next_cursor to the end; return the ids seen and the number of pages."""
    seen: list[str] = []
    cursor, pages = None, 0
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        answer = client.get(url, params=query)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        seen += [r.get("run_id") or r.get("job_id") for r in body[key]]
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            return seen, pages
