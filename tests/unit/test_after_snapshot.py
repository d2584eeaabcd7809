"""Snapshots of the after relay's index: encode/decode, which ones a start may use, restore."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cronlog import events as ev
from cronlog.after_index import AfterIndex
from cronlog.model import AfterOn, JobSpec, Schedule, ScheduleKind, main_task
from cronlog.vocabulary import CancelReason, RunTrigger
from services.scheduler.after_snapshot import (
    AfterSnapshot,
    SnapshotError,
    decode_snapshot,
    encode_snapshot,
)

T = datetime(2024, 6, 10, 12, 0, 0, 123000, tzinfo=UTC)
AFTER_X = JobSpec(
    "d", Schedule(ScheduleKind.AFTER, after_job_id="x", after_on=AfterOn.DONE), main_task(("true",))
)
SNAP = AfterSnapshot({0: 10, 1: 0, 2: 7}, {"d1": "x", "d2": "x", "e": "d1"}, {"r1": T})


def rec(job_id: str, event: ev.Event, event_id: str = "e") -> ev.RunEvent:
    return ev.RunEvent(event_id=event_id, job_id=job_id, at=T, idem_key="k", index=0, event=event)


def scheduled(run_id: str) -> ev.RunScheduled:
    return ev.RunScheduled(
        run_id=run_id,
        scheduled_for=T,
        trigger=RunTrigger.MANUAL,
        tasks=("main",),
        next_fire_at=None,
    )


def test_a_snapshot_decodes_to_what_was_encoded_and_encodes_deterministically() -> None:
    data = encode_snapshot(SNAP)
    assert decode_snapshot(data) == SNAP
    assert encode_snapshot(decode_snapshot(data)) == data
    assert decode_snapshot(data).ticks["r1"].tzinfo is not None


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b"[]",
        b'{"format": 2, "offsets": {}, "upstream_of": {}, "ticks_ms": {}}',
        b'{"format": 1, "offsets": {"0": "10"}, "upstream_of": {}, "ticks_ms": {}}',
        b'{"format": 1, "offsets": {"zero": 10}, "upstream_of": {}, "ticks_ms": {}}',
        b'{"format": 1, "offsets": {}, "upstream_of": {"d": 1}, "ticks_ms": {}}',
        b'{"format": 1, "offsets": {}, "upstream_of": {}, "ticks_ms": {"r": true}}',
        b'{"format": 1, "offsets": {}, "upstream_of": {}}',
    ],
)
def test_a_damaged_or_foreign_snapshot_is_refused(data: bytes) -> None:
    with pytest.raises(SnapshotError):
        decode_snapshot(data)


@pytest.mark.parametrize(
    ("start", "usable"),
    [
        ({0: 10, 1: 0, 2: 7}, True),  # exactly the committed offsets
        ({0: 50, 1: 3, 2: 7}, True),  # committed further since: fold the rest
        ({0: 9, 1: 0, 2: 7}, False),  # another relay committed less since it was written
        ({0: 10, 1: 0}, False),  # another partition count
        ({0: 10, 1: 0, 2: 7, 3: 0}, False),
    ],
)
def test_a_snapshot_is_usable_only_below_the_committed_offsets(
    start: dict[int, int], usable: bool
) -> None:
    assert SNAP.usable(start) is usable


def test_a_restored_index_answers_as_the_index_it_was_taken_from() -> None:
    history = [
        rec("d1", ev.JobRegistered(spec=AFTER_X, next_fire_at=None)),
        rec("d2", ev.JobRegistered(spec=AFTER_X, next_fire_at=None)),
        rec("d3", ev.JobRegistered(spec=AFTER_X, next_fire_at=None)),
        rec("d3", ev.JobDeleted()),
        rec("x", scheduled("r1")),
        rec("x", scheduled("r2")),
        rec("x", ev.RunSucceeded(run_id="r2")),
    ]
    tail = [
        rec("x", ev.RunFailed(run_id="r1"), "e1"),
        rec("x", ev.RunCancelled(run_id="r3", reason=CancelReason.USER), "e2"),
    ]
    full = AfterIndex()
    for record in history:
        full.apply(record)
    snap = decode_snapshot(encode_snapshot(AfterSnapshot({0: len(history)}, *full.state())))
    restored = AfterIndex.restored(snap.upstream_of, snap.ticks)
    assert restored.state() == full.state()
    assert restored.downstream("x") == frozenset({"d1", "d2"})
    assert [restored.apply(r) for r in tail] == [full.apply(r) for r in tail]
