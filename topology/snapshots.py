"""State snapshots of the fold: every job record with the command offsets it covers.

A replay then folds only the commands after it, and retention may delete those before.

Pure (no I/O): a snapshot is taken from, and seeded into, a ``topology.replay.Replayer``, and
written as Avro records (fastavro, schemaless) in chunks under the record size limit plus one
manifest, the record that makes a snapshot valid (``topology/snapshot_log.py`` writes it
last). Design: docs/architecture.md, "Retention and snapshots".
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import fastavro

from cronlog.errors import CronlogError
from topology.codec import Codec
from topology.fold import Record
from topology.replay import Replayer, state_digest

FORMAT = 1
"""The manifest ``format`` this module writes and reads; another one is skipped."""
CHUNK_BYTES = 800_000
"""A chunk is closed once its entries pass this many bytes (a job record is at most
``MAX_RECORD_BYTES``, 512 kB, so a chunk stays under the 1 MB record limit)."""

_ENTRY = {
    "type": "record",
    "name": "SnapshotEntry",
    "fields": [
        {"name": "key", "type": "bytes"},
        {"name": "value", "type": ["null", "bytes"]},
        {"name": "deadline_ms", "type": ["null", "long"]},
        {"name": "ready_ms", "type": ["null", "long"]},
    ],
}
_CHUNK = fastavro.parse_schema(
    {
        "type": "record",
        "name": "SnapshotChunk",
        "namespace": "cronlog.snapshot",
        "fields": [
            {"name": "snapshot_id", "type": "string"},
            {"name": "seq", "type": "int"},
            {"name": "partition", "type": "int"},
            {"name": "entries", "type": {"type": "array", "items": _ENTRY}},
        ],
    }
)
_PART = {
    "type": "record",
    "name": "ManifestPartition",
    "fields": [
        {"name": "partition", "type": "int"},
        {"name": "offset", "type": "long"},
        {"name": "time_ms", "type": ["null", "long"]},
        {"name": "entries", "type": "int"},
        {"name": "state_sha256", "type": "string"},
        {"name": "last_event_id", "type": ["null", "string"]},
    ],
}
_MANIFEST = fastavro.parse_schema(
    {
        "type": "record",
        "name": "SnapshotManifest",
        "namespace": "cronlog.snapshot",
        "fields": [
            {"name": "format", "type": "int"},
            {"name": "snapshot_id", "type": "string"},
            {"name": "base_id", "type": ["null", "string"]},
            {"name": "time_ms", "type": ["null", "long"]},
            {"name": "commands", "type": "long"},
            {"name": "chunks", "type": "int"},
            {"name": "chunks_sha256", "type": "string"},
            {"name": "chunks_from", "type": "long"},
            {"name": "chunks_to", "type": "long"},
            {"name": "partitions", "type": {"type": "array", "items": _PART}},
        ],
    }
)


class SnapshotError(CronlogError):
    """A snapshot is incomplete, damaged, or of another format."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One job of a partition as the fold holds it.

    Attributes:
        key: job_id, UTF-8 bytes (or the tenant ledger's key).
        value: the stored record (``state_codec`` bytes); None for a job the due or ready
            index still names without a record.
        deadline_ms: its entry in the due index, epoch ms (None: not due).
        ready_ms: its entry in the ready index, epoch ms (None: nothing to grant).
    """

    key: bytes
    value: bytes | None
    deadline_ms: int | None
    ready_ms: int | None


@dataclass(frozen=True, slots=True)
class PartitionSnapshot:
    """One commands partition folded up to ``offset``.

    Attributes:
        partition: the commands partition.
        offset: the first offset NOT folded in (commands ``[0, offset)`` are).
        time_ms: LogAppendTime of the last folded command, epoch ms (None: none folded).
        entries: its jobs, sorted by key.
        last_event_id: event_id of the last run-event its commands produced (None: none);
            where ``replay --verify`` starts comparing live run-events.
    """

    partition: int
    offset: int
    time_ms: int | None
    entries: tuple[Entry, ...]
    last_event_id: str | None

    @property
    def digest(self) -> str:
        """``state_digest`` of the partition's job records (what ``replay`` prints)."""
        return state_digest((e.key, e.value) for e in self.entries if e.value is not None)


@dataclass(frozen=True, slots=True)
class PartitionMark:
    """A partition as the manifest states it (no records): what a snapshot covers."""

    partition: int
    offset: int
    time_ms: int | None
    entries: int
    state_sha256: str
    last_event_id: str | None


@dataclass(frozen=True, slots=True)
class Manifest:
    """The record that makes a snapshot valid, written after all its chunks.

    Attributes:
        snapshot_id: ``<time_ms>-<12 hex of the offsets' and digests' sha256>``.
        base_id: the snapshot it was folded from (None: from offset 0).
        time_ms: the latest ``time_ms`` of its partitions (None: an empty log).
        commands: commands records folded since offset 0 (Ticks and dead-lettered ones
            included; what a replay from offset 0 would read).
        chunks: how many chunk records it has; chunks_sha256: sha256 over their values in
            ``seq`` order; chunks_from / chunks_to: the first and last offset of them on the
            chunks partition (other snapshots' chunks may lie between).
        partitions: one mark per commands partition.
    """

    snapshot_id: str
    base_id: str | None
    time_ms: int | None
    commands: int
    chunks: int
    chunks_sha256: str
    chunks_from: int
    chunks_to: int
    partitions: tuple[PartitionMark, ...]

    @property
    def offsets(self) -> dict[int, int]:
        """Commands partition → the first offset not covered."""
        return {m.partition: m.offset for m in self.partitions}

    def within(self, low: dict[int, int], high: dict[int, int]) -> bool:
        """Whether it can start a replay of the log ``[low, high)`` per partition.

        True when it has exactly those partitions, and every partition's offset lies in
        ``[low, high]`` (the commands after it are still kept, and it covers nothing past
        where the replay must stop).
        """
        offsets = self.offsets
        return set(offsets) == set(high) and all(
            low.get(p, 0) <= o <= high[p] for p, o in offsets.items()
        )


def take(
    replayer: Replayer,
    partition: int,
    offset: int,
    time_ms: int | None,
    last_event_id: str | None,
) -> PartitionSnapshot:
    """Return ``partition`` of ``replayer`` as it stands, having folded ``[0, offset)``.

    Determinism: the same fold gives the same snapshot (entries sorted by key).
    """
    records = replayer.snapshot(partition)
    due = dict(replayer.due.entries(partition))
    ready = dict(replayer.folder.ready.entries(partition))
    keys = set(records) | {j.encode() for j in due} | {j.encode() for j in ready}
    entries = tuple(
        Entry(k, records.get(k), due.get(k.decode()), ready.get(k.decode())) for k in sorted(keys)
    )
    return PartitionSnapshot(partition, offset, time_ms, entries, last_event_id)


def seed(replayer: Replayer, snap: PartitionSnapshot) -> None:
    """Load ``snap`` into a ``replayer`` that has not folded its partition yet.

    The store gets the records, the due and ready indexes exactly the snapshot's entries,
    so the replayer then decides what one that folded ``[0, snap.offset)`` decides
    (``tests/property/test_snapshot_replay.py``). The tenant ledger's record is a record
    like any other (its commands are folded from the store).
    """
    p = snap.partition
    due: list[tuple[str, int]] = []
    ready: list[tuple[str, int]] = []
    for e in snap.entries:
        if e.value is not None:
            replayer.store[e.key] = e.value
            replayer.jobs[p].add(e.key)
        if e.deadline_ms is not None:
            due.append((e.key.decode(), e.deadline_ms))
        if e.ready_ms is not None:
            ready.append((e.key.decode(), e.ready_ms))
    replayer.due.add_partition(p, due)
    replayer.folder.ready.add_partition(p, ready)


def fold_partition(
    replayer: Replayer, codec: Codec, batches: Iterable[Sequence[Record]], last_event_id: str | None
) -> tuple[str | None, int | None, int]:
    """Fold one partition's record batches in order.

    Returns:
        (event_id of the last run-event produced, or ``last_event_id`` if none; the last
        record's timestamp ms, or None if none; how many records were folded).
    """
    time_ms, count = None, 0
    for batch in batches:
        if not batch:
            continue
        sends = replayer.fold(batch)
        if sends:
            last_event_id = codec.decode_event(sends[-1].value).event_id
        time_ms, count = batch[-1].timestamp_ms, count + len(batch)
    return last_event_id, time_ms, count


# --- the wire form --------------------------------------------------------------------------


def _avro(schema: Any, doc: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, schema, doc)
    return buf.getvalue()


def _read(schema: Any, data: bytes, what: str) -> dict[str, Any]:
    try:
        doc = fastavro.schemaless_reader(io.BytesIO(data), schema, None)
    except Exception as exc:  # fastavro raises many types for damaged bytes
        raise SnapshotError(f"damaged {what}: {exc!r}") from exc
    if not isinstance(doc, dict):
        raise SnapshotError(f"damaged {what}: not a record")
    return doc


def snapshot_id(parts: Sequence[PartitionSnapshot]) -> str:
    """Return the id of a snapshot of ``parts``: its time and a digest of what it covers."""
    h = hashlib.sha256()
    for s in sorted(parts, key=lambda s: s.partition):
        h.update(f"{s.partition}:{s.offset}:{s.digest};".encode())
    time_ms = max((s.time_ms for s in parts if s.time_ms is not None), default=0)
    return f"{time_ms}-{h.hexdigest()[:12]}"


def encode_chunks(sid: str, parts: Sequence[PartitionSnapshot]) -> list[bytes]:
    """Return the chunk records of a snapshot, in ``seq`` order.

    Each holds one partition's entries in key order and is closed once past
    ``CHUNK_BYTES``; every partition has at least one (maybe empty).
    """
    chunks: list[bytes] = []
    for s in sorted(parts, key=lambda s: s.partition):
        batch: list[dict[str, Any]] = []
        size = 0
        for i, e in enumerate(s.entries):
            batch.append(
                {
                    "key": e.key,
                    "value": e.value,
                    "deadline_ms": e.deadline_ms,
                    "ready_ms": e.ready_ms,
                }
            )
            size += len(e.key) + len(e.value or b"") + 24
            if size >= CHUNK_BYTES and i < len(s.entries) - 1:
                chunks.append(_chunk(sid, len(chunks), s.partition, batch))
                batch, size = [], 0
        chunks.append(_chunk(sid, len(chunks), s.partition, batch))
    return chunks


def _chunk(sid: str, seq: int, partition: int, entries: list[dict[str, Any]]) -> bytes:
    doc = {"snapshot_id": sid, "seq": seq, "partition": partition, "entries": entries}
    return _avro(_CHUNK, doc)


def chunks_digest(chunks: Iterable[bytes]) -> str:
    """Return the sha256 (hex) over chunk values in order, each length-prefixed."""
    h = hashlib.sha256()
    for c in chunks:
        h.update(len(c).to_bytes(4, "big"))
        h.update(c)
    return h.hexdigest()


def make_manifest(
    sid: str,
    base_id: str | None,
    commands: int,
    parts: Sequence[PartitionSnapshot],
    chunks: Sequence[bytes],
    chunk_offsets: tuple[int, int],
) -> Manifest:
    """Return the manifest of a snapshot.

    ``chunk_offsets``: the (first, last) offsets its ``chunks`` landed at on the chunks
    partition.
    """
    marks = tuple(
        PartitionMark(s.partition, s.offset, s.time_ms, len(s.entries), s.digest, s.last_event_id)
        for s in sorted(parts, key=lambda s: s.partition)
    )
    time_ms = max((s.time_ms for s in parts if s.time_ms is not None), default=None)
    return Manifest(
        sid,
        base_id,
        time_ms,
        commands,
        len(chunks),
        chunks_digest(chunks),
        chunk_offsets[0],
        chunk_offsets[1],
        marks,
    )


def encode_manifest(m: Manifest) -> bytes:
    """Return the manifest record's value (Avro, schemaless)."""
    doc = {
        "format": FORMAT,
        "snapshot_id": m.snapshot_id,
        "base_id": m.base_id,
        "time_ms": m.time_ms,
        "commands": m.commands,
        "chunks": m.chunks,
        "chunks_sha256": m.chunks_sha256,
        "chunks_from": m.chunks_from,
        "chunks_to": m.chunks_to,
        "partitions": [
            {
                "partition": p.partition,
                "offset": p.offset,
                "time_ms": p.time_ms,
                "entries": p.entries,
                "state_sha256": p.state_sha256,
                "last_event_id": p.last_event_id,
            }
            for p in m.partitions
        ],
    }
    return _avro(_MANIFEST, doc)


def decode_manifest(data: bytes) -> Manifest:
    """Return the manifest written as ``data``.

    Raises:
        SnapshotError: damaged, or of another ``format``.
    """
    doc = _read(_MANIFEST, data, "snapshot manifest")
    if doc["format"] != FORMAT:
        raise SnapshotError(f"snapshot manifest of format {doc['format']}, not {FORMAT}")
    marks = tuple(PartitionMark(**p) for p in doc["partitions"])
    return Manifest(
        doc["snapshot_id"],
        doc["base_id"],
        doc["time_ms"],
        doc["commands"],
        doc["chunks"],
        doc["chunks_sha256"],
        doc["chunks_from"],
        doc["chunks_to"],
        marks,
    )


def assemble(m: Manifest, chunk_values: Iterable[bytes]) -> list[PartitionSnapshot]:
    """Rebuild a snapshot's partitions from the chunk records read between its chunk offsets.

    Args:
        m: its manifest.
        chunk_values: the values on the chunks partition from ``m.chunks_from`` to
            ``m.chunks_to`` in offset order (other snapshots' chunks, and re-sent copies, are
            skipped by id and ``seq``).

    Returns:
        Its partitions, in partition order.

    Raises:
        SnapshotError: a chunk is missing or damaged, or the chunks' or a partition's digest
            differs from the manifest's.
    """
    mine: dict[int, bytes] = {}
    docs: dict[int, dict[str, Any]] = {}
    for value in chunk_values:
        doc = _read(_CHUNK, value, "snapshot chunk")
        if doc["snapshot_id"] == m.snapshot_id and doc["seq"] not in mine:
            mine[doc["seq"]], docs[doc["seq"]] = value, doc
    if sorted(mine) != list(range(m.chunks)):
        raise SnapshotError(f"snapshot {m.snapshot_id}: {len(mine)} of its {m.chunks} chunks found")
    if chunks_digest(mine[i] for i in range(m.chunks)) != m.chunks_sha256:
        raise SnapshotError(f"snapshot {m.snapshot_id}: its chunks' sha256 differs")
    entries: dict[int, list[Entry]] = {p.partition: [] for p in m.partitions}
    for i in range(m.chunks):
        doc = docs[i]
        entries.setdefault(doc["partition"], []).extend(Entry(**e) for e in doc["entries"])
    parts = [
        PartitionSnapshot(
            mark.partition,
            mark.offset,
            mark.time_ms,
            tuple(entries[mark.partition]),
            mark.last_event_id,
        )
        for mark in m.partitions
    ]
    for mark, part in zip(m.partitions, parts, strict=True):
        if part.digest != mark.state_sha256 or len(part.entries) != mark.entries:
            raise SnapshotError(
                f"snapshot {m.snapshot_id}: partition {mark.partition}'s records do not "
                f"match its manifest (sha256 or count)"
            )
    return parts


def newest(
    manifests: Iterable[Manifest], low: dict[int, int], high: dict[int, int]
) -> Iterator[Manifest]:
    """Yield the manifests usable for the log ``[low, high)``, newest (furthest) first.

    "Newest": the most commands covered (ties: the later time, then the id).
    """
    usable = [m for m in manifests if m.within(low, high)]
    usable.sort(key=lambda m: (sum(m.offsets.values()), m.time_ms or 0, m.snapshot_id))
    yield from reversed(usable)
