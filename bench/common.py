"""Shared pieces of the budget benchmarks (burst, sustained, scale): an isolated cluster on its
own topic prefix, bulk registration, and run-events read back *after* a measurement (so the
reader does not compete with the system for the box's two cores while it is measured)."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

from cronlog import commands as cmd  # noqa: E402
from cronlog import events as ev  # noqa: E402
from tests.integration.harness import Cluster  # noqa: E402
from topology.kafka.bootstrap import ensure_topics  # noqa: E402
from topology.kafka.config import KafkaSettings  # noqa: E402
from topology.kafka.log_reader import ends_reached  # noqa: E402
from topology.kafka.retrying import Unavailable, call_with_retry  # noqa: E402
from topology.kafka.topics import Topics  # noqa: E402
from topology.wire.codec import decode_event, encode_command  # noqa: E402

NOOP = "tests.unit.tasks_for_tests:noop"
RETRY_S = 60.0
"""How long a gauge's request is retried through transient broker errors (a partition without
a leader right after topic creation) before the benchmark fails."""


def _partitions(consumer: Consumer, topic: str) -> list[int]:
    def listed() -> list[int]:
        meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            raise Unavailable(f"topic {topic} not in the metadata (yet)")
        return sorted(meta.partitions)

    return call_with_retry(listed, what=f"listing {topic}", deadline_s=RETRY_S)


def _high(consumer: Consumer, tp: TopicPartition) -> int:
    low_high = call_with_retry(
        partial(consumer.get_watermark_offsets, tp, timeout=10, cached=False),
        what=f"reading the offsets of {tp.topic}/{tp.partition}",
        deadline_s=RETRY_S,
    )
    return int(low_high[1])


def new_cluster(bootstrap: str, label: str) -> Cluster:
    """Topics under a fresh prefix (12 partitions) and a Cluster whose logs go to .cache/bench."""
    settings = KafkaSettings(
        bootstrap=bootstrap, topic_prefix=f"bench{label}{uuid.uuid4().hex[:6]}.", partitions=12
    )
    ensure_topics(settings)
    tmp = ROOT / ".cache" / "bench" / settings.topic_prefix
    tmp.mkdir(parents=True, exist_ok=True)
    return Cluster(settings, tmp)


def produce_all(cluster: Cluster, items: Iterable[tuple[str, cmd.Command]], prefix: str) -> int:
    """Append one command per (job_id, command), as fast as librdkafka takes them."""
    producer = Producer(cluster.settings.producer_config(**{"linger.ms": 20}))
    topic = cluster.topics.commands
    n = 0
    for n, (job_id, command) in enumerate(items, 1):
        value = encode_command(
            cmd.Envelope(idem_key=f"{prefix}-{job_id}", job_id=job_id, command=command)
        )
        while True:
            try:
                producer.produce(topic, key=job_id.encode(), value=value)
                break
            except BufferError:
                producer.poll(0.05)
        if n % 5000 == 0:
            producer.poll(0)
    producer.flush(60)
    return n


def run_event_count(settings: KafkaSettings) -> int:
    """Number of records on run-events (sum of high watermarks): a cheap progress gauge."""
    topic = Topics.of(settings).run_events
    consumer = Consumer(settings.consumer_config(f"wm-{uuid.uuid4().hex}"))
    try:
        return sum(_high(consumer, TopicPartition(topic, p)) for p in _partitions(consumer, topic))
    finally:
        consumer.close()


class Gauge:
    """Repeated run_event_count with one consumer."""

    def __init__(self, settings: KafkaSettings) -> None:
        self.topic = Topics.of(settings).run_events
        self.consumer = Consumer(settings.consumer_config(f"wm-{uuid.uuid4().hex}"))
        parts = _partitions(self.consumer, self.topic)
        self.parts = [TopicPartition(self.topic, p) for p in parts]

    def count(self) -> int:
        return sum(_high(self.consumer, tp) for tp in self.parts)

    def wait_for(self, target: int, timeout_s: float, every_s: float = 0.5) -> bool:
        """Wait until at least ``target`` run-events exist."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.count() >= target:
                return True
            time.sleep(every_s)
        return False

    def wait_quiet(self, quiet_s: float, timeout_s: float) -> int:
        """Wait until no run-event was added for ``quiet_s`` seconds; return the count."""
        deadline = time.monotonic() + timeout_s
        last, since = self.count(), time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.5)
            now = self.count()
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet_s:
                break
        return last

    def close(self) -> None:
        self.consumer.close()


@dataclass(frozen=True, slots=True)
class Seen:
    """One run-event with its record timestamp (producer CreateTime, epoch seconds)."""

    ts: float
    event: ev.RunEvent


def read_run_events(settings: KafkaSettings, kinds: tuple[type, ...]) -> list[Seen]:
    """Read run-events from offset 0 to the current end; decode and keep only ``kinds``."""
    topic = Topics.of(settings).run_events
    consumer = Consumer(
        settings.consumer_config(
            f"read-{uuid.uuid4().hex}", **{"fetch.max.bytes": 64 * 1024 * 1024}
        )
    )
    parts = _partitions(consumer, topic)
    ends = {p: _high(consumer, TopicPartition(topic, p)) for p in parts}
    consumer.assign([TopicPartition(topic, p, 0) for p in parts if ends[p] > 0])
    left = {p for p, end in ends.items() if end > 0}
    out: list[Seen] = []
    while left:
        msgs = consumer.consume(10000, 1.0)
        for msg in msgs:
            partition, offset = msg.partition(), msg.offset()
            if msg.error() or partition is None or offset is None:
                continue
            if offset + 1 >= ends[partition]:
                left.discard(partition)
            e = decode_event(msg.value() or b"")
            if isinstance(e.event, kinds):
                out.append(Seen(msg.timestamp()[1] / 1000, e))
        if not msgs:  # commit markers end transactional partitions: ask the position
            left -= ends_reached(consumer, topic, {p: ends[p] for p in left})
    consumer.close()
    return out


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) by nearest rank; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def spread(values: list[float], unit: float = 1.0, suffix: str = "s") -> str:
    """``p50 … p99 … max`` of ``values`` divided by ``unit``."""
    if not values:
        return "n=0"
    return (
        f"n={len(values)} p50={statistics.median(values) / unit:.2f}{suffix} "
        f"p99={pct(values, 0.99) / unit:.2f}{suffix} max={max(values) / unit:.2f}{suffix}"
    )


LINE_TS = re.compile(r"ts=(\S+)")
FOLD_STATS = re.compile(
    r"action=fold_stats records=(\d+) decisions=\d+ batches=(\d+) rate=(\d+)/s "
    r"fold=([\d.]+)s commit=([\d.]+)s store=([\d.]+)s"
)


def fold_stats_lines(
    log_path: Path,
) -> list[tuple[float, tuple[int, int, int, float, float, float]]]:
    """The scheduler log's fold_stats lines: (epoch seconds of the line, parsed numbers).

    A line's instant is its ``ts`` key (ISO-8601 UTC; services/logging_setup.py).
    """
    out = []
    for line in log_path.read_text(errors="replace").splitlines():
        m = FOLD_STATS.search(line)
        ts = LINE_TS.match(line)
        if m and ts:
            at = datetime.fromisoformat(ts.group(1))
            r, b, rate, f, d, w = m.groups()
            out.append((at.timestamp(), (int(r), int(b), int(rate), float(f), float(d), float(w))))
    return out


def fold_stats_report(log_path: Path, since: float, until: float, origin: float) -> list[str]:
    """fold_stats lines logged in [since, until], as text relative to ``origin``."""
    return [
        f"  +{at - origin:5.1f}s records={r} batches={b} rate={rate}/s fold={f:.2f}s "
        f"commit={d:.2f}s store={w:.2f}s (avg batch {r / max(b, 1):.0f})"
        for at, (r, b, rate, f, d, w) in fold_stats_lines(log_path)
        if since <= at <= until
    ]


def per_second(stamps: list[float], origin: float) -> str:
    """Counts of ``stamps`` per whole second after ``origin``: ``"+0s:812 +1s:1030 …"``."""
    counts: dict[int, int] = {}
    for s in stamps:
        k = int(s - origin) if s >= origin else -1
        counts[k] = counts.get(k, 0) + 1
    return " ".join(f"+{k}s:{v}" for k, v in sorted(counts.items()))


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds used so far by process ``pid`` (its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def broker_pid() -> int | None:
    """Return the pid of the local broker of ``ops/kafka`` (its pid file under
    ``$CRONLOG_KAFKA_HOME``, default ``.cache/kafka``), or None when there is none or it is not
    a running ``kafka.Kafka`` JVM (e.g. the benchmark runs against another cluster)."""
    home = Path(os.environ.get("CRONLOG_KAFKA_HOME") or ROOT / ".cache" / "kafka")
    try:
        pid = int((home / "kafka.pid").read_text().strip())
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    return pid if b"kafka.Kafka" in args else None


def rss_mib(pid: int) -> float:
    """Resident memory of process ``pid`` (VmRSS from /proc/<pid>/status), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def warm_up(cluster: Cluster, gauge: Gauge, spec_at: Callable[[datetime], object], n: int) -> int:
    """Run ``n`` no-op once jobs now (starts the workers' lazily spawned python pools and the
    scheduler's assignment); return the run-event count once quiet."""
    now_at = datetime.fromtimestamp(time.time(), UTC)
    spec = spec_at(now_at)
    produce_all(cluster, ((f"warm-{i}", cmd.RegisterJob(spec=spec)) for i in range(n)), "warm")
    gauge.wait_for(n, 120)
    base = gauge.wait_quiet(quiet_s=3.0, timeout_s=180)
    print(
        f"warm-up: {n} no-op runs, {base} run-events, quiet after "
        f"{time.time() - now_at.timestamp():.1f}s"
    )
    return base


def add_json_option(parser: argparse.ArgumentParser) -> None:
    """``--json FILE``: where :func:`write_figures` puts the run's figures."""
    parser.add_argument(
        "--json",
        type=Path,
        default=None,
        metavar="FILE",
        help="also write the figures and the measured window as JSON (bench/compare.py)",
    )


def write_figures(
    path: Path | None, bench: str, window: tuple[float, float], figures: dict[str, object]
) -> None:
    """Write ``{"bench", "window": [start, end], "figures"}`` to ``path`` (nothing if None).

    ``window``: epoch seconds from the end of the warm-up to the moment every task of the
    workload was seen done (``bench/compare.py`` measures every process's CPU over it).
    """
    if path is not None:
        clean = {
            k: None if isinstance(v, float) and math.isnan(v) else v for k, v in figures.items()
        }
        doc = {"bench": bench, "window": list(window), "figures": clean}
        path.write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n")
