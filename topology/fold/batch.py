"""What the fold reads and what one batch decides.

The records in, the messages and job records out (``topology/fold/folder.py`` produces them,
``services/scheduler/runtime.py`` commits them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from cronlog.job import JobState
from topology.fold.markers import MarkerChanges


@dataclass(frozen=True, slots=True)
class Record:
    """One command record as the adapter sees it.

    Attributes:
        partition, offset: where it was read from.
        timestamp_ms: the record timestamp (LogAppendTime on the commands topic), epoch ms.
        key, value: raw bytes.
    """

    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A message to deliver before any state is written.

    Attributes:
        partition: explicit partition, or None for the producer's murmur2 partitioner.
    """

    topic: str
    key: bytes | None
    value: bytes
    partition: int | None = None


class Write(NamedTuple):
    """The last record of a job a batch touched, and its keys in the indexes.

    Attributes:
        partition: the job's partition.
        value: the stored record (``state_codec`` bytes).
        deadline_ms: when a Tick next has work for it (``JobState.next_deadline``), epoch ms.
        ready_ms: its place in the ready index (``JobState.ready_rank``), epoch ms.
    """

    partition: int
    value: bytes
    deadline_ms: int | None
    ready_ms: int | None


@dataclass
class BatchResult:
    """What one batch decided: messages to produce, then job records to write.

    Attributes:
        sends: in order of decision (run-events, ready and reply copies, poll answers, dead
            letters, continuation Ticks).
        writes: job_id → its ``Write``, the last record of each job the batch touched.
        commands: how many command records were decoded.
        decisions: how many (command, job) decisions were made (a Tick makes one per due job).
    """

    sends: list[Outgoing] = field(default_factory=list)
    writes: dict[str, Write] = field(default_factory=dict)
    commands: int = 0
    decisions: int = 0
    markers: MarkerChanges = field(default_factory=dict)
    """(partition, marker key) → stored value or None (deleted): the dedupe markers of
    external commands the batch wrote (``topology/fold/markers.py``)."""
    markers_before: dict[tuple[int, str], int | None] = field(default_factory=dict)
    """(partition, marker key) → its stored expiry before the batch (epoch ms; None: none),
    for each marker the batch read (``FoldMarkers.stored_before``)."""
    states: dict[str, tuple[int, JobState | None]] = field(default_factory=dict)
    """job_id → (partition, its state after the batch), for ``StateCache.update``."""
