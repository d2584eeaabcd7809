"""Decoded job records the fold wrote last, kept in memory so a batch need not decode them again.

Decoding a stored record (``state_codec.load_state``, pydantic's ``validate_json``) was ~38 % of
the fold's CPU under load (py-spy on a scheduler at 1,000 triggers/s), because each batch
decoded every job it touched from RocksDB although this process had written that very record
one batch earlier. The fold is the only writer of its partitions' records between an
assignment and a revoke, so the state it committed last *is* the stored record: the cache
holds it, least recently used first out.

Rules that keep it equal to the store:

- it is filled only with a batch's final states after that batch's transaction committed
  (``update``); an aborted batch leaves it as it was;
- a partition's entries are dropped when it is assigned (the store may have been restored from
  the changelog) and when it is revoked or lost (``drop``).

``cronlog replay`` folds without it, so ``replay --verify`` keeps comparing the live fold with
a fold that decodes every record.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping

from cronlog.job import JobState

DEFAULT_CAPACITY = 50_000
"""Jobs kept (``CRONLOG_STATE_CACHE``): an idle cron job's record is ~1 KB of JSON, a few KB
decoded; a busy one with 16 active runs some tens of KB."""


class StateCache:
    """job_id → (partition, JobState) of the records this process committed, bounded (LRU).

    Args:
        capacity: most jobs kept; 0 turns the cache off.
    """

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._items: OrderedDict[str, tuple[int, JobState]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, partition: int, job_id: str) -> JobState | None:
        """Return the cached state of ``job_id`` on ``partition``, or None (not cached)."""
        item = self._items.get(job_id)
        if item is None or item[0] != partition:
            self.misses += 1
            return None
        self._items.move_to_end(job_id)
        self.hits += 1
        return item[1]

    def update(self, states: Mapping[str, tuple[int, JobState | None]]) -> None:
        """Remember a committed batch's final states (None: the job was deleted)."""
        if self.capacity <= 0:
            return
        for job_id, (partition, state) in states.items():
            if state is None:
                self._items.pop(job_id, None)
                continue
            self._items[job_id] = (partition, state)
            self._items.move_to_end(job_id)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def drop(self, partition: int) -> None:
        """Forget every job of ``partition`` (assigned, revoked or lost)."""
        gone = [j for j, (p, _) in self._items.items() if p == partition]
        for job_id in gone:
            del self._items[job_id]

    def __len__(self) -> int:
        return len(self._items)
