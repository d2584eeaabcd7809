"""Bringing a partition's store up to its changelog: bulk reads, one RocksDB batch per read.

The changelog holds, per job, the record after every committed batch (latest value per key
after compaction), and the dedupe markers of external commands (``topology/fold/markers.py``,
keys no job_id can have), which go to the store's marker keys. A store is trusted up to the
changelog offset it records; the restore reads from the next offset to the changelog's end
as a ``read_committed`` consumer sees it (the last stable offset: an open transaction of a
fenced owner is not waited for, an aborted one never read) and writes each consumed batch of
records, with their deadlines, in one RocksDB write batch (Kafka Streams' restore consumer,
Quix Streams' recovery: same shape).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from functools import partial

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from cronlog.time import to_ms
from topology.fold.markers import MarkerChanges, marker_of
from topology.fold.partition_store import PartitionStore
from topology.kafka.retrying import Liveness, call_with_retry, is_transient
from topology.wire.state_codec import is_ledger, load_state

BATCH = 5000
"""Changelog records per consume call and per RocksDB write batch."""
STALL_S = 60.0
"""A restore that receives nothing for this long before the changelog's end fails."""
POLL_S = 0.05
"""Longest wait for the next record before the consumer's position is checked, seconds."""
CONSUMER_CONFIG: dict[str, object] = {"enable.partition.eof": True, "fetch.wait.max.ms": 10}
"""What a restore consumer needs beyond ``consumer_config``: end-of-partition events, and a
short broker-side fetch wait (the fetch left waiting at one partition's end holds the next
restore's first fetch back for that long: 500 ms by default)."""


class RestoreError(Exception):
    """The changelog could not be read to its end."""


@dataclass(frozen=True, slots=True)
class Restored:
    """What a restore did.

    Attributes:
        records: changelog records applied to the store.
        seconds: wall time, seconds.
        start: the first changelog offset read (the store's recorded offset + 1).
        end: the changelog's end (last stable offset) when the restore began.
    """

    records: int
    seconds: float
    start: int
    end: int


def ready_ms(value: bytes) -> int | None:
    """Return a stored job record's ready_rank (epoch ms), or None (the tenant ledger's)."""
    if is_ledger(value):
        return None
    ready = load_state(value).ready_rank()
    return None if ready is None else to_ms(ready)


def index_keys(value: bytes | None) -> tuple[int | None, int | None]:
    """Return a stored job record's next deadline and ready_rank (epoch ms, or None each)."""
    if value is None or is_ledger(value):
        return None, None
    state = load_state(value)
    deadline, ready = state.next_deadline(), state.ready_rank()
    return (
        None if deadline is None else to_ms(deadline),
        None if ready is None else to_ms(ready),
    )


def watermarks(
    consumer: Consumer, tp: TopicPartition, stop: threading.Event | None = None
) -> tuple[int, int]:
    """Return ``tp``'s (low, end) offsets from the broker, retrying transient errors.

    A broker node killed while a partition is restored fails the request in flight
    (``_DESTROY_BROKER``, ``_TRANSPORT``, ``NOT_LEADER_FOR_PARTITION`` while its leaders
    move): the call is made again with capped backoff, logged once per episode
    (``action=broker_trouble thread=restore``), until it answers or ``stop`` is set
    (docs/architecture.md, "Broker errors and dead threads").

    Args:
        consumer: any consumer of the cluster.
        tp: the partition.
        stop: SIGTERM; ends the waiting with ``Stopped``. None: wait for as long as it takes.

    Returns:
        (low, end): the first offset still in the log and the end (last stable offset for a
        ``read_committed`` consumer).

    Raises:
        Stopped: ``stop`` was set while retrying.
        RestoreError: an error that is not transient (e.g. authorization).
    """
    what = f"watermark offsets of {tp.topic}/{tp.partition}"
    try:
        low, end = call_with_retry(
            partial(consumer.get_watermark_offsets, tp, timeout=30, cached=False),
            what=what,
            liveness=Liveness("restore"),
            stop=stop,
        )
    except KafkaException as exc:
        raise RestoreError(f"{what}: {exc}") from exc
    return int(low), int(end)


def last_write_committed(
    consumer: Consumer,
    topic: str,
    partition: int,
    offset: int,
    timeout_s: float = STALL_S,
    stop: threading.Event | None = None,
) -> bool:
    """Whether the changelog record at ``offset`` (a store's recorded offset) is committed.

    A store is written after the transaction that put the same records in the changelog
    committed, so its last record is normally one a ``read_committed`` reader sees. Not when
    the broker acknowledged the commit and stopped before it wrote the commit markers, and the
    hanging transaction was then aborted (``kafka-transactions.sh abort``, KIP-664): the store
    holds the effects of a batch the log does not have (adversary finding F2, Kafka 4.3.1).

    Args:
        consumer: a ``read_committed`` consumer with CONSUMER_CONFIG (its assignment is
            replaced and cleared).
        topic: the job table's changelog topic.
        partition: the partition (the command partition's number).
        offset: the store's recorded changelog offset; below 0 (an empty store) is trusted.
        timeout_s: longest wait for the answer once the changelog's end is known, seconds.
        stop: SIGTERM, for the retries of ``watermarks``.

    Returns:
        True when the record at ``offset`` is delivered to a ``read_committed`` reader. False
        when it is not (aborted, or the log ends before it), or when a later record comes
        first (compaction removed it: the store is rebuilt, which is slow but right).

    Raises:
        RestoreError: no answer within ``timeout_s``, or a fetch error that is not transient.
        Stopped: ``stop`` was set while the broker was retried.
    """
    if offset < 0:
        return True
    tp = TopicPartition(topic, partition)
    low, end = watermarks(consumer, tp, stop)
    if offset >= end:
        return False
    consumer.assign([TopicPartition(topic, partition, max(offset, low))])
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            m = consumer.poll(POLL_S)
            if m is None:
                continue
            err = m.error()
            if err is None:
                return m.offset() == offset
            if err.code() == KafkaError._PARTITION_EOF:
                return False  # nothing committed from the offset to the end
            if not is_transient(err):
                raise RestoreError(f"{topic}/{partition}: {err}")
    except KafkaException as exc:
        raise RestoreError(f"{topic}/{partition}: {exc}") from exc
    finally:
        consumer.unassign()
    raise RestoreError(f"{topic}/{partition}: no answer for offset {offset} in {timeout_s:.0f}s")


def restore(
    consumer: Consumer,
    topic: str,
    partition: int,
    store: PartitionStore,
    stop: threading.Event | None = None,
) -> Restored:
    """Read ``topic/partition`` from after the store's offset to its end into ``store``.

    Args:
        consumer: a ``read_committed`` consumer with CONSUMER_CONFIG, used with manual
            assignment (its assignment is replaced and cleared).
        topic: the job table's changelog topic.
        partition: the partition (the command partition's number).
        store: the partition's store.
        stop: SIGTERM, for the retries of ``watermarks``.

    Returns:
        What was restored.

    Raises:
        RestoreError: a fetch error that is not transient, or nothing arrived for STALL_S
            before the end.
        Stopped: ``stop`` was set while the broker was retried.
    """
    started = time.monotonic()
    start = store.changelog_offset() + 1
    tp = TopicPartition(topic, partition)
    low, end = watermarks(consumer, tp, stop)
    start = max(start, low)
    if start >= end:
        store.index_markers()  # a restore that stopped before its end left it to do
        return Restored(0, time.monotonic() - started, start, end)
    consumer.assign([TopicPartition(topic, partition, start)])
    position, applied, idle_since = start, 0, time.monotonic()
    indexed = store.has_markers()  # else no read per marker: the index is built at the end
    try:
        while position < end:
            # poll returns as soon as a record is there; consume with a timeout would wait
            # all of it for a full batch, even past the end
            first = consumer.poll(POLL_S)
            msgs = [] if first is None else [first, *consumer.consume(BATCH - 1, timeout=0)]
            rows: list[tuple[str, bytes | None, int | None, int | None]] = []
            marks: MarkerChanges = {}  # the latest per marker: a put then its tombstone
            last = -1
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        position = max(position, m.offset() or position)
                    elif not is_transient(err):
                        raise RestoreError(f"{topic}/{partition}: {err}")
                    continue
                offset = m.offset() or 0
                key = m.key()
                if key is not None and offset < end:
                    value = m.value()
                    marker = marker_of(key)
                    if marker is not None:
                        marks[(partition, marker)] = value
                    else:
                        rows.append((key.decode(), value, *index_keys(value)))
                    last = offset
                position = max(position, offset + 1)
            if rows or marks:
                store.write(rows, last, marks, indexed=indexed)
                applied += len(rows) + len(marks)
            if msgs:
                idle_since = time.monotonic()
                continue
            # a commit marker takes an offset but is never delivered (nor, when it ends the
            # partition, followed by EOF before the broker's fetch wait): the position skips it
            position = max(position, consumer.position([tp])[0].offset)
            if position < end and time.monotonic() - idle_since > STALL_S:
                raise RestoreError(
                    f"{topic}/{partition}: nothing after offset {position} for {STALL_S:.0f}s, "
                    f"expected records up to {end}"
                )
    except KafkaException as exc:
        raise RestoreError(f"{topic}/{partition}: {exc}") from exc
    finally:
        consumer.unassign()
    store.index_markers()
    return Restored(applied, time.monotonic() - started, start, end)
