"""One command partition's job table on disk: a rocksdict (RocksDB) opened on assignment.

Keys: ``j:<job_id>`` → the stored JobState (``state_codec`` bytes), ``d:<job_id>`` → the
job's next deadline and ``r:<job_id>`` → its place in the ready index (``ready_rank``; both
8-byte big-endian epoch ms, absent when it has none), ``i:<marker>`` → an external command's
dedupe marker and ``x:<expires 8-byte ms><marker>`` → its place in the expiry index
(``topology/fold/markers.py``), and ``m:changelog`` → the offset of the last changelog record
the store holds. The fold writes a batch's records,
deadlines and that offset in one RocksDB write batch, *after* the Kafka transaction that put
them on the changelog committed; a restore trusts the store up to the offset it records and
reads the changelog from there (docs/architecture.md, "The fold runtime").
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

from rocksdict import Options, Rdict, WriteBatch

from topology.fold.markers import MarkerChanges, expires_ms

_JOB = b"j:"
_DUE = b"d:"
_READY = b"r:"
_MARKER = b"i:"
_EXPIRY = b"x:"
_EXPIRY_END = b"x;"
_UNINDEXED = b"m:markers-unindexed"
"""Present while a restore's markers have no expiry index entries yet (``index_markers``)."""
_OFFSET = b"m:changelog"
_READY_INDEXED = b"m:ready-indexed"
"""Present once every job's ``r:`` key is written (stores older than the ready index lack it)."""


def _expiry_key(ms: int, key: bytes) -> bytes:
    return _EXPIRY + ms.to_bytes(8, "big", signed=True) + key


def _options(write_buffer_mb: int) -> Options:
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.set_write_buffer_size(write_buffer_mb * 1024 * 1024)
    opts.set_max_write_buffer_number(2)
    return opts


class PartitionStore:
    """The job records of one partition, in their own RocksDB directory.

    Args:
        path: the directory (created if missing).
        write_buffer_mb: RocksDB memtable size, MiB. Small: a partition holds thousands of
            ~1 KB records and a process may own many partitions.
    """

    def __init__(self, path: Path, write_buffer_mb: int = 4) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = Rdict(str(path), _options(write_buffer_mb))
        if self._db.get(_OFFSET) is None and self._db.get(_READY_INDEXED) is None:
            self._db[_READY_INDEXED] = b"1"  # a new store: every write keeps its r: keys

    def get(self, job_id: str) -> bytes | None:
        """Return the stored record of ``job_id``, or None."""
        value = self._db.get(_JOB + job_id.encode())
        return value if isinstance(value, bytes) else None

    def changelog_offset(self) -> int:
        """Return the offset of the last changelog record written here; -1 for none."""
        raw = self._db.get(_OFFSET)
        return int(raw.decode()) if isinstance(raw, bytes) else -1

    def marker(self, key: str) -> bytes | None:
        """Return the stored value of dedupe marker ``key``, or None."""
        value = self._db.get(_MARKER + key.encode())
        return value if isinstance(value, bytes) else None

    def expiring(self, upto: int, most: int) -> list[tuple[int, str]]:
        """Return up to ``most`` (expires epoch ms, marker key) at or before ``upto``.

        Oldest first: a range read of the expiry index.
        """
        out: list[tuple[int, str]] = []
        for key, _ in self._db.items(from_key=_EXPIRY):
            if len(out) >= most or not isinstance(key, bytes) or not key.startswith(_EXPIRY):
                break
            ms = int.from_bytes(key[2:10], "big", signed=True)
            if ms > upto:
                break
            out.append((ms, key[10:].decode()))
        return out

    def markers(self) -> Iterator[tuple[str, bytes]]:
        """Yield ``(marker key, stored value)`` of every dedupe marker (key order)."""
        yield from self._prefixed(_MARKER)

    def has_markers(self) -> bool:
        """Return whether the store holds any dedupe marker."""
        return next(iter(self._prefixed(_MARKER)), None) is not None

    def write(
        self,
        records: Iterable[tuple[str, bytes | None, int | None, int | None]],
        changelog_offset: int | None,
        markers: MarkerChanges | None = None,
        *,
        before: Mapping[tuple[int, str], int | None] | None = None,
        indexed: bool = True,
    ) -> None:
        """Write records, their index keys, markers and the changelog offset, atomically.

        Args:
            records: ``(job_id, stored bytes or None to delete, deadline epoch ms or None,
                ready_rank epoch ms or None)``.
            changelog_offset: the offset of the last changelog record these came from (the
                store is trusted up to it); None leaves the recorded offset as it is.
            markers: (partition, marker key) → stored value or None (deleted); the partition
                is this store's.
            before: the stored expiry (epoch ms, None: no marker) of markers the caller knows
                (the fold read each one it changes): their old expiry index entry is deleted
                without a read. Others are read.
            indexed: False leaves the expiry index to ``index_markers`` (a restore into a
                store without markers: no read per marker; the store is flagged until then).
        """
        batch = WriteBatch(raw_mode=True)
        known = before or {}
        for hk, value in (markers or {}).items():
            k = hk[1].encode()
            if indexed:
                old = known[hk] if hk in known else self._stored_expiry(k)
                if old is not None:
                    batch.delete(_expiry_key(old, k))
            if value is None:
                batch.delete(_MARKER + k)
            else:
                batch.put(_MARKER + k, value)
                if indexed:
                    batch.put(_expiry_key(expires_ms(value), k), b"")
        if markers and not indexed:
            batch.put(_UNINDEXED, b"1")
        for job_id, value, deadline, ready in records:
            key = job_id.encode()
            if value is None:
                batch.delete(_JOB + key)
            else:
                batch.put(_JOB + key, value)
            for prefix, ms in ((_DUE, deadline), (_READY, ready)):
                if ms is None:
                    batch.delete(prefix + key)
                else:
                    batch.put(prefix + key, ms.to_bytes(8, "big", signed=True))
        if changelog_offset is not None:
            batch.put(_OFFSET, str(changelog_offset).encode())
        self._db.write(batch)

    def _stored_expiry(self, key: bytes) -> int | None:
        old = self._db.get(_MARKER + key)
        return expires_ms(old) if isinstance(old, bytes) else None

    def index_markers(self) -> int:
        """Rebuild the expiry index from the markers, once, if a restore left it unwritten.

        Returns:
            How many markers were indexed (0 when the index was whole).
        """
        if self._db.get(_UNINDEXED) is None:
            return 0
        batch, n = WriteBatch(raw_mode=True), 0
        batch.delete_range(_EXPIRY, _EXPIRY_END)
        for key, value in self._prefixed(_MARKER):
            batch.put(_expiry_key(expires_ms(value), key.encode()), b"")
            n += 1
        batch.delete(_UNINDEXED)
        self._db.write(batch)
        return n

    def deadlines(self) -> Iterator[tuple[str, int]]:
        """Yield ``(job_id, deadline epoch ms)`` of every job that has one (key order)."""
        for job_id, value in self._prefixed(_DUE):
            yield job_id, int.from_bytes(value, "big", signed=True)

    def index_ready(self, ready_ms: Callable[[bytes], int | None]) -> int:
        """Write the ``r:`` key of every job once (a store written before the ready index).

        Args:
            ready_ms: stored bytes → ready_rank epoch ms or None (``restore.ready_ms``).

        Returns:
            How many records were read (0 when the store was indexed already).
        """
        if self._db.get(_READY_INDEXED) is not None:
            return 0
        batch, n = WriteBatch(raw_mode=True), 0
        for job_id, value in self.jobs():
            n += 1
            ms = ready_ms(value)
            if ms is not None:
                batch.put(_READY + job_id.encode(), ms.to_bytes(8, "big", signed=True))
        batch.put(_READY_INDEXED, b"1")
        self._db.write(batch)
        return n

    def ready(self) -> Iterator[tuple[str, int]]:
        """Yield ``(job_id, ready_rank epoch ms)`` of every job with a ready task instance."""
        for job_id, value in self._prefixed(_READY):
            yield job_id, int.from_bytes(value, "big", signed=True)

    def jobs(self) -> Iterator[tuple[str, bytes]]:
        """Yield ``(job_id, stored bytes)`` of every job (key order)."""
        yield from self._prefixed(_JOB)

    def _prefixed(self, prefix: bytes) -> Iterator[tuple[str, bytes]]:
        for key, value in self._db.items(from_key=prefix):
            if not isinstance(key, bytes) or not key.startswith(prefix):
                break
            yield key[len(prefix) :].decode(), bytes(value)

    def close(self) -> None:
        """Flush and close the database (the directory stays for the next assignment)."""
        self._db.close()

    @staticmethod
    def wipe(path: Path) -> None:
        """Delete a store's directory (a store that cannot be trusted: rebuilt from scratch)."""
        shutil.rmtree(path, ignore_errors=True)
