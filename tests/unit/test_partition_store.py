"""One partition's job table on disk (topology/fold/partition_store.py): records, deadlines, ready
keys and the changelog offset written together, read back, kept across a reopen, gone after a
wipe; a store older than the ready index gets its ready keys once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from rocksdict import Options, Rdict

from topology.fold.partition_store import PartitionStore


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "jobs-3"


@pytest.fixture
def store(path: Path) -> Iterator[PartitionStore]:
    s = PartitionStore(path)
    yield s
    s.close()


def test_an_empty_store_has_no_jobs_no_deadlines_and_offset_minus_one(
    store: PartitionStore,
) -> None:
    assert store.get("a") is None
    assert list(store.jobs()) == []
    assert list(store.deadlines()) == []
    assert store.changelog_offset() == -1


def test_records_deadlines_and_offset_round_trip(store: PartitionStore) -> None:
    store.write([("b", b"B1", 2_000, None), ("a", b"A1", None, None), ("c", b"C1", -5, None)], 41)
    assert store.get("a") == b"A1"
    assert store.get("b") == b"B1"
    assert store.get("zz") is None
    assert list(store.jobs()) == [("a", b"A1"), ("b", b"B1"), ("c", b"C1")]  # key order
    assert list(store.deadlines()) == [("b", 2_000), ("c", -5)]  # signed, only jobs with one
    assert store.changelog_offset() == 41


def test_a_write_without_offset_keeps_the_recorded_one(store: PartitionStore) -> None:
    store.write([("a", b"A1", 10, None)], 7)
    store.write([("a", b"A2", 20, None)], None)
    assert store.changelog_offset() == 7
    assert store.get("a") == b"A2"
    assert list(store.deadlines()) == [("a", 20)]


def test_a_deadline_of_none_clears_it_and_a_value_of_none_deletes_the_job(
    store: PartitionStore,
) -> None:
    store.write([("a", b"A1", 10, None), ("b", b"B1", 20, None), ("c", b"C1", 30, None)], 2)
    store.write([("a", b"A2", None, None), ("b", None, None, None)], 5)
    assert store.get("a") == b"A2"
    assert store.get("b") is None
    assert list(store.jobs()) == [("a", b"A2"), ("c", b"C1")]
    assert list(store.deadlines()) == [("c", 30)]
    assert store.changelog_offset() == 5


def test_prefixes_do_not_leak_into_each_other(store: PartitionStore) -> None:
    """Job ids that look like the store's own keys (``m:changelog``, ``d:…``) stay jobs."""
    store.write([("m:changelog", b"M", 1, None), ("d:x", b"D", None, None), ("", b"E", 3, None)], 9)
    assert list(store.jobs()) == [("", b"E"), ("d:x", b"D"), ("m:changelog", b"M")]
    assert list(store.deadlines()) == [("", 3), ("m:changelog", 1)]
    assert store.changelog_offset() == 9


def test_a_reopened_store_keeps_everything(path: Path) -> None:
    first = PartitionStore(path)
    first.write([("a", b"A1", 10, None), ("b", b"B1", None, None)], 12)
    first.close()
    again = PartitionStore(path)
    try:
        assert list(again.jobs()) == [("a", b"A1"), ("b", b"B1")]
        assert list(again.deadlines()) == [("a", 10)]
        assert again.changelog_offset() == 12
    finally:
        again.close()


def test_wipe_deletes_the_store(path: Path) -> None:
    first = PartitionStore(path)
    first.write([("a", b"A1", 10, None)], 12)
    first.close()
    PartitionStore.wipe(path)
    assert not path.exists()
    PartitionStore.wipe(path)  # wiping what is gone is fine
    fresh = PartitionStore(path)
    try:
        assert list(fresh.jobs()) == []
        assert fresh.changelog_offset() == -1
    finally:
        fresh.close()


def test_ready_keys_round_trip_and_clear(store: PartitionStore) -> None:
    store.write([("a", b"A1", 10, 5), ("b", b"B1", None, 7), ("c", b"C1", 1, None)], 3)
    assert list(store.ready()) == [("a", 5), ("b", 7)]
    store.write([("a", b"A2", 10, None), ("b", None, None, None)], 4)
    assert list(store.ready()) == []
    assert list(store.deadlines()) == [("a", 10), ("c", 1)]


def test_a_new_store_needs_no_ready_indexing(store: PartitionStore) -> None:
    store.write([("a", b"A1", None, 5)], 1)
    assert store.index_ready(lambda _v: 99) == 0  # already indexed: nothing read
    assert list(store.ready()) == [("a", 5)]


def test_a_store_written_before_the_ready_index_is_indexed_once(path: Path) -> None:
    """What an older scheduler left: j:, d: and m:changelog keys, no r: keys, no marker."""
    old = Rdict(str(path), Options(raw_mode=True))
    old[b"j:a"] = b"A"
    old[b"j:b"] = b"B"
    old[b"m:changelog"] = b"8"
    old.close()
    store = PartitionStore(path)
    try:
        assert list(store.ready()) == []
        assert store.index_ready(lambda v: 42 if v == b"A" else None) == 2
        assert list(store.ready()) == [("a", 42)]
        assert store.index_ready(lambda _v: 1) == 0  # once only
        assert store.changelog_offset() == 8
    finally:
        store.close()
