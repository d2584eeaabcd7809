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
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task
from services.api.readmodel.projection import apply
from services.api.readmodel.reader import ReadModel
from services.api.readmodel.store import Batch, Store
from tests.run_records import claimed, failed, records, scheduled, succeeded

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
SPEC = JobSpec(
    "ten", Schedule(ScheduleKind.CRON, "*/10 * * * * *"), main_task(("sh", "-c", "echo tick"))
)
JOB = "every-10s"


def feed(store: Store, *rows: ev.RunEvent) -> list[bool]:
    batch = Batch(store)
    applied = [apply(batch, r) for r in rows]
    batch.commit()
    return applied


def command(
    idem_key: str, *events: ev.Event, at: datetime = T0, job_id: str = JOB
) -> list[ev.RunEvent]:
    return records(idem_key, *events, at=at, job_id=job_id)


def register(store: Store, next_fire_at: datetime = T0 + timedelta(seconds=10)) -> None:
    feed(store, *command("reg", ev.JobRegistered(spec=SPEC, next_fire_at=next_fire_at)))


def fire(store: Store, tick: datetime, worker: str = "w1", exit_code: int = 0) -> str:
    """Feed the whole life of one scheduled run that starts 0.25 s late; return its run_id."""
    run_id = f"r-{tick:%H%M%S}"
    nxt = tick + timedelta(seconds=10)
    claimed_at, started = tick + timedelta(seconds=0.2), tick + timedelta(seconds=0.25)
    finished = tick + timedelta(seconds=1)
    if exit_code == 0:
        outcome: list[ev.Event] = [
            succeeded(
                run_id,
                worker=worker,
                output_tail="tick\n",
                started_at=started,
                finished_at=finished,
            ),
            ev.RunSucceeded(run_id=run_id),
        ]
    else:
        outcome = [
            failed(
                run_id,
                worker=worker,
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
            scheduled(run_id, tick, next_fire_at=nxt),
            ev.TaskReady(run_id=run_id, task="main", attempt=1, scheduled_for=tick),
            at=tick,
        ),
        *command(
            f"claim-{run_id}",
            claimed(
                run_id,
                tick,
                expires_at=claimed_at + timedelta(seconds=60),
                worker=worker,
                command=SPEC.task_specs[0].command,
                timeout=SPEC.timeout,
            ),
            at=claimed_at,
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
