"""The fold's pipeline: one transaction commits in its own thread while the next is decided.

Kafka Streams' exactly-once shape (``commit.interval.ms``, 100 ms under EOS): decided batches
accumulate in an *open* transaction (several decide passes, bounded by time, records and
bytes); when the *in-flight* one has committed, the open one is handed to the commit thread
(librdkafka's blocking calls release the GIL) and the fold decides on. What is decided but
not committed is an overlay the next decisions read first (job states, stored records,
dedupe markers), newest first; RocksDB and the state cache get a transaction's writes only
after it committed (``services/scheduler/runtime.py``). Rules: docs/architecture.md, "The
fold runtime".
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from cronlog.job import JobState
from topology.fold.batch import BatchResult
from topology.fold.markers import expires_ms
from topology.fold.state_cache import StateCache

Commit = Callable[[], dict[int, int] | None]
"""Commits one transaction: partition → last changelog offset, or None (aborted)."""


@dataclass
class Unit:
    """One transaction's decided batches, not committed yet.

    Attributes:
        out: every pass's output, merged in decision order.
        starts: commands partition → offset of the first record read (the rewind point).
        ends: commands partition → offset of the next record to read (the offsets committed).
        read_at: partition → its revocation count when first read (``FoldRuntime.revocations``).
        records: command records decided.
        out_bytes: bytes of the messages and job records to produce (a bound, not exact).
        opened: when its first pass was decided, monotonic seconds.
        fold_s: seconds spent deciding it.
    """

    out: BatchResult = field(default_factory=BatchResult)
    starts: dict[int, int] = field(default_factory=dict)
    ends: dict[int, int] = field(default_factory=dict)
    read_at: dict[int, int] = field(default_factory=dict)
    records: int = 0
    out_bytes: int = 0
    opened: float = field(default_factory=time.monotonic)
    fold_s: float = 0.0

    def cover(self, starts: dict[int, int], read_at: dict[int, int]) -> None:
        """Make a rewind of this unit read from ``starts`` too (records read, not kept)."""
        for p, offset in starts.items():
            self.starts.setdefault(p, offset)
            self.read_at.setdefault(p, read_at.get(p, 0))

    def add(self, out: BatchResult, ends: dict[int, int], records: int, fold_s: float) -> None:
        """Merge one decide pass (``cover`` its starts first).

        The first pass's stored-before of a marker wins: it is what the store holds until
        this unit is written.
        """
        o = self.out
        o.sends += out.sends
        o.writes.update(out.writes)
        o.commands += out.commands
        o.decisions += out.decisions
        o.markers.update(out.markers)
        for hk, ms in out.markers_before.items():
            o.markers_before.setdefault(hk, ms)
        o.states.update(out.states)
        self.ends.update(ends)
        self.records += records
        self.fold_s += fold_s
        self.out_bytes += sum(len(s.value) for s in out.sends)
        self.out_bytes += sum(len(w.value) for w in out.writes.values())


class Pipeline:
    """The open and the in-flight transaction of one fold, and the commit thread.

    Args:
        interval_s: an open transaction that has been open this long is committed as soon as
            the previous one returns, seconds (``commit_interval_ms``).
        max_records: most command records in one transaction (``batch_size``).
        max_bytes: most output bytes in one transaction (``commit_max_bytes``).

    Thread safety: the fold's thread calls everything; only the commit callable runs on the
    commit thread.
    """

    def __init__(self, interval_s: float, max_records: int, max_bytes: int) -> None:
        self.interval_s = interval_s
        self.max_records = max_records
        self.max_bytes = max_bytes
        self.open: Unit | None = None
        self.inflight: Unit | None = None
        self._future: Future[dict[int, int] | None] | None = None
        self._started = 0.0
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="fold-commit")

    def units(self) -> Iterator[Unit]:
        """Yield the uncommitted units, newest first (the overlay's reading order)."""
        if self.open is not None:
            yield self.open
        if self.inflight is not None:
            yield self.inflight

    def full(self) -> bool:
        """Whether the open transaction may take no more records."""
        u = self.open
        return u is not None and (u.records >= self.max_records or u.out_bytes >= self.max_bytes)

    def room(self) -> int:
        """How many more records the open transaction takes (at least 1)."""
        return max(1, self.max_records - (self.open.records if self.open is not None else 0))

    def ripe(self) -> bool:
        """Whether the open transaction has been open ``interval_s`` (or is full)."""
        u = self.open
        return u is not None and (time.monotonic() - u.opened >= self.interval_s or self.full())

    def done(self) -> bool:
        """Whether the in-flight commit has returned (or there is none)."""
        return self._future is None or self._future.done()

    def submit(self, commit: Commit) -> None:
        """Hand the open transaction to the commit thread (none may be in flight)."""
        if self.inflight is not None or self.open is None:
            raise RuntimeError("submit: a commit is in flight, or nothing is open")
        self.inflight, self.open = self.open, None
        self._started = time.monotonic()
        self._future = self._pool.submit(commit)

    def result(self) -> tuple[Unit, dict[int, int] | None, float, float]:
        """Wait for the in-flight commit (it stays the in-flight unit until ``retire``).

        Returns:
            (the unit, the commit's result, seconds the commit took, seconds waited here).

        Raises:
            Whatever the commit raised (``Fenced``, ``Stopped``).
        """
        if self.inflight is None or self._future is None:
            raise RuntimeError("result: no commit in flight")
        t0 = time.monotonic()
        future, self._future = self._future, None
        try:
            offsets = future.result()
        except BaseException:
            self.inflight = None
            raise
        t1 = time.monotonic()
        return self.inflight, offsets, t1 - self._started, t1 - t0

    def retire(self) -> None:
        """Forget the in-flight unit (committed and stored, or rewound)."""
        self.inflight = None

    def take_all(self) -> list[Unit]:
        """Remove and return every uncommitted unit, oldest first (a rewind)."""
        units = [u for u in (self.inflight, self.open) if u is not None]
        self.inflight = self.open = None
        return units

    def shutdown(self) -> None:
        """Stop the commit thread (after the last commit returned)."""
        self._pool.shutdown(wait=True)

    # -- the overlay -------------------------------------------------------------------------

    def record(self, partition: int, job_id: str) -> tuple[bool, bytes | None]:
        """Return (found, the uncommitted stored bytes of ``job_id``), newest first."""
        for u in self.units():
            w = u.out.writes.get(job_id)
            if w is not None and w.partition == partition:
                return True, w.value
        return False, None

    def marker(self, partition: int, key: str) -> tuple[bool, bytes | None]:
        """Return (found, the uncommitted value of marker ``key``; None: deleted)."""
        for u in self.units():
            if (partition, key) in u.out.markers:
                return True, u.out.markers[(partition, key)]
        return False, None

    def expiring(
        self, partition: int, stored: Callable[[int], list[tuple[int, str]]], upto: int, most: int
    ) -> list[tuple[int, str]]:
        """The ``Expiring`` answer over the overlay: ``stored(n)`` gives the store's first n.

        Markers the overlay changed are taken from it (deleted ones left out), so an expiry
        chooses the same markers whatever the transaction boundaries.
        """
        changed: dict[str, bytes | None] = {}
        for u in reversed(list(self.units())):  # oldest first, newer overwrite
            changed.update({k: v for (p, k), v in u.out.markers.items() if p == partition})
        if not changed:
            return stored(most)
        found = [(ms, k) for ms, k in stored(most + len(changed)) if k not in changed]
        found += [(expires_ms(v), k) for k, v in changed.items() if v is not None]
        return sorted(c for c in found if c[0] <= upto)[:most]


class OverlaidCache(StateCache):
    """The folder's view of job states: the uncommitted ones first, then the state cache.

    Args:
        cache: the committed states (``topology/fold/state_cache.py``).
        pipeline: the uncommitted transactions.
    """

    def __init__(self, cache: StateCache, pipeline: Pipeline) -> None:
        super().__init__(0)
        self.cache = cache
        self.pipeline = pipeline

    def get(self, partition: int, job_id: str) -> JobState | None:
        """Return the newest uncommitted state of ``job_id``, else the cached one, else None."""
        for u in self.pipeline.units():
            item = u.out.states.get(job_id)
            if item is not None and item[0] == partition and item[1] is not None:
                return item[1]
        return self.cache.get(partition, job_id)
