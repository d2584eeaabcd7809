"""The fold's own job-table writes: changelog records in faust's format, RocksDB after acks."""

from __future__ import annotations

from pathlib import Path

from rocksdict import Options, Rdict

from topology.job_table import LocalJobStore, changelog_records

OFFSET_KEY = b"__faust\0offset__"  # faust.stores.rocksdb.Store.offset_key


class RocksStandIn:
    """The three attributes of faust's rocksdict Store that LocalJobStore.write uses."""

    offset_key = OFFSET_KEY

    def __init__(self, root: Path) -> None:
        self.root = root
        self._key_index: dict[bytes, int] = {}
        self.dbs: dict[int, Rdict] = {}

    def _db_for_partition(self, partition: int) -> Rdict:
        if partition not in self.dbs:
            self.dbs[partition] = Rdict(str(self.root / f"p{partition}"), Options(raw_mode=True))
        return self.dbs[partition]


def test_changelog_records_are_raw_job_id_and_state_bytes_on_the_commands_partition() -> None:
    writes = {"a": (None, 3, b"v1:{}"), "b": (None, 7, b'v1:{"x":1}')}
    records = changelog_records("cl", writes)
    assert [(r.topic, r.key, r.value, r.partition) for r in records] == [
        ("cl", b"a", b"v1:{}", 3),
        ("cl", b"b", b'v1:{"x":1}', 7),
    ]


def test_write_puts_records_and_the_last_acked_changelog_offset_per_partition(
    tmp_path: Path,
) -> None:
    store = RocksStandIn(tmp_path)
    writes = {"a": (None, 3, b"v1:a"), "b": (None, 3, b"v1:b"), "c": (None, 5, b"v1:c")}
    LocalJobStore(store, "cl").write(writes, {("cl", 3): 41, ("cl", 5): 9, ("events", 3): 99})
    assert store.dbs[3][b"a"] == b"v1:a" and store.dbs[3][b"b"] == b"v1:b"
    assert store.dbs[5][b"c"] == b"v1:c"
    assert store.dbs[3][OFFSET_KEY] == b"41" and store.dbs[5][OFFSET_KEY] == b"9"
    assert store._key_index == {b"a": 3, b"b": 3, b"c": 5}
    for db in store.dbs.values():
        db.close()
