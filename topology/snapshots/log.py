"""The snapshots topic: reading its manifests, loading a snapshot's chunks, writing a snapshot.

Two partitions (``topology.kafka.topics``): manifests on ``SNAPSHOT_MANIFESTS``, chunks on
``SNAPSHOT_CHUNKS``. A snapshot's chunks are written and acknowledged (``acks=all``,
idempotent producer) before its manifest is produced: a manifest names only chunks already
in the log, so a crash mid-write leaves chunks without a manifest, which every reader
ignores (docs/architecture.md, "Retention and snapshots").
"""

from __future__ import annotations

from collections.abc import Sequence

from confluent_kafka import Consumer, KafkaError, Message, Producer

from topology.kafka.config import KafkaSettings
from topology.kafka.log_reader import partition_count, read_partition, watermarks
from topology.kafka.topics import SNAPSHOT_CHUNKS, SNAPSHOT_MANIFESTS, Topics
from topology.snapshots.snapshot import Manifest, PartitionSnapshot, SnapshotError
from topology.snapshots.wire import (
    assemble,
    decode_manifest,
    encode_chunks,
    encode_manifest,
    make_manifest,
    snapshot_id,
)

FLUSH_S = 60.0
"""Longest wait for a snapshot's records to be acknowledged, seconds."""


def read_manifests(consumer: Consumer, topics: Topics) -> tuple[list[Manifest], list[str]]:
    """Return every complete snapshot's manifest still kept, in log order, and notes.

    Args:
        consumer: a ``log_reader.reader`` consumer (its assignment is replaced).
        topics: topic names.

    Returns:
        (manifests, notes): a missing snapshots topic gives none and a note; an unreadable
        manifest is skipped with a note naming its offset.
    """
    if partition_count(consumer, topics.snapshots) is None:
        return [], [f"topic {topics.snapshots} does not exist: no snapshots"]
    low, high = watermarks(consumer, topics.snapshots, SNAPSHOT_CHUNKS + 1)[SNAPSHOT_MANIFESTS]
    found: list[Manifest] = []
    notes: list[str] = []
    for msgs in read_partition(consumer, topics.snapshots, SNAPSHOT_MANIFESTS, low, high):
        for m in msgs:
            try:
                found.append(decode_manifest(m.value() or b""))
            except SnapshotError as exc:
                notes.append(f"{topics.snapshots}/{SNAPSHOT_MANIFESTS}@{m.offset()} skipped: {exc}")
    return found, notes


def load_snapshot(consumer: Consumer, topics: Topics, m: Manifest) -> list[PartitionSnapshot]:
    """Read and check the chunks of ``m``.

    Raises:
        SnapshotError: a chunk is gone (retention), missing or damaged, or a digest differs.
    """
    low, high = watermarks(consumer, topics.snapshots, SNAPSHOT_CHUNKS + 1)[SNAPSHOT_CHUNKS]
    if m.chunks_from < low:
        raise SnapshotError(f"snapshot {m.snapshot_id}: its chunks were deleted (retention)")
    # a manifest is data anyone with write access to the topic can forge: one naming chunks
    # past the partition's end, or more chunks than its range holds, is skipped, not waited
    # for (a stall) or believed (a range of 2**31 built in memory); found by an adversarial run
    if not m.chunks_from <= m.chunks_to < high:
        raise SnapshotError(
            f"snapshot {m.snapshot_id}: its chunks {m.chunks_from}..{m.chunks_to} are not on "
            f"the chunks partition (it ends at {high})"
        )
    if not 0 < m.chunks <= m.chunks_to - m.chunks_from + 1:
        raise SnapshotError(
            f"snapshot {m.snapshot_id}: {m.chunks} chunks cannot lie in offsets "
            f"{m.chunks_from}..{m.chunks_to}"
        )
    batches = read_partition(
        consumer, topics.snapshots, SNAPSHOT_CHUNKS, m.chunks_from, m.chunks_to + 1
    )
    values = [r.value() or b"" for msgs in batches for r in msgs]
    return assemble(m, values)


class _Acks:
    """Collects delivery reports: offsets of acknowledged records, and errors."""

    def __init__(self) -> None:
        self.offsets: list[int] = []
        self.errors: list[str] = []

    def __call__(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.errors.append(str(err))
        elif (offset := msg.offset()) is not None:
            self.offsets.append(offset)


def _flush(producer: Producer, acks: _Acks, what: str, expected: int) -> None:
    remaining = producer.flush(FLUSH_S)
    if remaining or acks.errors or len(acks.offsets) != expected:
        detail = "; ".join(acks.errors[:3]) or f"{remaining} unacknowledged after {FLUSH_S:.0f}s"
        raise SnapshotError(f"writing {what} failed: {detail}")


def write_snapshot(
    settings: KafkaSettings,
    topics: Topics,
    parts: Sequence[PartitionSnapshot],
    base_id: str | None,
    commands: int,
) -> Manifest:
    """Write a snapshot: its chunks, then (once every chunk is acknowledged) its manifest.

    Args:
        settings: the cluster.
        topics: topic names (the snapshots topic must exist: ``ensure_topics``).
        parts: one snapshot per commands partition.
        base_id: the snapshot these were folded from (None: from offset 0).
        commands: commands records folded since offset 0 (all of them, dead letters too).

    Returns:
        The manifest written.

    Raises:
        SnapshotError: a record was not acknowledged; nothing of this snapshot is valid
            (a manifest is never produced after a failed chunk).

    Idempotency: writing the same snapshot twice writes a second, equal copy; readers treat
    them as one (same id).
    """
    sid = snapshot_id(parts)
    chunks = encode_chunks(sid, parts)
    producer = Producer(
        settings.producer_config(**{"acks": "all", "compression.type": "lz4", "linger.ms": 5})
    )
    acks = _Acks()
    for seq, value in enumerate(chunks):
        key = f"{sid}/{seq}".encode()
        producer.produce(
            topics.snapshots, value=value, key=key, partition=SNAPSHOT_CHUNKS, on_delivery=acks
        )
        producer.poll(0)
    _flush(producer, acks, f"snapshot {sid}'s chunks", len(chunks))
    manifest = make_manifest(
        sid, base_id, commands, parts, chunks, (min(acks.offsets), max(acks.offsets))
    )
    done = _Acks()
    producer.produce(
        topics.snapshots,
        value=encode_manifest(manifest),
        key=sid.encode(),
        partition=SNAPSHOT_MANIFESTS,
        on_delivery=done,
    )
    _flush(producer, done, f"snapshot {sid}'s manifest", 1)
    return manifest
