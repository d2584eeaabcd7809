"""The per-partition due index: a heap of (deadline, job_id), so a Tick never scans all jobs.

In memory only: rebuilt from the table after every recovery, dropped for revoked partitions,
updated by the fold after each command. An entry is stale when the job's recorded deadline
has moved; stale entries are skipped when popped.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable


class DueIndex:
    """Deadlines (epoch ms) of the jobs of the partitions this process owns."""

    def __init__(self) -> None:
        self._heaps: dict[int, list[tuple[int, str]]] = {}
        self._deadline: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._deadline)

    def reset(self, partitions: Iterable[int]) -> None:
        """Forget everything; own exactly ``partitions`` (each starts empty)."""
        self._heaps = {p: [] for p in partitions}
        self._deadline = {}

    def set(self, partition: int, job_id: str, deadline_ms: int | None) -> None:
        """Record the job's next deadline (None: nothing due ever, until a command says so)."""
        if deadline_ms is None:
            self._deadline.pop(job_id, None)
            return
        if self._deadline.get(job_id) == deadline_ms:
            return
        self._deadline[job_id] = deadline_ms
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
                del self._deadline[job_id]
                due.append(job_id)
        return due
