"""Benchmark: broker records per one-task run, per topic (DESIGN.md budget: <= 8).

Usage: ``.venv/bin/python bench/records_per_run.py [--runs 500] [--workers 1] [--slots 32]``
(needs a broker: ``KAFKA_BOOTSTRAP`` or the local one from ``ops/kafka start``).

One scheduler and ``--workers`` workers (``--isolation thread``) on a private topic prefix.
``--runs`` one-task ``once`` jobs are registered with a ``run_at`` a few seconds ahead; the
end offsets of every topic are taken once they are all registered (so registration is not
counted) and again once every run has ended and the system is quiet. Per topic it prints:

- ``offsets/run``: the end-offset delta per run: data records *and* transaction markers
  (each committed transaction writes one marker per partition it touched);
- ``records/run``: the data records in that range, read back ``read_committed`` (markers and
  aborted records excluded): what the budget counts.

Ticks (one per command partition per ``tick_interval``, whatever the load) land on the
commands topic; the line ``ticks`` says how many of its records were Ticks.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import contextlib

from confluent_kafka import Consumer

from bench.burst import once_noop
from bench.common import Gauge, new_cluster, produce_all
from cronlog import commands as cmd
from cronlog.model import Isolation
from topology.kafka.config import KafkaSettings
from topology.kafka.log_reader import partition_count, read_partition, watermarks
from topology.kafka.topics import Topics
from topology.wire.codec import DecodeError, decode_command

EVENTS_PER_RUN = 5
"""RunScheduled, TaskReady, TaskClaimed, TaskSucceeded, RunSucceeded."""
SKIP = {"scheduler_app", "after_relay", "snapshots", "workers"}
"""Topics outside a run's path (group metadata, the relay's snapshot, heartbeats): the
``workers`` heartbeats are time-driven, not per run; they are printed apart."""


def ends(consumer: Consumer, topics: Topics) -> dict[str, dict[int, int]]:
    """Return topic field name → partition → high watermark, for every topic that exists."""
    out: dict[str, dict[int, int]] = {}
    for f in fields(topics):
        name = getattr(topics, f.name)
        n = partition_count(consumer, name)
        if n is not None:
            out[f.name] = {p: hw for p, (_lo, hw) in watermarks(consumer, name, n).items()}
    return out


def count(
    consumer: Consumer, topic: str, before: dict[int, int], after: dict[int, int]
) -> tuple[int, int]:
    """Return (data records, Ticks among them) between two end-offset snapshots."""
    records = ticks = 0
    for p, end in after.items():
        for batch in read_partition(consumer, topic, p, before.get(p, 0), end):
            records += len(batch)
            if topic.endswith("cronlog.commands"):
                for m in batch:
                    with contextlib.suppress(DecodeError):
                        ticks += isinstance(decode_command(m.value() or b"").command, cmd.Tick)
    return records, ticks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--slots", type=int, default=32)
    parser.add_argument("--lead-s", type=float, default=8.0, help="run_at this far ahead")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--bootstrap", default=KafkaSettings().bootstrap)
    args = parser.parse_args()

    cluster = new_cluster(args.bootstrap, "rpr")
    topics = Topics.of(cluster.settings)
    gauge = Gauge(cluster.settings)
    consumer = Consumer(cluster.settings.consumer_config(f"rpr-{uuid.uuid4().hex}"))
    try:
        cluster.scheduler("s1")
        for w in range(args.workers):
            cluster.worker(f"w{w + 1}", CRONLOG_SLOTS=str(args.slots))
        due = datetime.fromtimestamp(time.time() + args.lead_s, UTC)
        spec = once_noop(due, Isolation.THREAD)
        produce_all(
            cluster, ((f"job-{i}", cmd.RegisterJob(spec=spec)) for i in range(args.runs)), "reg"
        )
        if not gauge.wait_for(args.runs, args.timeout):
            sys.exit(f"only {gauge.count()} of {args.runs} jobs registered")
        if time.time() >= due.timestamp() - 0.5:
            sys.exit("registration overlapped the due second: raise --lead-s")
        before = ends(consumer, topics)
        started = time.time()
        target = args.runs * (1 + EVENTS_PER_RUN)
        if not gauge.wait_for(target, args.timeout):
            print(f"WARNING: {target - gauge.count()} run-events short after {args.timeout}s")
        gauge.wait_quiet(quiet_s=3.0, timeout_s=60)
        elapsed = time.time() - started
        after = ends(consumer, topics)
        print(
            f"{args.runs} one-task runs, {args.workers} worker(s) x {args.slots} slots, "
            f"{elapsed:.1f}s from the snapshot before the due second to quiet"
        )
        print(f"  {'topic':<22} {'offsets/run':>11} {'records/run':>11}")
        total = 0.0
        for name, high in after.items():
            delta = sum(high.values()) - sum(before.get(name, {}).values())
            records, ticks = count(consumer, getattr(topics, name), before.get(name, {}), high)
            note = f"  ({ticks} Ticks, {ticks / args.runs:.2f}/run)" if ticks else ""
            note += "  (time-driven: not counted)" if name in SKIP else ""
            print(f"  {name:<22} {delta / args.runs:>11.2f} {records / args.runs:>11.2f}{note}")
            if name not in SKIP:
                total += records / args.runs
        print(f"  {'total (run path)':<22} {'':>11} {total:>11.2f}   budget <= 8")
    finally:
        consumer.close()
        gauge.close()
        cluster.stop_all()


if __name__ == "__main__":
    main()
