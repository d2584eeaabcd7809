"""The per-partition due index: a heap of (deadline, job_id), so a Tick never scans all jobs.

In memory only: rebuilt from the store after every restore, dropped for revoked partitions,
updated by the fold after each command. An entry is stale when the job's recorded deadline
has moved; stale entries are skipped when popped. Each open transaction records its changes
(``begin``): while one commits the fold decides the next (``services/scheduler/pipeline.py``),
so ``commit`` keeps the oldest's changes and ``rollback`` undoes every uncommitted one, so a
retried batch pops the same jobs.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable


class DueIndex:
    """Deadlines (epoch ms) of the jobs of the partitions this process owns."""

    def __init__(self) -> None:
        self._heaps: dict[int, list[tuple[int, str]]] = {}
        self._deadline: dict[str, int] = {}
        self._partition: dict[str, int] = {}
        self._journals: list[dict[str, int | None]] = []
        """One per uncommitted transaction, oldest first: job_id → its deadline before that
        transaction's first change (None: it had none)."""

    def __len__(self) -> int:
        return len(self._deadline)

    def reset(self, partitions: Iterable[int]) -> None:
        """Forget everything; own exactly ``partitions`` (each starts empty)."""
        self._heaps = {p: [] for p in partitions}
        self._deadline = {}
        self._partition = {}

    def add_partition(self, partition: int, deadlines: Iterable[tuple[str, int]]) -> int:
        """Own ``partition`` with these ``(job_id, deadline ms)``; return how many."""
        heap = [(deadline, job_id) for job_id, deadline in deadlines]
        heapq.heapify(heap)
        self._heaps[partition] = heap
        for deadline, job_id in heap:
            self._deadline[job_id] = deadline
            self._partition[job_id] = partition
        return len(heap)

    def drop_partition(self, partition: int) -> None:
        """Forget ``partition`` (revoked or lost) and its jobs."""
        for _, job_id in self._heaps.pop(partition, []):
            if self._partition.get(job_id) == partition:
                self._deadline.pop(job_id, None)
                self._partition.pop(job_id, None)

    def entries(self, partition: int) -> list[tuple[str, int]]:
        """Return the ``(job_id, deadline ms)`` of ``partition``'s jobs, sorted by job_id.

        Exactly what ``add_partition`` takes to rebuild an index that pops the same jobs in
        the same order (stale heap entries are left out: they are never popped).
        """
        return sorted(
            (job_id, deadline)
            for job_id, deadline in self._deadline.items()
            if self._partition.get(job_id) == partition
        )

    def partitions(self) -> list[int]:
        """Return the partitions owned, ascending."""
        return sorted(self._heaps)

    def begin(self) -> None:
        """Start recording a transaction's changes, so ``rollback`` can undo them."""
        self._journals.append({})

    def commit(self) -> None:
        """Keep the changes of the oldest transaction since its ``begin`` (it committed)."""
        if self._journals:
            self._journals.pop(0)

    def rollback(self) -> None:
        """Undo every change of every uncommitted transaction (one aborted: all after it go).

        Jobs of a partition dropped meanwhile (revoked) are not restored.
        """
        journals, self._journals = self._journals, []
        for journal in reversed(journals):
            for job_id, before in journal.items():
                heap = self._heaps.get(self._partition.get(job_id, -1))
                if before is None or heap is None:
                    self._deadline.pop(job_id, None)
                    continue
                self._deadline[job_id] = before
                heapq.heappush(heap, (before, job_id))

    def _remember(self, job_id: str) -> None:
        if self._journals and job_id not in (journal := self._journals[-1]):
            journal[job_id] = self._deadline.get(job_id)

    def set(self, partition: int, job_id: str, deadline_ms: int | None) -> None:
        """Record the job's next deadline (None: nothing due ever, until a command says so)."""
        if deadline_ms is None:
            if job_id in self._deadline:
                self._remember(job_id)
                del self._deadline[job_id]
            return
        if self._deadline.get(job_id) == deadline_ms:
            return
        self._remember(job_id)
        self._deadline[job_id] = deadline_ms
        self._partition[job_id] = partition
        heap = self._heaps.get(partition)
        if heap is not None:
            heapq.heappush(heap, (deadline_ms, job_id))

    def pop_due(self, partition: int, now_ms: int, limit: int = 10_000) -> list[str]:
        """Remove and return the jobs of ``partition`` whose deadline is at or before ``now_ms``.

        Returns:
            job_ids in (deadline, job_id) order, at most ``limit``; each at most once.
        """
        heap = self._heaps.get(partition)
        due: list[str] = []
        while heap and heap[0][0] <= now_ms and len(due) < limit:
            deadline, job_id = heapq.heappop(heap)
            if self._deadline.get(job_id) == deadline:
                self._remember(job_id)
                del self._deadline[job_id]
                due.append(job_id)
        return due

    def has_due(self, partition: int, now_ms: int) -> bool:
        """Return whether some job of ``partition`` is due at ``now_ms``.

        Stale entries are dropped on the way.
        """
        heap = self._heaps.get(partition)
        while heap and heap[0][0] <= now_ms:
            deadline, job_id = heap[0]
            if self._deadline.get(job_id) == deadline:
                return True
            heapq.heappop(heap)
        return False
