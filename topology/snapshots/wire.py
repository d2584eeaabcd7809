"""The wire form of a snapshot: Avro records (fastavro, schemaless), chunks and a manifest.

Chunks stay under the record size limit; the manifest names them with counts and digests,
and ``assemble`` refuses a snapshot whose chunks do not match it. Pure (no I/O). Design:
docs/architecture.md, "Retention and snapshots".
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterable, Sequence
from typing import Any

import fastavro

from topology.snapshots.snapshot import (
    FORMAT,
    Entry,
    Manifest,
    PartitionMark,
    PartitionSnapshot,
    SnapshotError,
)

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
    # the length first: a forged count (up to 2**31) must not build its range in memory
    if len(mine) != m.chunks or sorted(mine) != list(range(m.chunks)):
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
