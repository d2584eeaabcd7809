"""The Kafka side of ``cronlog replay``: the live table and run-events it verifies against,
and the producer that re-emits replayed run-events to another topic."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, Message, Producer

from cronlog import events as ev
from cronlog.errors import CronlogError
from topology.fold.folder import Outgoing
from topology.fold.markers import marker_of
from topology.kafka.config import KafkaSettings
from topology.kafka.log_reader import (
    LogReadError,
    ensure_topic,
    partition_count,
    read_partition,
    watermarks,
)
from topology.kafka.topics import Topics
from topology.snapshots.log import load_snapshot
from topology.snapshots.replay import (
    EventVerdict,
    compare_events,
    first_state_difference,
    latest_values,
)
from topology.snapshots.snapshot import Manifest, SnapshotError
from topology.wire.codec import Codec

READ_BATCH = 2000


@dataclass(frozen=True, slots=True)
class LiveSide:
    """The live topics' offsets sampled once: partition → (low, high).

    Attributes:
        changelog: the scheduler's job-table changelog (compacted); empty if it never ran.
        run_events: ``cronlog.run-events``.
    """

    changelog: dict[int, tuple[int, int]]
    run_events: dict[int, tuple[int, int]]

    @classmethod
    def sample(cls, consumer: Consumer, topics: Topics, partitions: int) -> LiveSide:
        """Sample both topics' watermarks now.

        Raises:
            LogReadError: run-events is missing, or a topic's partition count differs.
        """
        ends = {}
        for topic in (topics.job_table_changelog, topics.run_events):
            count = partition_count(consumer, topic)
            if count is None and topic == topics.job_table_changelog:
                ends[topic] = {p: (0, 0) for p in range(partitions)}
                continue
            if count != partitions:
                raise LogReadError(
                    f"cannot verify: {topic} has {count} partitions, "
                    f"{topics.commands} has {partitions}"
                )
            ends[topic] = watermarks(consumer, topic, partitions)
        return cls(ends[topics.job_table_changelog], ends[topics.run_events])


def _pairs(
    consumer: Consumer, topic: str, p: int, low: int, high: int
) -> list[tuple[int, bytes | None, bytes | None]]:
    return [
        (m.offset() or 0, m.key(), m.value())
        for msgs in read_partition(consumer, topic, p, low, high, READ_BATCH)
        for m in msgs
    ]


def _split(table: dict[bytes, bytes]) -> tuple[dict[bytes, bytes], dict[bytes, bytes]]:
    """Return (job records, dedupe markers) of a changelog table (``markers.marker_of``)."""
    jobs = {k: v for k, v in table.items() if marker_of(k) is None}
    return jobs, {k: v for k, v in table.items() if k not in jobs}


def _marker_difference(live: dict[bytes, bytes], replayed: dict[bytes, bytes]) -> str:
    """Name the first dedupe marker (by key) that differs, and how."""
    for key in sorted(set(live) | set(replayed)):
        a, b = live.get(key), replayed.get(key)
        if a != b:
            where = "the replay" if a is None else "the live table" if b is None else ""
            how = f"only in {where}" if where else f"{a!r} != {b!r} (live != replay)"
            return f"dedupe marker {marker_of(key)!r}: {how}"
    return "dedupe markers differ"


def verify_partition(
    consumer: Consumer,
    topics: Topics,
    live: LiveSide,
    p: int,
    replay: tuple[dict[bytes, bytes], Sequence[bytes], int],
    codec: Codec,
    anchor: tuple[bool, str | None] = (False, None),
    markers: bool = True,
) -> tuple[str | None, EventVerdict]:
    """Compare partition ``p`` of the live system with the replay.

    Args:
        consumer: a ``log_reader.reader`` consumer.
        topics, live: the topic names and the live offsets sampled before the replay read.
        p: the partition.
        replay: (the replay's job records of ``p`` at the live fold's committed offset; the
            replay's run-event values of ``p`` in fold order, up to its end offset; how many
            of those come from commands below that committed offset).
        codec: decodes run-events (every schema version in ``schemas/``).
        markers: compare the dedupe markers too (their changelog keys in both tables;
            False when the replay started from a snapshot taken before markers existed).
        anchor: (the replay started from a snapshot; the event_id of the last run-event of
            ``p`` before it, None if it had none). From a snapshot, the live events up to and
            including the anchor are left out (and later re-deliveries of them). Where
            retention deleted the head of run-events past that point (or past offset 0), the
            replay's events are aligned on the first live event instead, and the verdict's
            detail says so; if that event is not among the replay's, events are unverifiable.

    Returns:
        (None or the first state difference, the run-events verdict).
    """
    snapshot, replayed, acknowledged = replay
    low, high = live.changelog[p]
    table = latest_values(
        (k, v) for _, k, v in _pairs(consumer, topics.job_table_changelog, p, low, high)
    )
    live_jobs, live_marks = _split(table)
    jobs, marks = _split(snapshot)
    state_detail = first_state_difference(live_jobs, jobs) if live_jobs != jobs else None
    if state_detail is None and markers and live_marks != marks:
        state_detail = _marker_difference(live_marks, marks)
    low, high = live.run_events[p]
    started, anchor_id = anchor
    live_events: list[ev.RunEvent] = []
    for offset, _, value in _pairs(consumer, topics.run_events, p, low, high):
        try:
            live_events.append(codec.decode_event(value or b""))
        except CronlogError as exc:
            return state_detail, _fail(
                replayed, acknowledged, f"{topics.run_events}/{p}@{offset} cannot be decoded: {exc}"
            )
    ours = [codec.decode_event(v) for v in replayed]
    ids = [e.event_id for e in live_events]
    note = ""
    if started and anchor_id is not None and anchor_id in ids:
        cut = ids.index(anchor_id) + 1
        before = set(ids[:cut])
        live_events = [e for e in live_events[cut:] if e.event_id not in before]
    elif low > 0:
        # retention deleted the head of run-events past the start: align the replay on the
        # first event the live topic still holds (nothing before it can be compared)
        mine = [e.event_id for e in ours]
        if not live_events or live_events[0].event_id not in mine:
            return state_detail, _fail(
                replayed,
                acknowledged,
                f"{topics.run_events}/{p} starts at offset {low} (its head was deleted) "
                f"with no event the replay produced: events cannot be verified",
            )
        k = mine.index(live_events[0].event_id)
        ours, acknowledged = ours[k:], max(0, acknowledged - k)
        note = f"; {topics.run_events}/{p} starts at offset {low} (retention): compared from there"
    verdict = compare_events(live_events, ours, acknowledged)
    return state_detail, dataclasses.replace(verdict, detail=verdict.detail + note)


def recheck_snapshots(
    consumer: Consumer,
    topics: Topics,
    later: dict[str, Manifest],
    p: int,
    differing: Sequence[tuple[int, str, str, dict[bytes, bytes]]],
) -> tuple[int, str | None]:
    """Compare record by record the snapshots of partition ``p`` whose digest is not the replay's.

    A digest covers the stored bytes: a snapshot written before an upgrade of the job record
    format (``topology.wire.state_codec``) holds other bytes for the same state, which
    ``first_state_difference`` reads as equal.

    Args:
        consumer: a ``log_reader.reader`` consumer (its assignment is replaced).
        topics: topic names.
        later: the snapshots' manifests, by id (``replay_start.Start.later``).
        p: the commands partition.
        differing: (offset, snapshot id, how the digests differ, the replay's job records of
            ``p`` at that offset), one per snapshot to compare.

    Returns:
        (how many hold the replay's state, None or the first difference found).
    """
    same, detail = 0, None
    for offset, sid, digests, state in differing:
        try:
            parts = load_snapshot(consumer, topics, later[sid])
            entries = next(s.entries for s in parts if s.partition == p)
            found = first_state_difference(
                {e.key: e.value for e in entries if e.value is not None}, state
            )
        except (KeyError, StopIteration, SnapshotError) as exc:
            found = f"its records cannot be read ({exc})"
        if found is None:
            same += 1
        elif detail is None:
            detail = (
                f"snapshot {sid} differs from the replay at offset {offset} ({digests}: {found})"
            )
    return same, detail


def _fail(replayed: Sequence[bytes], acknowledged: int, detail: str) -> EventVerdict:
    return EventVerdict(False, 0, 0, len(replayed), acknowledged, detail)


class EventSink:
    """Produces replayed run-events to another topic: same keys, values and partitioning.

    Args:
        settings: where the cluster is (murmur2 partitioning, idempotent, acks=all).
        topic: the target; created with ``partitions`` partitions if missing.
        partitions: the run-events partition count.

    Raises:
        LogReadError: the topic exists with another partition count, or cannot be created.
    """

    def __init__(self, settings: KafkaSettings, topic: str, partitions: int) -> None:
        self.topic = topic
        self.created = ensure_topic(
            settings, topic, partitions, {"retention.ms": "-1", "cleanup.policy": "delete"}
        )
        self.producer = Producer(
            settings.producer_config(**{"acks": "all", "queue.buffering.max.messages": 500_000})
        )
        self.errors: list[str] = []
        self.sent = 0

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.errors.append(f"{msg.topic()}/{msg.partition()}: {err}")

    def send(self, messages: Sequence[Outgoing]) -> None:
        """Queue ``messages`` (run-events as the fold made them) for the target topic."""
        for m in messages:
            while True:
                try:
                    self.producer.produce(
                        self.topic, key=m.key, value=m.value, on_delivery=self._on_delivery
                    )
                    break
                except BufferError:
                    self.producer.poll(0.05)  # local queue full: let deliveries drain
            self.sent += 1
        self.producer.poll(0)

    def close(self, timeout_s: float = 60.0) -> None:
        """Wait for every ack.

        Raises:
            LogReadError: a message failed or was still unacknowledged after ``timeout_s``.
        """
        remaining = self.producer.flush(timeout_s)
        if remaining:
            self.errors.append(f"{remaining} messages unacknowledged after {timeout_s:.0f}s")
        if self.errors:
            raise LogReadError(
                f"re-emitting to {self.topic!r} failed: " + "; ".join(self.errors[:5])
            )
