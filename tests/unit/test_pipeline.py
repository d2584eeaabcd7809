"""The fold's pipeline (services/scheduler/pipeline.py) and the due index's transactions: the
next transaction is decided against what the uncommitted ones decided, a commit keeps the
oldest's index changes, and an abort undoes every uncommitted one."""

from __future__ import annotations

import threading

from services.scheduler.pipeline import Pipeline, Unit
from topology.fold.batch import BatchResult, Write
from topology.fold.due_index import DueIndex
from topology.fold.markers import MemoryMarkers

P = 0


def _due() -> DueIndex:
    due = DueIndex()
    due.reset((P,))
    due.add_partition(P, [("a", 10), ("b", 20)])
    return due


def test_a_commit_keeps_the_oldest_transaction_and_a_rollback_undoes_the_open_one() -> None:
    due = _due()
    due.begin()  # in flight
    assert due.pop_due(P, 10) == ["a"]
    due.set(P, "c", 5)
    due.begin()  # open, decided while the first commits
    assert due.pop_due(P, 20) == ["c", "b"]
    due.commit()  # the first committed
    due.rollback()  # the open one aborted
    assert due.entries(P) == [("b", 20), ("c", 5)]
    assert due.pop_due(P, 100) == ["c", "b"]


def test_a_rollback_of_both_transactions_restores_the_last_commit() -> None:
    due = _due()
    due.begin()
    assert due.pop_due(P, 10) == ["a"]
    due.set(P, "b", 30)
    due.begin()
    due.set(P, "a", 40)
    due.set(P, "b", 50)
    due.rollback()
    assert due.entries(P) == [("a", 10), ("b", 20)]
    assert due.pop_due(P, 100) == ["a", "b"]


def test_a_rollback_does_not_bring_back_a_dropped_partitions_jobs() -> None:
    due = _due()
    due.begin()
    assert due.pop_due(P, 10) == ["a"]
    due.drop_partition(P)
    due.rollback()
    assert len(due) == 0
    assert due.entries(P) == []


def _unit(writes: dict[str, bytes], markers: dict[str, bytes | None]) -> Unit:
    out = BatchResult()
    out.writes = {j: Write(P, v, None, None) for j, v in writes.items()}
    out.markers = {(P, k): v for k, v in markers.items()}
    unit = Unit()
    unit.add(out, {P: 1}, 1, 0.0)
    return unit


def test_the_overlay_reads_the_newest_uncommitted_record_and_marker() -> None:
    pipe = Pipeline(0.1, 100, 1 << 20)
    pipe.inflight = _unit({"a": b"old", "b": b"b1"}, {"m1": b"1 d 100", "m2": b"1 d 200"})
    pipe.open = _unit({"a": b"new"}, {"m2": None})
    assert pipe.record(P, "a") == (True, b"new")
    assert pipe.record(P, "b") == (True, b"b1")
    assert pipe.record(P, "c") == (False, None)
    assert pipe.record(1, "a") == (False, None)
    assert pipe.marker(P, "m1") == (True, b"1 d 100")
    assert pipe.marker(P, "m2") == (True, None)
    assert pipe.marker(P, "m3") == (False, None)


def test_expiring_merges_the_store_with_the_uncommitted_markers_in_expiry_order() -> None:
    stored = MemoryMarkers()
    stored.write({(P, "s1"): b"1 d 50", (P, "s2"): b"1 d 60", (P, "s3"): b"1 d 70"})
    pipe = Pipeline(0.1, 100, 1 << 20)
    pipe.inflight = _unit({}, {"s1": None, "n1": b"1 d 55"})
    pipe.open = _unit({}, {"s3": b"1 d 900", "n2": b"1 d 65"})
    found = pipe.expiring(P, lambda n: stored.expiring(P, 100, n), 100, 10)
    assert found == [(55, "n1"), (60, "s2"), (65, "n2")]
    assert pipe.expiring(P, lambda n: stored.expiring(P, 100, n), 100, 2) == [
        (55, "n1"),
        (60, "s2"),
    ]


def test_a_submitted_commit_runs_on_its_own_thread_and_returns_its_result() -> None:
    pipe = Pipeline(0.1, 100, 1 << 20)
    pipe.open = _unit({"a": b"x"}, {})
    seen: list[str] = []

    def commit() -> dict[int, int]:
        seen.append(threading.current_thread().name)
        return {P: 7}

    pipe.submit(commit)
    assert pipe.open is None
    unit, offsets, _, _ = pipe.result()
    assert offsets == {P: 7}
    assert unit.out.writes["a"].value == b"x"
    assert seen[0].startswith("fold-commit")
    pipe.retire()
    assert pipe.inflight is None
    pipe.shutdown()


def test_a_unit_is_full_by_records_or_bytes() -> None:
    pipe = Pipeline(10.0, 2, 1 << 20)
    pipe.open = _unit({"a": b"x"}, {})
    assert not pipe.full()
    assert pipe.room() == 1
    pipe.open.add(BatchResult(), {P: 2}, 1, 0.0)
    assert pipe.full()
    assert pipe.ripe()
    small = Pipeline(10.0, 100, 4)
    small.open = _unit({"a": b"12345"}, {})
    assert small.full()
