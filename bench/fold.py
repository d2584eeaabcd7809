"""Benchmark: the fold's throughput (commands/s) and tick → run-event lag, on a real broker.

Usage: ``.venv/bin/python bench/fold.py [--commands 50000] [--jobs 2000] [--lag-jobs 200]``
(needs a broker: ``KAFKA_BOOTSTRAP`` or the local one from ``ops/kafka start``).

1. In-process: ``BatchFolder.fold`` alone (decode + decide/evolve + encode, no Kafka), for a
   profile of the pure work per command.
2. Through Kafka: one scheduler process; ``--commands`` Pause/Resume commands for ``--jobs``
   registered jobs are appended in one burst; throughput = commands / (time from the first
   append to the arrival of the last command's event on run-events).
3. Lag: ``--lag-jobs`` jobs firing every second for 20 s; lag = run-event record timestamp -
   scheduled_for, reported as p50/p99/max.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Producer  # noqa: E402

from cronlog import commands as cmd  # noqa: E402
from cronlog import events as ev  # noqa: E402
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task  # noqa: E402
from tests.integration.harness import Cluster, EventLog  # noqa: E402
from topology.fold.due_index import DueIndex  # noqa: E402
from topology.fold.folder import BatchFolder, Record  # noqa: E402
from topology.kafka.bootstrap import ensure_topics  # noqa: E402
from topology.kafka.config import KafkaSettings  # noqa: E402
from topology.kafka.partitioning import partition_for  # noqa: E402
from topology.kafka.topics import Topics  # noqa: E402
from topology.wire.codec import Codec, encode_command  # noqa: E402

SPEC = JobSpec(
    name="bench", schedule=Schedule(ScheduleKind.CRON, "0 0 1 1 *"), task_specs=main_task(("true",))
)


def bench_in_process(n: int, jobs: int) -> float:
    """Return commands/s of BatchFolder.fold alone (no Kafka), batches of 1000."""
    settings = KafkaSettings(partitions=12)
    store: dict[str, bytes] = {}
    due = DueIndex()
    due.reset(range(12))
    folder = BatchFolder(Topics.of(settings), 12, lambda _, job: store.get(job), due, Codec())
    now_ms = int(time.time() * 1000)

    def records(cmds: list[tuple[str, cmd.Command]]) -> list[Record]:
        return [
            Record(
                partition_for(j, 12),
                i,
                now_ms,
                j.encode(),
                encode_command(cmd.Envelope(idem_key=uuid.uuid4().hex, job_id=j, command=c)),
            )
            for i, (j, c) in enumerate(cmds)
        ]

    def run(recs: list[Record]) -> None:
        for i in range(0, len(recs), 1000):
            out = folder.fold(recs[i : i + 1000])
            store.update({j: w.value for j, w in out.writes.items()})

    run(records([(f"job-{i}", cmd.RegisterJob(spec=SPEC)) for i in range(jobs)]))
    work = records(
        [
            (f"job-{i % jobs}", cmd.PauseJob() if (i // jobs) % 2 == 0 else cmd.ResumeJob())
            for i in range(n)
        ]
    )
    started = time.perf_counter()
    run(work)
    return n / (time.perf_counter() - started)


def bench_kafka(bootstrap: str, n: int, jobs: int, lag_jobs: int) -> None:
    settings = KafkaSettings(
        bootstrap=bootstrap, topic_prefix=f"bench{uuid.uuid4().hex[:6]}.", partitions=12
    )
    ensure_topics(settings)
    tmp = ROOT / ".cache" / "bench" / settings.topic_prefix
    tmp.mkdir(parents=True, exist_ok=True)
    cluster = Cluster(settings, tmp)
    log = EventLog(settings)
    try:
        cluster.scheduler("bench")
        producer = Producer(settings.producer_config(**{"linger.ms": 20}))
        topic = Topics.of(settings).commands
        for i in range(jobs):
            producer.produce(
                topic,
                key=f"job-{i}".encode(),
                value=encode_command(
                    cmd.Envelope(
                        idem_key=f"reg-{i}", job_id=f"job-{i}", command=cmd.RegisterJob(spec=SPEC)
                    )
                ),
            )
        producer.flush()
        if not log.wait_until(lambda lg: len(lg.records) >= jobs, 120):
            raise SystemExit("scheduler did not register the jobs in 120 s")
        burst = [
            encode_command(
                cmd.Envelope(
                    idem_key=f"c-{i}",
                    job_id=f"job-{i % jobs}",
                    command=cmd.PauseJob() if (i // jobs) % 2 == 0 else cmd.ResumeJob(),
                )
            )
            for i in range(n)
        ]
        base = len(log.records)
        started = time.perf_counter()
        for i, value in enumerate(burst):
            producer.produce(topic, key=f"job-{i % jobs}".encode(), value=value)
            if i % 10000 == 0:
                producer.poll(0)
        producer.flush()
        appended = time.perf_counter() - started
        if not log.wait_until(lambda lg: len(lg.records) >= base + n, 300):
            raise SystemExit(f"only {len(log.records) - base} of {n} events after 300 s")
        took = time.perf_counter() - started
        print(
            f"kafka fold: {n} commands appended in {appended:.2f}s, all events out after "
            f"{took:.2f}s -> {n / took:,.0f} commands/s (1 scheduler process, 12 partitions)"
        )

        lag_spec = JobSpec(
            name="lag",
            schedule=Schedule(ScheduleKind.CRON, "* * * * * *"),
            task_specs=main_task(("true",)),
        )
        for i in range(lag_jobs):
            producer.produce(
                topic,
                key=f"lag-{i}".encode(),
                value=encode_command(
                    cmd.Envelope(
                        idem_key=f"lag-{i}",
                        job_id=f"lag-{i}",
                        command=cmd.RegisterJob(spec=lag_spec),
                    )
                ),
            )
        producer.flush()
        time.sleep(20)
        for i in range(lag_jobs):
            producer.produce(
                topic,
                key=f"lag-{i}".encode(),
                value=encode_command(
                    cmd.Envelope(
                        idem_key=f"lag-del-{i}", job_id=f"lag-{i}", command=cmd.DeleteJob()
                    )
                ),
            )
        producer.flush()
        log.poll(3)
        _print_lag(log, settings, since=datetime.now(UTC) - timedelta(seconds=18))
    finally:
        log.close()
        cluster.stop_all()


def _print_lag(log: EventLog, settings: KafkaSettings, since: datetime) -> None:
    from confluent_kafka import Consumer, TopicPartition

    # Lag needs each run-event record's own timestamp (producer CreateTime): read them again.
    topic = Topics.of(settings).run_events
    consumer = Consumer(settings.consumer_config(f"lag-{uuid.uuid4().hex}"))
    parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, 0) for p in parts])
    lags: list[float] = []
    from topology.wire.codec import decode_event

    idle = 0
    while idle < 10:
        msg = consumer.poll(0.2)
        if msg is None:
            idle += 1
            continue
        idle = 0
        if msg.error():
            continue
        e = decode_event(msg.value())
        if isinstance(e.event, ev.RunScheduled) and e.event.scheduled_for >= since:
            lags.append(msg.timestamp()[1] / 1000 - e.event.scheduled_for.timestamp())
    consumer.close()
    if not lags:
        print("lag: no runs observed")
        return
    lags.sort()
    p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))]
    p50 = statistics.median(lags)
    print(
        f"tick -> RunScheduled on run-events: n={len(lags)} p50={p50 * 1000:.0f}ms "
        f"p99={p99 * 1000:.0f}ms max={lags[-1] * 1000:.0f}ms (tick interval 1 s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commands", type=int, default=50_000)
    parser.add_argument("--jobs", type=int, default=2_000)
    parser.add_argument("--lag-jobs", type=int, default=200)
    parser.add_argument("--bootstrap", default=KafkaSettings().bootstrap)
    args = parser.parse_args()
    rate = bench_in_process(min(args.commands, 20_000), args.jobs)
    print(f"in-process fold (decode+decide+evolve+encode, no Kafka): {rate:,.0f} commands/s")
    bench_kafka(args.bootstrap, args.commands, args.jobs, args.lag_jobs)


if __name__ == "__main__":
    main()
