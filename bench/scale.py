"""Benchmark: many registered jobs (DESIGN.md budget: 500,000 jobs over 12 partitions → one
scheduler process's resident memory ≤ 2 GiB, cold start ≤ 60 s).

Usage: ``.venv/bin/python bench/scale.py [--jobs 500000]`` or, in steps on one cluster,
``--jobs 50000,100000`` (cumulative totals; needs a broker: ``KAFKA_BOOTSTRAP`` or the local one
from ``ops/kafka start``).

One scheduler process on its own topic prefix (12 partitions), no workers. Jobs are cron
``0 0 1 1 *`` with an exec command (one record each in the job table and one entry each in the
due index), plus one manual job, the probe. At each step:

1. register up to the step's total and wait for every JobRegistered (registration rate);
2. RSS: VmRSS of the scheduler process from /proc/<pid>/status, 5 s after the last one;
3. cold start: ``kill -9`` the scheduler, wipe its state dir, start a new one (same instance id:
   static membership hands it the partitions back at once) and append a TriggerJob for the
   probe at once; cold start = start → the probe's RunScheduled on run-events, i.e. every
   partition recovered from the job table's changelog and its due index rebuilt (the fold
   handles no command before both). Also printed: the scheduler's "due index rebuilt" line,
   and VmRSS after the cold start.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, TopicPartition

from bench.common import Gauge, new_cluster, produce_all, rss_mib
from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task
from tests.integration.harness import Cluster, Proc
from topology.kafka.config import KafkaSettings
from topology.kafka.partitioning import partition_for
from topology.wire.codec import decode_event

SPEC = JobSpec(
    name="scale", schedule=Schedule(ScheduleKind.CRON, "0 0 1 1 *"), task_specs=main_task(("true",))
)
PROBE = "probe"
REBUILT = re.compile(r"due index rebuilt: (\d+) jobs over partitions \[[^\]]*\] in ([\d.]+)s")


def topic_records(cluster: Cluster, topic: str) -> int:
    """Records on ``topic`` (sum of high watermarks; compaction aside)."""
    consumer = Consumer(cluster.settings.consumer_config(f"wm-{uuid.uuid4().hex}"))
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts
        )
    finally:
        consumer.close()


def cold_start(cluster: Cluster, sched: Proc, timeout_s: float) -> tuple[float, Proc]:
    """kill -9, wipe, restart, trigger the probe; return (seconds to its RunScheduled, proc)."""
    topic = cluster.topics.run_events
    part = partition_for(PROBE.encode(), cluster.settings.partitions)
    consumer = Consumer(cluster.settings.consumer_config(f"probe-{uuid.uuid4().hex}"))
    end = consumer.get_watermark_offsets(TopicPartition(topic, part), timeout=10)[1]
    consumer.assign([TopicPartition(topic, part, end)])
    sched.kill9()
    shutil.rmtree(sched.env["CRONLOG_STATE_DIR"], ignore_errors=True)
    started = time.monotonic()
    sched.start()
    cluster.send(PROBE, cmd.TriggerJob())
    try:
        while time.monotonic() - started < timeout_s:
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            e = decode_event(msg.value())
            if e.job_id == PROBE and isinstance(e.event, ev.RunScheduled):
                return time.monotonic() - started, sched
        return float("nan"), sched
    finally:
        consumer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--jobs", default="500000", help="cumulative totals, comma-separated (default 500000)"
    )
    parser.add_argument("--cold-start-timeout", type=float, default=600.0)
    parser.add_argument("--bootstrap", default=KafkaSettings().bootstrap)
    args = parser.parse_args()
    steps = [int(x) for x in args.jobs.split(",")]

    cluster = new_cluster(args.bootstrap, "scale")
    gauge = Gauge(cluster.settings)
    try:
        sched = cluster.scheduler("s1")
        cluster.send(
            PROBE,
            cmd.RegisterJob(
                spec=JobSpec(
                    name="probe",
                    schedule=Schedule(ScheduleKind.MANUAL),
                    task_specs=main_task(("true",)),
                )
            ),
        )
        gauge.wait_for(1, 120)
        base = gauge.count()
        rss0 = rss_mib(sched.popen.pid)  # type: ignore[union-attr]
        print(f"scheduler up, probe registered; RSS {rss0:.0f} MiB")
        have = 0
        for total in steps:
            started = time.monotonic()
            produce_all(
                cluster,
                ((f"job-{i}", cmd.RegisterJob(spec=SPEC)) for i in range(have, total)),
                "reg",
            )
            produced = time.monotonic() - started
            if not gauge.wait_for(base + total, max(600.0, total / 200)):
                raise SystemExit(f"only {gauge.count() - base} of {total} registered")
            took = time.monotonic() - started
            print(
                f"\n{total} jobs: registered {total - have} in {took:.1f}s "
                f"({(total - have) / took:,.0f}/s; appended in {produced:.1f}s)"
            )
            have = total
            time.sleep(5)
            rss = rss_mib(sched.popen.pid)  # type: ignore[union-attr]
            changelog = topic_records(cluster, cluster.topics.job_table_changelog)
            per_job = (rss - rss0) * 1024 * 1024 / total
            print(
                f"  scheduler RSS after registration: {rss:,.0f} MiB (+{per_job:,.0f} B per job "
                f"over the {rss0:.0f} MiB at start; at 500,000: "
                f"~{rss0 + per_job * 500_000 / 1024 / 1024:,.0f} MiB)   budget 2 GiB at 500,000; "
                f"job-table changelog: {changelog} records"
            )
            log_mark = sched.log_path.stat().st_size
            secs, sched = cold_start(cluster, sched, args.cold_start_timeout)
            with sched.log_path.open("rb") as f:
                f.seek(log_mark)
                rebuilt = REBUILT.findall(f.read().decode(errors="replace"))
            print(
                f"  cold start (kill -9, wiped state dir, new process → probe's RunScheduled): "
                f"{secs:.1f}s   budget 60 s at 500,000"
            )
            for jobs, s in rebuilt:
                print(f"    scheduler log: due index rebuilt: {jobs} jobs in {s}s")
            time.sleep(5)
            print(
                f"  scheduler RSS after the cold start (+5 s): {rss_mib(sched.popen.pid):,.0f} MiB"
            )  # type: ignore[union-attr]
    finally:
        gauge.close()
        cluster.stop_all()


if __name__ == "__main__":
    main()
