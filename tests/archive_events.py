"""Synthetic run-events as the fold writes them, for the archive's tests and bench.

Each job is registered, then runs once per ``every`` with one task: RunScheduled, TaskReady,
TaskClaimed, TaskSucceeded, RunSucceeded (five events, their ``at`` a few ms apart). The
records are produced with the project's codec, keyed by job_id with the Java partitioner, in
transactions, as the scheduler produces them.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

from confluent_kafka import Producer

from cronlog import events as ev
from cronlog.ids import run_id_for_tick
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task
from tests.run_records import claimed, record, scheduled, succeeded
from topology.kafka.config import KafkaSettings
from topology.kafka.topics import Topics
from topology.wire.codec import encode_event

EVENTS_PER_RUN = 5
"""Events one synthetic run writes."""


def _rec(job: str, idem: str, index: int, at: datetime, event: ev.Event) -> ev.RunEvent:
    return record(idem, index, event, at=at, job_id=job)


def registered(job: str, tenant: str, at: datetime) -> ev.RunEvent:
    """Return the JobRegistered of a cron job of ``tenant`` at ``at``."""
    spec = JobSpec(
        f"job {job}", Schedule(ScheduleKind.CRON, "* * * * *"), main_task(("true",)), tenant=tenant
    )
    return _rec(job, f"reg-{job}", 0, at, ev.JobRegistered(spec=spec, next_fire_at=None))


def run_life(job: str, tick: datetime, *, finished: bool = True) -> list[ev.RunEvent]:
    """Return the events of one run of ``job`` for ``tick``; without ``finished``, only up to
    its TaskClaimed (a run still running: state ``running``)."""
    run = run_id_for_tick(job, tick)
    ms = timedelta(milliseconds=1)
    life: list[tuple[str, ev.Event]] = [
        ("tick", scheduled(run, tick, ready=("main",))),
        ("tick", ev.TaskReady(run_id=run, task="main", attempt=1, scheduled_for=tick)),
        (
            "claim",
            claimed(
                run, tick, expires_at=tick + timedelta(seconds=30), lease_ttl=timedelta(seconds=30)
            ),
        ),
    ]
    if finished:
        life += [
            (
                "done",
                succeeded(
                    run, output_tail="ok\n", started_at=tick + 2 * ms, finished_at=tick + 3 * ms
                ),
            ),
            ("done", ev.RunSucceeded(run_id=run, scheduled_for=tick)),
        ]
    out, index = [], {"tick": 0, "claim": 0, "done": 0}
    for i, (step, event) in enumerate(life):
        idem = f"{step}-{run}"
        out.append(_rec(job, idem, index[step], tick + i * ms, event))
        index[step] += 1
    return out


def history(
    jobs: list[tuple[str, str]], start: datetime, end: datetime, every: timedelta
) -> Iterator[ev.RunEvent]:
    """Yield, in ``at`` order, each job's JobRegistered at ``start`` and a finished run per
    ``every`` tick in ``[start + every, end)``.

    Args:
        jobs: (job_id, tenant) pairs.
        start, end: aware UTC instants.
        every: the interval between ticks.
    """
    for job, tenant in jobs:
        yield registered(job, tenant, start)
    tick = start + every
    while tick < end:
        for job, _ in jobs:
            yield from run_life(job, tick)
        tick += every


def produce(
    settings: KafkaSettings,
    records: list[ev.RunEvent] | Iterator[ev.RunEvent],
    *,
    per_transaction: int = 5000,
) -> int:
    """Produce ``records`` onto the run-events topic of ``settings`` in transactions, keyed by
    job_id (murmur2, as the fold); return how many."""
    topic = Topics.of(settings).run_events
    producer = Producer(
        settings.producer_config(
            **{
                "transactional.id": f"archive-synthetic-{id(records)}",
                "linger.ms": 20,
            }
        )
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    n = 0
    for run_event in records:
        producer.produce(topic, key=run_event.job_id.encode(), value=encode_event(run_event))
        n += 1
        if n % per_transaction == 0:
            producer.commit_transaction(60)
            producer.begin_transaction()
        producer.poll(0)
    producer.commit_transaction(60)
    producer.flush(30)
    return n
