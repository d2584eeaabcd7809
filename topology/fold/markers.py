"""The marker store of external commands: what the dedupe horizon remembers, per partition.

Each applied external (user, API, relay) command leaves a marker ``horizon_marker(job_id,
idem_key) -> (command digest, expires_at)`` (``cronlog.idem``). Markers travel on the job
table's changelog, in the same transaction as the job records they guard, under keys no
job_id can have (``MARKER_KEY_PREFIX``: job ids are printable ASCII), and a Tick deletes the
partition's expired ones (at most ``EXPIRY_SLICE`` a Tick) with a tombstone, so compaction
drops them and a restore reads only live markers: memory and restore time stay bounded by
the external command rate times the horizon. Stored layout: ``topology/fold/partition_store.py``.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime

from cronlog.idem import IdemRules, Marker
from cronlog.ids import horizon_marker
from cronlog.time import from_ms, to_ms

MARKER_KEY_PREFIX = b"\x00m:"
"""Changelog key prefix of a marker record (then the ``horizon_marker`` hex digits)."""
EXPIRY_SLICE = 1000
"""At most this many markers one Tick deletes (1 Tick a second: 1,000 external commands a
second sustained, far above the seeds' rates; a backlog is deleted over later Ticks)."""
_VERSION = b"1"

Expiring = Callable[[int, int, int], list[tuple[int, str]]]
"""(partition, upto epoch ms, most) → (expires epoch ms, marker key) of stored markers that
expire at or before ``upto``, smallest first."""
MarkerChanges = dict[tuple[int, str], bytes | None]
"""(partition, marker key) → the marker's stored value, or None (deleted): what a batch wrote."""


def encode_marker(marker: Marker) -> bytes:
    """Return a marker's stored (and changelog) value: ``1 <digest> <expires epoch ms>``."""
    return b" ".join((_VERSION, marker.digest.encode(), str(to_ms(marker.expires_at)).encode()))


def decode_marker(value: bytes) -> Marker:
    """Return the marker stored as ``value`` (``encode_marker``).

    Raises:
        ValueError: not a marker value of a known version.
    """
    version, digest, expires = value.split(b" ")
    if version != _VERSION:
        raise ValueError(f"unknown marker version {version!r}")
    return Marker(digest.decode(), from_ms(int(expires)))


def expires_ms(value: bytes) -> int:
    """Return a stored marker value's expiry, epoch ms."""
    return int(value.rsplit(b" ", 1)[1])


def changelog_key(key: str) -> bytes:
    """Return the changelog record key of marker ``key``."""
    return MARKER_KEY_PREFIX + key.encode()


def marker_of(changelog_record_key: bytes) -> str | None:
    """Return the marker key a changelog record key names, or None for a job's record."""
    if changelog_record_key.startswith(MARKER_KEY_PREFIX):
        return changelog_record_key[len(MARKER_KEY_PREFIX) :].decode()
    return None


class FoldMarkers:
    """The ``cronlog.idem.MarkerBook`` of one fold: a batch overlay over the stored markers.

    Args:
        rules: the dedupe horizon.
        load: (partition, marker key) → stored value or None.
        expiring: the stored markers due to expire (``Expiring``).

    ``at`` names the partition of the record being decided; ``begin`` starts a batch and
    ``changes`` returns what it wrote (committed with the batch, then stored).
    """

    def __init__(
        self,
        rules: IdemRules,
        load: Callable[[int, str], bytes | None],
        expiring: Expiring,
    ) -> None:
        self.rules = rules
        self._load = load
        self._expiring = expiring
        self._partition = 0
        self._overlay: dict[tuple[int, str], Marker | None] = {}
        self._journal: list[tuple[tuple[int, str], Marker | None, bool]] = []
        self._stored: dict[tuple[int, str], int | None] = {}

    def begin(self) -> None:
        """Start a batch: nothing written yet."""
        self._overlay = {}
        self._journal = []
        self._stored = {}

    def savepoint(self) -> int:
        """Return a point ``rollback`` can return to (before a decision)."""
        return len(self._journal)

    def rollback(self, point: int) -> None:
        """Undo what was written since ``point`` (a decision the fold refused or dead-lettered)."""
        while len(self._journal) > point:
            hk, before, had = self._journal.pop()
            if had:
                self._overlay[hk] = before
            else:
                self._overlay.pop(hk, None)

    def _set(self, hk: tuple[int, str], marker: Marker | None) -> None:
        self._journal.append((hk, self._overlay.get(hk), hk in self._overlay))
        self._overlay[hk] = marker

    def at(self, partition: int) -> None:
        """Decide the next commands on ``partition``."""
        self._partition = partition

    def get(self, job_id: str, key: str) -> Marker | None:
        """Return the marker of ``key`` on ``job_id`` (this batch's, else the stored one)."""
        hk = (self._partition, horizon_marker(job_id, key))
        if hk in self._overlay:
            return self._overlay[hk]
        value = self._load(*hk)
        self._stored.setdefault(hk, expires_ms(value) if value is not None else None)
        return decode_marker(value) if value is not None else None

    def put(self, job_id: str, key: str, marker: Marker) -> None:
        """Keep ``marker`` for ``key`` on ``job_id`` (written with the batch)."""
        self._set((self._partition, horizon_marker(job_id, key)), marker)

    def expire(self, partition: int, now: datetime, most: int = EXPIRY_SLICE) -> int:
        """Delete up to ``most`` markers of ``partition`` expired before ``now``, oldest first.

        Determinism: the same markers are chosen whatever the batch boundaries (stored and
        in-batch ones are merged in (expiry, key) order); deciding never depends on it anyway
        (``cronlog.idem.live_marker``).

        Returns:
            How many were deleted.
        """
        upto = to_ms(now) - 1
        mine = {k: m for (p, k), m in self._overlay.items() if p == partition}
        found = [
            (ms, k) for ms, k in self._expiring(partition, upto, most + len(mine)) if k not in mine
        ]
        for ms, k in found:
            self._stored.setdefault((partition, k), ms)
        found += [(to_ms(m.expires_at), k) for k, m in mine.items() if m is not None]
        chosen = sorted(c for c in found if c[0] <= upto)[:most]
        for _, k in chosen:
            self._set((partition, k), None)
        return len(chosen)

    def stored_before(self) -> dict[tuple[int, str], int | None]:
        """Return the stored expiry (epoch ms; None: none) of each marker this batch read.

        Every marker a batch changes was read first (a decision looks its key up before it
        marks it; an expiry scanned it), so the store can update its expiry index unread.
        """
        return dict(self._stored)

    def changes(self) -> MarkerChanges:
        """Return what this batch wrote: stored values, None for a deleted marker."""
        return {
            hk: (encode_marker(m) if m is not None else None) for hk, m in self._overlay.items()
        }


class MemoryMarkers:
    """Stored markers in memory, for ``cronlog replay`` and the tests (the store's twin).

    ``values[(partition, key)]`` is the stored value; an expiry index per partition keeps
    ``expiring`` a range read.
    """

    def __init__(self) -> None:
        self.values: dict[tuple[int, str], bytes] = {}
        self._index: dict[int, list[tuple[int, str]]] = {}

    def load(self, partition: int, key: str) -> bytes | None:
        """Return the stored value of marker ``key``, or None."""
        return self.values.get((partition, key))

    def expiring(self, partition: int, upto: int, most: int) -> list[tuple[int, str]]:
        """Return up to ``most`` (expires ms, key) at or before ``upto``, smallest first."""
        index = self._index.get(partition, [])
        end = bisect.bisect_right(index, (upto, "\U0010ffff"))
        return index[: min(end, most)]

    def write(self, changes: Mapping[tuple[int, str], bytes | None]) -> None:
        """Apply a batch's marker changes."""
        for (p, key), value in changes.items():
            index = self._index.setdefault(p, [])
            old = self.values.pop((p, key), None)
            if old is not None:
                del index[bisect.bisect_left(index, (expires_ms(old), key))]
            if value is not None:
                self.values[(p, key)] = value
                bisect.insort(index, (expires_ms(value), key))

    def partition(self, partition: int) -> Iterable[tuple[str, bytes]]:
        """Yield (key, value) of ``partition``'s markers."""
        return ((k, v) for (p, k), v in self.values.items() if p == partition)
