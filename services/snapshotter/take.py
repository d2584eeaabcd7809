"""One snapshot: the newest usable one, the commands after it folded with ``Replayer``, a new
snapshot written. Design: docs/architecture.md, "Retention and snapshots".
"""

from __future__ import annotations

from dataclasses import dataclass, field

from confluent_kafka import Consumer, Message

from cronlog.errors import CronlogError
from services.scheduler.settings import SchedulerSettings
from topology.fold.folder import Record
from topology.kafka.config import KafkaSettings
from topology.kafka.log_reader import offset_of, partition_count, read_partition, reader, watermarks
from topology.kafka.topics import Topics
from topology.snapshots.log import load_snapshot, read_manifests, write_snapshot
from topology.snapshots.replay import Replayer
from topology.snapshots.snapshot import (
    Manifest,
    PartitionSnapshot,
    SnapshotError,
    fold_partition,
    newest,
    seed,
    take,
)
from topology.wire.registry import codec_for


class SnapshotterError(CronlogError):
    """No snapshot can be taken (missing topic, or the log no longer reaches back far enough)."""


@dataclass
class Base:
    """Where a fold starts: a loaded snapshot (None: offset 0) and what was skipped."""

    manifest: Manifest | None
    parts: list[PartitionSnapshot]
    notes: list[str] = field(default_factory=list)


def find_base(
    consumer: Consumer,
    topics: Topics,
    low: dict[int, int],
    high: dict[int, int],
    *,
    oldest: bool = False,
) -> Base:
    """Return the newest (or ``oldest``) snapshot usable for the log ``[low, high)``, loaded.

    A snapshot whose chunks are gone or damaged is skipped with a note, and the next one
    tried. None usable and every partition starts at 0: start from offset 0.

    Raises:
        SnapshotterError: some partition's head was deleted and no snapshot covers it.
    """
    manifests, notes = read_manifests(consumer, topics)
    candidates = list(newest(manifests, low, high))
    if oldest:
        candidates.reverse()
    for m in candidates:
        try:
            return Base(m, load_snapshot(consumer, topics, m), notes)
        except SnapshotError as exc:
            notes.append(f"snapshot {m.snapshot_id} skipped: {exc}")
    heads = sorted(p for p, o in low.items() if o > 0)
    if heads:
        raise SnapshotterError(
            f"partitions {heads} of {topics.commands} no longer start at offset 0 "
            f"(retention deleted their head) and no kept snapshot covers the deleted part: "
            f"the state cannot be rebuilt from the log ({len(manifests)} snapshots read; "
            + "; ".join(notes[-3:])
            + ")"
        )
    return Base(None, [], notes)


@dataclass(frozen=True, slots=True)
class Taken:
    """What ``take_snapshot`` did.

    Attributes:
        manifest: the snapshot written, or the base when nothing new was folded.
        written: False when the log had nothing after the newest snapshot.
        folded: command records folded after the base.
        notes: what was skipped on the way.
    """

    manifest: Manifest | None
    written: bool
    folded: int
    notes: list[str]


def record_of(m: Message) -> Record:
    """Return a read commands record as the fold takes it (LogAppendTime as its time)."""
    return Record(m.partition() or 0, offset_of(m), m.timestamp()[1], m.key(), m.value() or b"")


def take_snapshot(settings: KafkaSettings, batch_size: int = 2000) -> Taken:
    """Take one snapshot of every commands partition and write it to the snapshots topic.

    Starts from the newest usable snapshot (or offset 0), folds each partition's commands up
    to its end offset sampled at start with the replay's ``Replayer``, and writes the result
    unless nothing was folded.

    Raises:
        SnapshotterError: the commands topic is missing, or its head is gone uncovered.
        SnapshotError: the new snapshot could not be written (nothing of it is valid).
        topology.kafka.log_reader.LogReadError: the cluster could not be read.

    Determinism: the same log gives the same snapshot (same id, same bytes).
    """
    topics = Topics.of(settings)
    consumer = reader(settings)
    try:
        n = partition_count(consumer, topics.commands)
        if n is None:
            raise SnapshotterError(f"topic {topics.commands!r} does not exist")
        marks = watermarks(consumer, topics.commands, n)
        low = {p: lo for p, (lo, _) in marks.items()}
        high = {p: hi for p, (_, hi) in marks.items()}
        base = find_base(consumer, topics, low, high)
        codec = codec_for(settings)  # as the fold: Confluent-framed commands need the registry
        live = SchedulerSettings()  # the fold's slice and dedupe horizon
        replayer = Replayer(
            topics, n, {}, codec, tick_slice=live.tick_slice, rules=live.idem_rules()
        )
        by_p = {s.partition: s for s in base.parts}
        for s in base.parts:
            seed(replayer, s)
        parts, folded = [], 0
        for p in range(n):
            start = by_p.get(p)
            first = start.offset if start else 0
            batches = (
                [record_of(m) for m in msgs]
                for msgs in read_partition(consumer, topics.commands, p, first, high[p], batch_size)
            )
            last_event, time_ms, count = fold_partition(
                replayer, codec, batches, start.last_event_id if start else None
            )
            folded += count
            end = max(first, high[p])  # all of [first, high) was read (markers included)
            if time_ms is None and start is not None:
                time_ms = start.time_ms
            parts.append(take(replayer, p, end, time_ms, last_event))
    finally:
        consumer.close()
    if base.manifest is not None and folded == 0:
        return Taken(base.manifest, False, 0, base.notes)
    commands = (base.manifest.commands if base.manifest else 0) + folded
    base_id = base.manifest.snapshot_id if base.manifest else None
    manifest = write_snapshot(settings, topics, parts, base_id, commands)
    return Taken(manifest, True, folded, base.notes)
