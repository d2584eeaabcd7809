"""State snapshots of the fold: every job record with the command offsets it covers.

A replay then folds only the commands after it, and retention may delete those before.

Pure (no I/O): a snapshot is taken from, and seeded into, a ``topology.snapshots.replay.Replayer``,
and written as Avro records in chunks plus one manifest (``topology/snapshots/wire.py``), the
record that makes a snapshot valid (``topology/snapshots/log.py`` writes it last).
Design: docs/architecture.md, "Retention and snapshots".
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from cronlog.errors import CronlogError
from topology.fold.folder import Record
from topology.fold.markers import MarkerChanges, changelog_key, marker_of
from topology.snapshots.replay import Replayer, state_digest
from topology.wire.codec import Codec

FORMAT = 1
"""The manifest ``format`` written and read (``topology/snapshots/wire.py``)."""


class SnapshotError(CronlogError):
    """A snapshot is incomplete, damaged, or of another format."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One job of a partition as the fold holds it.

    Attributes:
        key: job_id, UTF-8 bytes (or the tenant ledger's key); or a dedupe marker's changelog
            key (``topology/fold/markers.py``, ``MARKER_KEY_PREFIX`` + its key), whose value is the
            marker's and which no index names.
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
        """``state_digest`` of the partition's job records (what ``replay`` prints).

        The dedupe markers beside them are not in it.
        """
        return state_digest(
            (e.key, e.value)
            for e in self.entries
            if e.value is not None and marker_of(e.key) is None
        )


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

    The dedupe markers of external commands go with the job records (as entries of their
    changelog keys), so a replay from the snapshot dedupes what the fold did.

    Determinism: the same fold gives the same snapshot (entries sorted by key).
    """
    records = replayer.snapshot(partition)
    marks = [
        Entry(changelog_key(k), v, None, None) for k, v in replayer.markers.partition(partition)
    ]
    due = dict(replayer.due.entries(partition))
    ready = dict(replayer.folder.ready.entries(partition))
    keys = set(records) | {j.encode() for j in due} | {j.encode() for j in ready}
    entries = tuple(
        sorted(
            (
                *(
                    Entry(k, records.get(k), due.get(k.decode()), ready.get(k.decode()))
                    for k in keys
                ),
                *marks,
            ),
            key=lambda e: e.key,
        )
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
    marks: MarkerChanges = {}
    for e in snap.entries:
        marker = marker_of(e.key)
        if marker is not None:  # a dedupe marker (snapshots before them have none)
            if e.value is not None:
                marks[(p, marker)] = e.value
            continue
        if e.value is not None:
            replayer.store[e.key] = e.value
            replayer.jobs[p].add(e.key)
        if e.deadline_ms is not None:
            due.append((e.key.decode(), e.deadline_ms))
        if e.ready_ms is not None:
            ready.append((e.key.decode(), e.ready_ms))
    replayer.due.add_partition(p, due)
    replayer.folder.ready.add_partition(p, ready)
    replayer.markers.write(marks)


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


def newest(
    manifests: Iterable[Manifest], low: dict[int, int], high: dict[int, int]
) -> Iterator[Manifest]:
    """Yield the manifests usable for the log ``[low, high)``, newest (furthest) first.

    "Newest": the most commands covered (ties: the later time, then the id).
    """
    usable = [m for m in manifests if m.within(low, high)]
    usable.sort(key=lambda m: (sum(m.offsets.values()), m.time_ms or 0, m.snapshot_id))
    yield from reversed(usable)
