"""Prometheus metrics of a scheduler process (docs/architecture.md, "Scheduler and worker
metrics").

Updated at batch granularity by the fold runtime (``runtime.py``), never per record; the
consumer lag is read from the consumer's cached watermarks and positions (no broker request)
at most once every ``LAG_EVERY_S`` seconds. Served by ``serve`` on ``metrics_port``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Literal

from confluent_kafka import Consumer, KafkaException, TopicPartition
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from services import metrics_http

log = logging.getLogger("cronlog.scheduler")
REGISTRY = CollectorRegistry()
BATCH_RECORDS = Histogram(
    "cronlog_fold_batch_records",
    "Command records per folded batch",
    buckets=(1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 25_000),
    registry=REGISTRY,
)
COMMIT_SECONDS = Histogram(
    "cronlog_fold_commit_seconds",
    "Kafka transaction commit latency per folded batch, seconds",
    buckets=(0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
    registry=REGISTRY,
)
RECORDS = Counter("cronlog_fold_records", "Command records folded", registry=REGISTRY)
DECISIONS = Counter(
    "cronlog_fold_decisions",
    "Decisions of the fold: (command, job) pairs decided (a Tick makes one per due job)",
    registry=REGISTRY,
)
DUE_JOBS = Gauge("cronlog_due_index_jobs", "Jobs in the due index", registry=REGISTRY)
LAG = Gauge(
    "cronlog_consumer_lag_records",
    "End offset minus the next offset to fold, per owned commands partition",
    ["partition"],
    registry=REGISTRY,
)
OWNED = Gauge(
    "cronlog_partitions_owned", "Commands partitions this process folds", registry=REGISTRY
)
OWNERSHIP = Counter(
    "cronlog_partition_ownership_changes",
    "Rebalance callbacks that assigned or revoked partitions of this process",
    ["change"],
    registry=REGISTRY,
)
for _change in ("assigned", "revoked"):  # at 0 from the start: increase() sees the first
    OWNERSHIP.labels(_change)
UP = Gauge("cronlog_scheduler_up", "1 while the scheduler process runs", registry=REGISTRY)
LAG_EVERY_S = 5.0
"""Seconds between two readings of the consumer lag."""


def serve(port: int, host: str = "127.0.0.1") -> str | None:
    """Serve the scheduler's metrics (``services.metrics_http.serve``); return the URL."""
    UP.set(1)
    return metrics_http.serve(REGISTRY, port, host)


def batch(records: int, decisions: int, commit_s: float, due_jobs: int) -> None:
    """Count one folded and committed batch.

    Args:
        records: command records folded.
        decisions: run-events decided.
        commit_s: its transaction's commit, seconds.
        due_jobs: jobs in the due index after it.
    """
    BATCH_RECORDS.observe(records)
    COMMIT_SECONDS.observe(commit_s)
    RECORDS.inc(records)
    DECISIONS.inc(decisions)
    DUE_JOBS.set(due_jobs)


def ownership(change: Literal["assigned", "revoked"], partitions: int) -> None:
    """Count one rebalance callback that moved ``partitions`` (one change, however many)."""
    if partitions:
        OWNERSHIP.labels(change).inc()


def owned(partitions: int, due_jobs: int) -> None:
    """This process folds ``partitions`` partitions now, with ``due_jobs`` in its due index."""
    OWNED.set(partitions)
    DUE_JOBS.set(due_jobs)


class ConsumerLag:
    """The ``cronlog_consumer_lag_records`` series of the owned partitions, read at most once
    every ``every_s`` seconds from the consumer's cached state (no broker request).

    Args:
        topic: the commands topic.
        every_s: seconds between two readings.
    """

    def __init__(self, topic: str, every_s: float = LAG_EVERY_S) -> None:
        self.topic = topic
        self.every_s = every_s
        self._next = 0.0
        self._shown: set[int] = set()

    def refresh(self, consumer: Consumer, partitions: Iterable[int]) -> None:
        """Read the lag of ``partitions`` if ``every_s`` passed since the last reading.

        A partition whose end offset or position is not known yet (just resumed, nothing
        fetched) keeps its previous value; the series of partitions no longer owned go. A
        client error skips this reading (logged): a metric never stops the fold.
        """
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self.every_s
        owned = set(partitions)
        for p in self._shown - owned:
            self.forget(p)
        if not owned:
            return
        try:
            positions = consumer.position([TopicPartition(self.topic, p) for p in sorted(owned)])
            ends = [consumer.get_watermark_offsets(tp, cached=True)[1] for tp in positions]
        except KafkaException as exc:
            log.warning(
                "consumer lag not read", extra={"action": "consumer_lag_unread", "error": exc}
            )
            return
        for tp, end in zip(positions, ends, strict=True):
            if tp.offset >= 0 and end >= 0:
                LAG.labels(str(tp.partition)).set(max(0, end - tp.offset))
                self._shown.add(tp.partition)

    def forget(self, partition: int) -> None:
        """Drop the series of a partition no longer owned (revoked or lost)."""
        if partition in self._shown:
            self._shown.discard(partition)
            LAG.remove(str(partition))
