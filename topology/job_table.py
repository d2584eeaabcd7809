"""Writing a batch's job records past faust's ``Table.__setitem__``: changelog, then RocksDB.

``Table.__setitem__`` costs ~370 µs a key in faust 0.15.3 (an aiokafka send per key with its
Future bookkeeping and a persisted-offset put per ack): it capped the fold at ~1,900
commands/s. The scheduler instead produces the changelog records itself, with the librdkafka
producer that delivers the events, and puts the acknowledged records into the partition's
RocksDB with one write batch. The changelog records are byte for byte what faust writes for
the ``jobs`` table (raw key = job_id, raw value = ``state_codec`` bytes, no headers, the
command's partition), so faust's recovery and standbys, and ``cronlog replay --verify``,
read them as before. Order and why: docs/architecture.md, "The fold under at-least-once".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rocksdict import WriteBatch

from topology.delivery import Offsets
from topology.fold import Outgoing


def changelog_records(
    topic: str, writes: Mapping[str, tuple[object, int, bytes]]
) -> list[Outgoing]:
    """Return the changelog messages for a batch's job records.

    Args:
        topic: the job table's changelog topic.
        writes: ``BatchResult.writes`` (job_id → (context, partition, stored bytes)).

    Returns:
        One message per job, keyed by the job_id's bytes, on the command's partition (the
        partition faust's ``Table`` uses: the source event's).
    """
    return [
        Outgoing(topic, job_id.encode(), value, partition)
        for job_id, (_, partition, value) in writes.items()
    ]


class LocalJobStore:
    """faust's RocksDB store of the ``jobs`` table, written directly.

    Uses faust 0.15's ``faust.stores.rocksdb.Store`` internals (``_db_for_partition``,
    ``_key_index``, ``offset_key``); ``check`` fails at start-up if they are not there, or
    if the table would not store the raw bytes this writes.

    Args:
        store: ``jobs.data``.
        changelog_topic: the table's changelog topic name.
    """

    def __init__(self, store: Any, changelog_topic: str) -> None:
        self.store = store
        self.changelog_topic = changelog_topic

    def check(self) -> None:
        """Raise ``RuntimeError`` unless the store is faust's rocksdict store in raw mode."""
        store = self.store
        missing = [
            a
            for a in (
                "_db_for_partition",
                "_key_index",
                "offset_key",
                "_encode_key",
                "_encode_value",
                "use_rocksdict",
            )
            if not hasattr(store, a)
        ]
        if missing or not store.use_rocksdict:
            raise RuntimeError(
                f"job table store {type(store).__name__} is not faust's "
                f"rocksdict store (missing {missing})"
            )
        table_topic = store.table.changelog_topic.get_topic_name()
        if table_topic != self.changelog_topic:
            raise RuntimeError(
                f"job table changelog is {table_topic!r}, expected {self.changelog_topic!r}"
            )
        probe = b"v1:probe"
        if store._encode_key(probe) != probe or store._encode_value(probe) != probe:
            raise RuntimeError("job table does not store raw key/value bytes")

    def write(self, writes: Mapping[str, tuple[object, int, bytes]], acked: Offsets) -> None:
        """Put a batch's job records into their partitions' RocksDB, one write batch each.

        Call only after their changelog records were acknowledged: each partition's write
        batch also moves faust's persisted offset to ``acked``'s last changelog offset there
        (what faust's own ``_on_changelog_sent`` records), so a later recovery of this
        store reads the changelog from after it.

        Args:
            writes: ``BatchResult.writes``.
            acked: ``Delivery.deliver``'s answer for the changelog records.
        """
        store = self.store
        batches: dict[int, WriteBatch] = {}
        for job_id, (_, partition, value) in writes.items():
            batch = batches.get(partition)
            if batch is None:
                batch = batches[partition] = WriteBatch(raw_mode=True)
            key = job_id.encode()
            batch.put(key, value)
            store._key_index[key] = partition
        for partition, batch in batches.items():
            offset = acked.get((self.changelog_topic, partition))
            if offset is not None:
                batch.put(store.offset_key, str(offset).encode())
            store._db_for_partition(partition).write(batch)
