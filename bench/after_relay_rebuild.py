"""Benchmark: the after relay's start-up rebuild, with and without a snapshot, on a real broker.

Usage: ``.venv/bin/python bench/after_relay_rebuild.py [--events 200000] [--tail 5000]``
(needs a broker: ``KAFKA_BOOTSTRAP`` or the local one from ``ops/kafka start``).

Appends ``--events`` synthetic run-events (500 jobs, one in ten ``after`` another; runs
scheduled and ended, the last of each job left active) to a fresh topic prefix (12
partitions), commits the relay group at the end of the log, and times ``AfterRelay._rebuild``
with no snapshot (the whole history, today's start); then writes a snapshot there, appends
``--tail`` more events, commits again, and times the rebuild from the snapshot. Both indexes
are checked equal to a full fold. The bench topics are deleted at the end.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cronlog.vocabulary import RunTrigger

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

from cronlog import events as ev  # noqa: E402
from cronlog.after_index import AfterIndex  # noqa: E402
from cronlog.model import AfterOn, JobSpec, Schedule, ScheduleKind, main_task  # noqa: E402
from services.scheduler.after_relay import AfterRelay, relay_group  # noqa: E402
from topology.kafka.bootstrap import ensure_topics  # noqa: E402
from topology.kafka.config import KafkaSettings  # noqa: E402
from topology.kafka.log_reader import watermarks  # noqa: E402
from topology.kafka.topics import Topics, topic_specs  # noqa: E402
from topology.wire.codec import Codec  # noqa: E402

JOBS = 500
T0 = datetime(2024, 1, 1, tzinfo=UTC)


def synthetic(count: int, first: int = 0) -> list[ev.RunEvent]:
    """Return ``count`` run-events numbered from ``first``: job definitions, then run pairs.

    Event ``i`` (``i >= JOBS``) belongs to job ``i % JOBS``; that job's events alternate
    RunScheduled / RunSucceeded, so each job has at most one active run.
    """
    out = []
    for i in range(first, first + count):
        job = f"job-{i % JOBS}"
        at = T0 + timedelta(seconds=i)
        if i < JOBS:
            up = f"job-{i - 1}"
            sched = (
                Schedule(ScheduleKind.AFTER, after_job_id=up, after_on=AfterOn.DONE)
                if i % 10 == 1
                else Schedule(ScheduleKind.MANUAL)
            )
            event: ev.Event = ev.JobRegistered(
                spec=JobSpec(job, sched, main_task(("true",))), next_fire_at=None
            )
        else:
            n = i // JOBS
            run_id = f"r{i % JOBS}-{(n + 1) // 2}"
            event = (
                ev.RunScheduled(
                    run_id=run_id,
                    scheduled_for=at,
                    trigger=RunTrigger.MANUAL,
                    tasks=("main",),
                    next_fire_at=None,
                )
                if n % 2
                else ev.RunSucceeded(run_id=run_id, tenant="team-a")  # as the fold stamps it
            )
        out.append(
            ev.RunEvent(event_id=f"e{i}", job_id=job, at=at, idem_key=f"k{i}", index=0, event=event)
        )
    return out


def append(settings: KafkaSettings, records: list[ev.RunEvent]) -> None:
    """Append ``records`` to run-events keyed by job (the fold's partitioning)."""
    codec, topic = Codec(), Topics.of(settings).run_events
    producer = Producer(settings.producer_config(**{"linger.ms": 20}))
    for r in records:
        producer.produce(topic, key=r.job_id.encode(), value=codec.encode_event(r))
        producer.poll(0)
    if producer.flush(60):
        raise SystemExit("run-events not delivered")


def commit_at_end(settings: KafkaSettings) -> None:
    """Commit the relay group at the end of every run-events partition (a caught-up relay)."""
    topic = Topics.of(settings).run_events
    consumer = Consumer(settings.consumer_config(relay_group(settings)))
    ends = watermarks(consumer, topic, settings.partitions)
    consumer.commit(
        offsets=[TopicPartition(topic, p, hi) for p, (_lo, hi) in ends.items()], asynchronous=False
    )
    consumer.close()


def timed_rebuild(relay: AfterRelay) -> tuple[AfterIndex, dict[int, int], int, str]:
    """Run the relay's rebuild; return its index, start offsets, events folded, and timing.

    CPU time is the figure that matters to the fold sharing the process (same GIL); wall
    time adds about fetch.wait.max.ms (500 ms) per partition whose last batch is partial.
    """
    consumer = Consumer(
        relay.settings.consumer_config(
            relay_group(relay.settings), **{"enable.partition.eof": False}
        )
    )
    started, cpu = time.perf_counter(), time.process_time()
    index, start, folded = relay._rebuild(consumer)
    timing = f"{time.process_time() - cpu:.2f}s CPU, {time.perf_counter() - started:.2f}s wall"
    consumer.close()
    return index, start, folded, timing


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--tail", type=int, default=5_000)
    args = parser.parse_args()
    settings = KafkaSettings(topic_prefix=f"benchafter{uuid.uuid4().hex[:6]}.", partitions=12)
    ensure_topics(settings)
    try:
        history = synthetic(args.events)
        append(settings, history)
        commit_at_end(settings)
        relay = AfterRelay(settings)
        index, start, folded, before = timed_rebuild(relay)
        full = AfterIndex()
        for r in history:
            full.apply(r)
        if index.state() != full.state():
            raise SystemExit("the full rebuild differs from an in-memory fold")
        print(f"rebuild without snapshot: {folded:,} events folded in {before}")
        producer = Producer(settings.producer_config(acks="all"))
        relay._snapshot(producer, index, start)
        tail = synthetic(args.tail, args.events)
        append(settings, tail)
        commit_at_end(settings)
        for r in tail:
            full.apply(r)
        index, _start, folded, after = timed_rebuild(relay)
        if index.state() != full.state():
            raise SystemExit("the rebuild from the snapshot differs from an in-memory fold")
        upstream_of, ticks = index.state()
        print(
            f"rebuild from snapshot ({len(upstream_of)} after jobs, {len(ticks)} active "
            f"runs) + {args.tail:,}-event tail: {folded:,} events folded in {after}"
        )
    finally:
        admin = AdminClient(settings.admin_config())
        for future in admin.delete_topics([s.name for s in topic_specs(settings)]).values():
            future.result(30)


if __name__ == "__main__":
    main()
