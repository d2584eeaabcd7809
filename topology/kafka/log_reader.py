"""Reading topic partitions as bounded logs (confluent-kafka, manual assignment, no commits).

For tools that read a topic from its beginning up to offsets sampled once (replay, verify):
watermarks, a consumer group's committed offsets, the offset of an instant, and one
partition's records in batches. Transient broker errors (a partition without a leader right
after creation, a broker restarting) are retried for up to RETRY_DEADLINE_S.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from functools import partial
from typing import TypeVar

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from cronlog.errors import CronlogError
from topology.kafka.config import KafkaSettings
from topology.kafka.retrying import Unavailable, call_with_retry, is_transient

T = TypeVar("T")
TIMEOUT_S = 10.0
STALL_S = 30.0
"""A partition read that gets nothing for this long before its end offset fails."""
RETRY_DEADLINE_S = 60.0
"""How long a request failing with transient errors is retried before it fails."""


class LogReadError(CronlogError):
    """A topic could not be read as asked (missing, unreachable, or stalled before its end)."""


class LogStalled(LogReadError, Unavailable):
    """A partition read got nothing for STALL_S before its end offset (transient)."""


def _retried(fn: Callable[[], T], what: str) -> T:
    """``fn()`` with transient errors retried up to RETRY_DEADLINE_S (then raised)."""
    return call_with_retry(fn, what=what, deadline_s=RETRY_DEADLINE_S)


def reader(settings: KafkaSettings) -> Consumer:
    """Return a consumer for manual assignment: its own throwaway group, never commits."""
    return Consumer(
        settings.consumer_config(
            f"{settings.topic_prefix}cronlog-reader-{uuid.uuid4().hex}",
            **{"enable.partition.eof": False},
        )
    )


def partition_count(consumer: Consumer, topic: str) -> int | None:
    """Return the partition count of ``topic``, or None if it does not exist.

    Raises:
        LogReadError: the cluster did not answer within TIMEOUT_S.
    """
    try:
        meta = _retried(
            lambda: consumer.list_topics(topic, timeout=TIMEOUT_S).topics.get(topic),
            f"listing {topic}",
        )
    except KafkaException as exc:
        raise LogReadError(f"cannot list topic {topic!r}: {exc}") from exc
    if meta is None or meta.error is not None or not meta.partitions:
        return None
    return len(meta.partitions)


def watermarks(consumer: Consumer, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    """Return partition → (low, high) offsets: the first kept record and the next to write."""
    out = {}
    for p in range(partitions):
        tp = TopicPartition(topic, p)
        try:
            out[p] = _retried(
                partial(consumer.get_watermark_offsets, tp, timeout=TIMEOUT_S),
                f"reading the offsets of {topic}/{p}",
            )
        except KafkaException as exc:
            raise LogReadError(f"cannot read the offsets of {topic}/{p}: {exc}") from exc
    return out


def committed(
    settings: KafkaSettings, group: str, topic: str, partitions: int
) -> dict[int, int | None]:
    """Return partition → the offset ``group`` committed (next to read), None if it has none.

    Reads the group's offsets without joining the group (no subscribe, no rebalance).
    """
    consumer = Consumer(settings.consumer_config(group))
    asked = [TopicPartition(topic, p) for p in range(partitions)]
    try:
        tps = _retried(
            lambda: consumer.committed(asked, timeout=TIMEOUT_S), f"reading {group}'s offsets"
        )
    except KafkaException as exc:
        raise LogReadError(f"cannot read group {group!r}'s offsets: {exc}") from exc
    finally:
        consumer.close()
    return {tp.partition: tp.offset if tp.offset >= 0 else None for tp in tps}


def offsets_after(
    consumer: Consumer, topic: str, partitions: int, instant_ms: int
) -> dict[int, int]:
    """Return partition → the first offset whose timestamp is after ``instant_ms`` (epoch ms).

    The broker's time index answers (earliest offset with timestamp ≥ instant + 1 ms); a
    partition with no such record gives its high watermark. Everything before the returned
    offset is the log as it stood at the instant.
    """
    asked = [TopicPartition(topic, p, instant_ms + 1) for p in range(partitions)]
    try:
        found = _retried(
            lambda: consumer.offsets_for_times(asked, timeout=TIMEOUT_S),
            f"looking up offsets by time in {topic}",
        )
    except KafkaException as exc:
        raise LogReadError(f"cannot look up offsets by time in {topic}: {exc}") from exc
    high = watermarks(consumer, topic, partitions)
    return {tp.partition: tp.offset if tp.offset >= 0 else high[tp.partition][1] for tp in found}


def read_partition(
    consumer: Consumer, topic: str, partition: int, start: int, end: int, batch: int = 500
) -> Iterator[list[Message]]:
    """Yield the records of ``topic/partition`` with ``start <= offset < end``, in batches.

    Args:
        consumer: from ``reader`` (its assignment is replaced).
        topic: the topic to read.
        partition: the partition to read.
        start: the first offset to read.
        end: the offset to stop before; nothing is read when ``end <= start``.
        batch: most records per yielded list.

    Raises:
        LogReadError: a fetch error, or nothing arrived for STALL_S before ``end``.
    """
    if end <= start:
        return
    consumer.assign([TopicPartition(topic, partition, start)])
    position = start
    idle = 0.0
    while position < end:
        # consume() waits for all it asked for: never ask past the end, or the last batch of
        # every partition would cost the whole timeout.
        msgs = consumer.consume(num_messages=min(batch, end - position), timeout=1.0)
        permanent = [e for m in msgs if (e := m.error()) is not None and not is_transient(e)]
        if permanent:
            raise LogReadError(f"{topic}/{partition}: {permanent[0]}")
        msgs = [m for m in msgs if m.error() is None]  # transient: librdkafka fetches again
        if not msgs:
            # A transaction's commit marker takes an offset but is never delivered: after the
            # last record the consumer's position (which skips markers) is what says "end".
            position = max(position, _position(consumer, topic, partition))
            if position >= end:
                break
            idle += 1.0
            if idle >= STALL_S:
                raise LogStalled(
                    f"{topic}/{partition}: nothing after offset {position} "
                    f"for {STALL_S:.0f}s, expected records up to {end}"
                )
            continue
        idle = 0.0
        kept = [m for m in msgs if offset_of(m) < end]
        position = offset_of(msgs[-1]) + 1
        if kept:
            yield kept
    consumer.unassign()


def _position(consumer: Consumer, topic: str, partition: int) -> int:
    [tp] = consumer.position([TopicPartition(topic, partition)])
    return int(tp.offset) if tp.offset >= 0 else -1


def ends_reached(consumer: Consumer, topic: str, ends: dict[int, int]) -> set[int]:
    """Return the partitions whose consumer position reached their end offset.

    Records of transactional topics are followed by commit markers, which take offsets but
    are never delivered: "the last record's offset + 1" can stay below the end for ever, the
    position (which skips markers) does not.
    """
    tps = consumer.position([TopicPartition(topic, p) for p in ends])
    return {tp.partition for tp in tps if tp.offset >= 0 and tp.offset >= ends[tp.partition]}


def offset_of(m: Message) -> int:
    """Return the offset of a record read from a topic (never None for those)."""
    offset = m.offset()
    if offset is None:  # only for produced messages not yet delivered; never for a read one
        raise LogReadError(f"{m.topic()}/{m.partition()}: a record without an offset")
    return offset


def ensure_topic(
    settings: KafkaSettings, name: str, partitions: int, config: dict[str, str] | None = None
) -> bool:
    """Create ``name`` with ``partitions`` partitions unless it exists; True if created.

    Raises:
        LogReadError: it exists with another partition count, or creation failed.
    """
    admin = AdminClient(settings.admin_config())
    meta = _retried(
        lambda: admin.list_topics(name, timeout=TIMEOUT_S).topics.get(name), f"listing {name}"
    )
    if meta is not None and meta.error is None and meta.partitions:
        if len(meta.partitions) != partitions:
            raise LogReadError(
                f"topic {name!r} has {len(meta.partitions)} partitions, "
                f"run-events has {partitions}: per-job order and partitioning "
                f"would not match"
            )
        return False
    future = admin.create_topics([NewTopic(name, partitions, config=config or {})])[name]
    try:
        future.result(TIMEOUT_S)
    except KafkaException as exc:
        raise LogReadError(f"cannot create topic {name!r}: {exc}") from exc
    return True
