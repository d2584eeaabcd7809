"""The marker store of the dedupe horizon (``topology/fold/markers.py``), without Kafka.

Through ``Replayer`` (the scheduler's own ``BatchFolder`` with the in-memory marker twin) and
through ``PartitionStore`` (RocksDB): markers are written beside the records they guard,
outlive the job record's window, are deleted by Ticks once expired (tombstones) and never
kept for a command the fold refused for size.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.idem import IdemRules, Marker
from cronlog.ids import horizon_marker
from cronlog.job import MAX_APPLIED_MARKERS
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task
from cronlog.time import from_ms, to_ms
from cronlog.vocabulary import RejectReason
from topology.fold.batch import Record
from topology.fold.markers import (
    MARKER_KEY_PREFIX,
    FoldMarkers,
    changelog_key,
    decode_marker,
    encode_marker,
    marker_of,
)
from topology.fold.partition_store import PartitionStore
from topology.kafka.config import KafkaSettings
from topology.kafka.partitioning import partition_for
from topology.kafka.topics import Topics
from topology.snapshots.replay import Replayer
from topology.wire.codec import decode_event, encode_command

N = 2
JOB = "nightly"
P = partition_for(JOB.encode(), N)
TOPICS = Topics.of(KafkaSettings(partitions=N))
T0_MS = to_ms(datetime(2026, 5, 1, tzinfo=UTC))
MANUAL = JobSpec(name="m", schedule=Schedule(ScheduleKind.MANUAL), task_specs=main_task(("true",)))
HOUR_MS = 3_600_000


class Log:
    """Records folded one batch each through a Replayer with a 1-hour horizon."""

    def __init__(self, horizon: timedelta = timedelta(hours=1)) -> None:
        self.replayer = Replayer(TOPICS, N, {}, rules=IdemRules(horizon=horizon))
        self.offset = 0

    def send(
        self, key: str, command: cmd.Command, ts_ms: int, issued_ms: int | None = None
    ) -> list[ev.Event]:
        issued = from_ms(issued_ms) if issued_ms is not None else None
        job = "" if isinstance(command, cmd.Tick) else JOB
        value = encode_command(
            cmd.Envelope(idem_key=key, job_id=job, command=command, issued_at=issued)
        )
        rec = Record(P, self.offset, ts_ms, job.encode() or None, value)
        self.offset += 1
        return [decode_event(m.value).event for m in self.replayer.fold([rec])]

    def markers(self) -> dict[str, Marker]:
        return {k: decode_marker(v) for k, v in self.replayer.markers.partition(P)}


def registered() -> Log:
    log = Log()
    assert log.send("reg", cmd.RegisterJob(spec=MANUAL), T0_MS, T0_MS)
    return log


def test_a_trigger_re_sent_after_many_commands_in_other_batches_is_a_no_op() -> None:
    log = registered()
    assert log.send("t1", cmd.TriggerJob(), T0_MS + 1, T0_MS + 1)
    for i in range(MAX_APPLIED_MARKERS + 2):
        log.send(f"op{i}", cmd.PauseJob() if i % 2 == 0 else cmd.ResumeJob(), T0_MS + 2 + i)
    assert log.send("t1", cmd.TriggerJob(), T0_MS + 1000, T0_MS + 1) == []
    assert horizon_marker(JOB, "t1") in log.markers()


def test_a_tick_deletes_expired_markers_and_then_the_old_command_is_refused() -> None:
    log = registered()
    log.send("t1", cmd.TriggerJob(), T0_MS + 1, T0_MS + 1)
    assert len(log.markers()) == 2  # the register and the trigger
    log.send("tick-1", cmd.Tick(), T0_MS + HOUR_MS)  # nothing expired yet (inclusive bound)
    assert len(log.markers()) == 2
    log.send("tick-2", cmd.Tick(), T0_MS + HOUR_MS + 2)
    assert log.markers() == {}
    events = log.send("t1", cmd.TriggerJob(), T0_MS + HOUR_MS + 3, T0_MS + 1)
    assert [getattr(e, "reason", None) for e in events] == [RejectReason.IDEM_KEY_EXPIRED]


def test_a_decision_rolled_back_leaves_no_marker() -> None:
    """What the fold does for a command it refuses for size or dead-letters after deciding."""
    book = FoldMarkers(IdemRules(), lambda p, k: None, lambda p, u, n: [])
    book.begin()
    book.at(P)
    book.put(JOB, "kept", Marker("d", from_ms(T0_MS)))
    point = book.savepoint()
    book.put(JOB, "refused", Marker("d", from_ms(T0_MS)))
    book.put(JOB, "kept", Marker("other", from_ms(T0_MS)))
    book.rollback(point)
    assert book.changes() == {(P, horizon_marker(JOB, "kept")): b"1 d " + str(T0_MS).encode()}


def test_markers_never_collide_with_job_records_on_the_changelog() -> None:
    key = changelog_key(horizon_marker(JOB, "t1"))
    assert key.startswith(MARKER_KEY_PREFIX) and marker_of(key) == horizon_marker(JOB, "t1")
    assert marker_of(JOB.encode()) is None  # a job_id is printable ASCII: never \x00


def test_the_partition_store_keeps_markers_and_their_expiry_index(tmp_path: Path) -> None:
    store = PartitionStore(tmp_path / "jobs-0")
    soon, later = Marker("d1", from_ms(T0_MS)), Marker("d2", from_ms(T0_MS + HOUR_MS))
    store.write([], 7, {(0, "a"): encode_marker(soon), (0, "b"): encode_marker(later)})
    assert store.changelog_offset() == 7
    assert decode_marker(store.marker("a") or b"") == soon
    assert store.expiring(T0_MS, 10) == [(T0_MS, "a")]
    assert store.expiring(T0_MS + HOUR_MS, 1) == [(T0_MS, "a")]
    moved = Marker("d1", from_ms(T0_MS + 2 * HOUR_MS))  # re-written: its old index entry goes
    store.write([], 8, {(0, "a"): encode_marker(moved), (0, "b"): None})
    assert store.marker("b") is None
    assert store.expiring(T0_MS + HOUR_MS, 10) == []
    assert store.expiring(T0_MS + 2 * HOUR_MS, 10) == [(T0_MS + 2 * HOUR_MS, "a")]
    assert [k for k, _ in store.markers()] == ["a"]
    assert list(store.jobs()) == []  # markers are not job records
    store.close()


def test_a_trigger_re_sent_after_10000_commands_is_a_no_op() -> None:
    """The issue's "after 10,000 commands", through the fold (batches of 500, as replay reads)."""
    log = registered()
    assert log.send("t1", cmd.TriggerJob(), T0_MS + 1, T0_MS + 1)
    records = []
    for i in range(10_000):
        command = cmd.PauseJob() if i % 2 == 0 else cmd.ResumeJob()
        value = encode_command(
            cmd.Envelope(idem_key=f"op{i}", job_id=JOB, command=command, issued_at=from_ms(T0_MS))
        )
        records.append(Record(P, log.offset + i, T0_MS + 2 + i, JOB.encode(), value))
    log.offset += len(records)
    for start in range(0, len(records), 500):
        log.replayer.fold(records[start : start + 500])
    assert len(log.markers()) == 10_002
    assert log.send("t1", cmd.TriggerJob(), T0_MS + 20_000, T0_MS + 1) == []


def test_a_restore_into_a_new_store_indexes_its_markers_once_at_the_end(tmp_path: Path) -> None:
    store = PartitionStore(tmp_path / "jobs-0")
    assert not store.has_markers()
    one, two = Marker("d1", from_ms(T0_MS)), Marker("d2", from_ms(T0_MS + HOUR_MS))
    store.write([], 3, {(0, "a"): encode_marker(one), (0, "b"): encode_marker(two)}, indexed=False)
    store.write([], 4, {(0, "b"): None}, indexed=False)  # a later tombstone of the changelog
    assert store.expiring(T0_MS + HOUR_MS, 10) == []  # not indexed yet
    assert store.index_markers() == 1
    assert store.expiring(T0_MS + HOUR_MS, 10) == [(T0_MS, "a")]
    assert store.index_markers() == 0  # once
    store.write([], 5, {(0, "a"): None}, before={(0, "a"): T0_MS})  # the fold: no read
    assert store.expiring(T0_MS + HOUR_MS, 10) == [] and not store.has_markers()
    store.close()
