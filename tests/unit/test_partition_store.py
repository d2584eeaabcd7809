"""One partition's job table on disk (topology/partition_store.py): records, deadlines and the
changelog offset written together, read back, kept across a reopen, gone after a wipe."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from topology.partition_store import PartitionStore


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
    store.write([("b", b"B1", 2_000), ("a", b"A1", None), ("c", b"C1", -5)], 41)
    assert store.get("a") == b"A1"
    assert store.get("b") == b"B1"
    assert store.get("zz") is None
    assert list(store.jobs()) == [("a", b"A1"), ("b", b"B1"), ("c", b"C1")]  # key order
    assert list(store.deadlines()) == [("b", 2_000), ("c", -5)]  # signed, only jobs with one
    assert store.changelog_offset() == 41


def test_a_write_without_offset_keeps_the_recorded_one(store: PartitionStore) -> None:
    store.write([("a", b"A1", 10)], 7)
    store.write([("a", b"A2", 20)], None)
    assert store.changelog_offset() == 7
    assert store.get("a") == b"A2"
    assert list(store.deadlines()) == [("a", 20)]


def test_a_deadline_of_none_clears_it_and_a_value_of_none_deletes_the_job(
    store: PartitionStore,
) -> None:
    store.write([("a", b"A1", 10), ("b", b"B1", 20), ("c", b"C1", 30)], 2)
    store.write([("a", b"A2", None), ("b", None, None)], 5)
    assert store.get("a") == b"A2"
    assert store.get("b") is None
    assert list(store.jobs()) == [("a", b"A2"), ("c", b"C1")]
    assert list(store.deadlines()) == [("c", 30)]
    assert store.changelog_offset() == 5


def test_prefixes_do_not_leak_into_each_other(store: PartitionStore) -> None:
    """Job ids that look like the store's own keys (``m:changelog``, ``d:…``) stay jobs."""
    store.write([("m:changelog", b"M", 1), ("d:x", b"D", None), ("", b"E", 3)], 9)
    assert list(store.jobs()) == [("", b"E"), ("d:x", b"D"), ("m:changelog", b"M")]
    assert list(store.deadlines()) == [("", 3), ("m:changelog", 1)]
    assert store.changelog_offset() == 9


def test_a_reopened_store_keeps_everything(path: Path) -> None:
    first = PartitionStore(path)
    first.write([("a", b"A1", 10), ("b", b"B1", None)], 12)
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
    first.write([("a", b"A1", 10)], 12)
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
