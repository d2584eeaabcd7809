"""Where ``cronlog replay`` starts: offset 0, or a snapshot (``topology/snapshots/snapshot.py``).

- a plain replay (and ``--until``): the newest snapshot at or before the end offsets;
- ``--verify``: offset 0 while every partition still starts there, else the *oldest*
  snapshot whose offsets the log still holds (so the most is checked), and a note says so;
- ``--from-zero``: offset 0, refused if retention deleted a partition's head.

Every later snapshot the replay folds past is checked against it (its partitions' digests
at its offsets) when verifying. Rationale: docs/architecture.md, "Replay".
"""

from __future__ import annotations

from dataclasses import dataclass, field

from confluent_kafka import Consumer

from cronlog.time import from_ms, iso
from services.snapshotter.take import SnapshotterError, find_base
from topology.kafka.topics import Topics
from topology.snapshots.log import read_manifests
from topology.snapshots.snapshot import Manifest, PartitionSnapshot


class StartError(Exception):
    """No start is possible: the log's head is gone and no snapshot covers it."""


@dataclass
class Start:
    """The replay's starting point.

    Attributes:
        manifest: the snapshot started from (None: offset 0).
        parts: its partitions, by partition (empty from offset 0).
        checks: commands partition → [(offset, snapshot id, state sha256)] of the later
            snapshots the replay will fold past (verify only).
        later: those snapshots' manifests, by id (a snapshot whose digest differs is then
            read and compared record by record: one written before an upgrade of the job
            record format holds other bytes for the same state).
        notes: what the report should say about the choice.
    """

    manifest: Manifest | None
    parts: dict[int, PartitionSnapshot]
    checks: dict[int, list[tuple[int, str, str]]] = field(default_factory=dict)
    later: dict[str, Manifest] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def offset(self, p: int) -> int:
        """Return the first offset of partition ``p`` to read."""
        part = self.parts.get(p)
        return part.offset if part is not None else 0

    def anchor(self, p: int) -> str | None:
        """Return the event_id after which partition ``p``'s live run-events are compared."""
        part = self.parts.get(p)
        return part.last_event_id if part is not None else None


def _describe(m: Manifest) -> str:
    when = iso(from_ms(m.time_ms)) if m.time_ms is not None else "an empty log"
    return f"snapshot {m.snapshot_id} (commands up to {when}, {m.commands} records)"


def choose_start(
    consumer: Consumer,
    topics: Topics,
    low: dict[int, int],
    ends: dict[int, int],
    *,
    verify: bool,
    from_zero: bool,
) -> Start:
    """Choose where to start (see the module docstring).

    Args:
        consumer: a ``log_reader.reader`` consumer.
        topics: topic names.
        low: commands partition → its first kept offset.
        ends: commands partition → the offset to stop before (with ``verify``: the live
            fold's committed offset, so the state compared there is after the start).
        verify: choose as ``--verify`` does.
        from_zero: never use a snapshot.

    Raises:
        StartError: a partition's head was deleted and no usable snapshot covers it (or
            ``from_zero`` was asked).
    """
    heads = sorted(p for p, o in low.items() if o > 0)
    if from_zero or (verify and not heads):
        if heads:
            raise StartError(
                f"partitions {heads} of {topics.commands} no longer start at offset 0 "
                f"(retention deleted their head): --from-zero cannot rebuild the state"
            )
        start = Start(None, {})
    else:
        try:
            base = find_base(consumer, topics, low, ends, oldest=verify)
        except SnapshotterError as exc:
            raise StartError(str(exc)) from exc
        start = Start(base.manifest, {s.partition: s for s in base.parts}, notes=base.notes)
        if base.manifest is not None:
            why = (
                f"offset 0 is gone on partitions {heads}: verified from the oldest snapshot "
                f"the log still covers, "
                if verify
                else "started from the newest snapshot, "
            )
            start.notes.append(why + _describe(base.manifest))
    if verify:
        manifests, _ = read_manifests(consumer, topics)
        for m in manifests:
            if start.manifest is not None and m.snapshot_id == start.manifest.snapshot_id:
                continue
            for mark in m.partitions:
                if start.offset(mark.partition) <= mark.offset <= ends.get(mark.partition, -1):
                    start.checks.setdefault(mark.partition, []).append(
                        (mark.offset, m.snapshot_id, mark.state_sha256)
                    )
                    start.later[m.snapshot_id] = m
    return start
