"""How a worker learns where work may be, and which polls it has out (docs/dispatch.md).

The ready topic is a notification, not a queue: every worker reads every partition of it from
the end (manual assignment, no group, no commits), so any number of workers hear of ready
work, and nobody holds a record it cannot start. A notification flags its commands partition;
a worker with free slots polls flagged partitions (PollTasks) and the fold grants what is
ready there (the poll is the claim). ``Polls`` is that bookkeeping, free of I/O.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from dataclasses import dataclass

from confluent_kafka import OFFSET_END, Consumer, Message, TopicPartition

from services.worker.settings import ANSWER_FETCH_WAIT_MS, WorkerSettings
from topology.kafka.partitioning import partition_for
from topology.kafka.retrying import Liveness, check_topic, record_ok


class ReadyWatch:
    """Every partition of the ready topic, read from the end as notifications.

    Args:
        consumer: assigned to every partition of the ready topic.
        topic: the ready topic.
        partitions: the commands topic's partition count (a notification's key, the job_id,
            names its commands partition).
        liveness: the reader's health (errors, progress).
    """

    def __init__(
        self,
        consumer: Consumer,
        topic: str,
        partitions: int,
        liveness: Liveness,
        same_partitions: bool = False,
    ):
        self.consumer = consumer
        self.topic = topic
        self.partitions = partitions
        self.liveness = liveness
        self.same_partitions = same_partitions
        """The ready topic has the commands topic's partition count: a notification keyed by
        job_id (murmur2, DESIGN.md) is then on its job's commands partition, and its own
        partition names it without hashing the key again."""

    @classmethod
    def open(cls, settings: WorkerSettings, topic: str, liveness: Liveness) -> ReadyWatch:
        """Assign every partition of ``topic`` at its end.

        Raises:
            KafkaException: the topic's metadata cannot be read.
        """
        consumer = Consumer(
            settings.consumer_config(
                f"{settings.ready_group()}-watch-{settings.worker_id}",
                **{
                    "error_cb": liveness.failed,
                    "enable.auto.commit": False,
                    "fetch.wait.max.ms": ANSWER_FETCH_WAIT_MS,
                },
            )
        )
        meta = consumer.list_topics(topic, timeout=30).topics[topic]
        consumer.assign([TopicPartition(topic, p, OFFSET_END) for p in meta.partitions])
        same = len(meta.partitions) == settings.partitions
        return cls(consumer, topic, settings.partitions, liveness, same)

    def probe(self) -> None:
        """While in trouble, check the topic now and then (ends the episode when it answers)."""
        self.liveness.probe(lambda: check_topic(self.consumer, self.topic))

    def poll(self, timeout_s: float) -> set[int]:
        """Return the commands partitions named by notifications read within ``timeout_s``."""
        first = self.consumer.poll(timeout_s)
        if first is None:
            return set()
        msgs: list[Message] = [first, *self.consumer.consume(num_messages=10_000, timeout=0)]
        if self.same_partitions:
            return {
                p
                for m in msgs
                if record_ok(m, self.liveness)
                and m.key() is not None
                and (p := m.partition()) is not None
            }
        return {
            partition_for(key, self.partitions)
            for m in msgs
            if record_ok(m, self.liveness) and (key := m.key()) is not None
        }

    def close(self) -> None:
        """Close the consumer (no group to leave)."""
        self.consumer.close()


@dataclass(frozen=True, slots=True)
class Poll:
    """A PollTasks sent and not yet answered: its slots stay reserved."""

    partition: int
    slots: int
    sent_at: float


class Polls:
    """Which commands partitions may have ready work, and the polls out (thread-safe).

    Args:
        partitions: the commands topic's partition count.
        sweep_s: with nothing flagged, every partition is flagged again this often (a safety
            net: notifications are what normally flags a partition).
    """

    def __init__(self, partitions: int, sweep_s: float) -> None:
        self.partitions = partitions
        self.sweep_s = sweep_s
        self._lock = threading.Lock()
        self._flagged: set[int] = set(range(partitions))  # a new worker asks everywhere
        self._out: dict[str, Poll] = {}
        self._swept = time.monotonic()
        self._start = itertools.cycle(range(partitions))

    def notify(self, partitions: set[int]) -> None:
        """Notifications named these partitions."""
        with self._lock:
            self._flagged |= partitions

    def reserved(self) -> int:
        """Slots held by polls out."""
        with self._lock:
            return sum(p.slots for p in self._out.values())

    def plan(self, free: int, now: float) -> list[tuple[str, int, int]]:
        """Spread ``free`` slots over flagged partitions without a poll out; mark them out.

        Returns:
            ``(poll_id, partition, slots)`` for each poll to send now.
        """
        with self._lock:
            if now - self._swept >= self.sweep_s:
                self._swept = now
                self._flagged |= set(range(self.partitions))
            busy = {p.partition for p in self._out.values()}
            start = next(self._start)
            order = sorted(self._flagged - busy, key=lambda p: (p - start) % self.partitions)
            order = order[:free]
            polls = []
            for i, p in enumerate(order):
                n = free // len(order) + (1 if i < free % len(order) else 0)
                poll_id = uuid.uuid4().hex[:16]
                self._out[poll_id] = Poll(p, n, now)
                self._flagged.discard(p)
                polls.append((poll_id, p, n))
            return polls

    def answered(self, poll_id: str, granted: int) -> Poll | None:
        """The fold answered ``poll_id``; returns the poll if it was one of this worker's (its
        ``sent_at`` dates the claim). A poll granted in full may leave more behind: its
        partition stays flagged."""
        with self._lock:
            poll = self._out.pop(poll_id, None)
            if poll is not None and granted >= poll.slots:
                self._flagged.add(poll.partition)
            return poll

    def expire(self, now: float, timeout_s: float) -> list[Poll]:
        """Forget polls unanswered for ``timeout_s`` (a failover); flag their partitions."""
        with self._lock:
            late = [k for k, p in self._out.items() if now - p.sent_at > timeout_s]
            polls = [self._out.pop(k) for k in late]
            self._flagged |= {p.partition for p in polls}
            return polls

    def out(self) -> int:
        """Polls out."""
        with self._lock:
            return len(self._out)
