"""Benchmark: ``cronlog replay`` throughput (command records/s) on a real broker.

Usage: ``.venv/bin/python bench/replay.py [--jobs 2000] [--per-job 10] [--batch 500]``
(needs a broker: ``KAFKA_BOOTSTRAP`` or the local one from ``ops/kafka start``).

Appends ``--jobs`` RegisterJob commands and ``--per-job - 1`` Pause/Resume commands per job
to a fresh topic prefix (12 partitions), then runs ``run_replay`` (read from Kafka, fold with
BatchFolder, write rocksdict) and prints records/s; then the same records folded in memory
by ``Replayer`` alone (no Kafka, dict store), to separate reading from folding. The bench
topics are deleted at the end.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

from cronlog import commands as cmd  # noqa: E402
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task  # noqa: E402
from services.cli.replay import ReplayOptions, run_replay  # noqa: E402
from topology.fold.folder import Record  # noqa: E402
from topology.kafka.bootstrap import ensure_topics  # noqa: E402
from topology.kafka.config import KafkaSettings  # noqa: E402
from topology.kafka.log_reader import read_partition, reader, watermarks  # noqa: E402
from topology.kafka.topics import Topics, topic_specs  # noqa: E402
from topology.snapshots.replay import Replayer  # noqa: E402
from topology.wire.codec import encode_command  # noqa: E402

SPEC = JobSpec(
    name="bench", schedule=Schedule(ScheduleKind.CRON, "0 0 1 1 *"), task_specs=main_task(("true",))
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--per-job", type=int, default=10)
    parser.add_argument("--batch", type=int, default=500)
    args = parser.parse_args()
    settings = KafkaSettings(topic_prefix=f"benchreplay{uuid.uuid4().hex[:6]}.", partitions=12)
    ensure_topics(settings)
    topics = Topics.of(settings)
    try:
        producer = Producer(settings.producer_config(**{"linger.ms": 20}))
        for i in range(args.per_job):
            for j in range(args.jobs):
                command = (
                    cmd.RegisterJob(spec=SPEC)
                    if i == 0
                    else cmd.PauseJob()
                    if i % 2
                    else cmd.ResumeJob()
                )
                job = f"job-{j}"
                producer.produce(
                    topics.commands,
                    key=job.encode(),
                    value=encode_command(
                        cmd.Envelope(idem_key=uuid.uuid4().hex, job_id=job, command=command)
                    ),
                )
                producer.poll(0)
        producer.flush(60)
        total = args.jobs * args.per_job
        with tempfile.TemporaryDirectory() as tmp:
            report = run_replay(
                settings, ReplayOptions(state_dir=Path(tmp) / "s", batch_size=args.batch)
            )
        print(
            f"replay via Kafka + rocksdict: {report.records} records in "
            f"{report.seconds:.2f}s = {report.rate:,.0f} records/s "
            f"({sum(p.events for p in report.partitions)} events)"
        )
        if report.records != total:
            raise SystemExit(f"replayed {report.records} records, appended {total}")
        consumer = reader(settings)
        ends = watermarks(consumer, topics.commands, 12)
        records = [
            Record(m.partition(), m.offset(), m.timestamp()[1], m.key(), m.value())
            for p in range(12)
            for msgs in read_partition(consumer, topics.commands, p, 0, ends[p][1])
            for m in msgs
        ]
        consumer.close()
        replayer = Replayer(topics, 12, {})
        started = time.perf_counter()
        for i in range(0, len(records), args.batch):
            replayer.fold(records[i : i + args.batch])
        seconds = time.perf_counter() - started
        print(
            f"fold alone (Replayer, dict store): {len(records)} records in {seconds:.2f}s = "
            f"{len(records) / seconds:,.0f} records/s"
        )
    finally:
        admin = AdminClient(settings.admin_config())
        names = [s.name for s in topic_specs(settings)]
        for future in admin.delete_topics(names).values():
            future.result(30)


if __name__ == "__main__":
    main()
