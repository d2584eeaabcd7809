"""The fold's counts and timings, logged every few seconds (``action=fold_stats``)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from topology.fold.folder import BatchResult

log = logging.getLogger("cronlog.scheduler")


@dataclass
class FoldStats:
    """Counts and timings of the fold, logged every ``every_s`` seconds (action=fold_stats)."""

    every_s: float = 10.0
    since: float = field(default_factory=time.monotonic)
    batches: int = 0
    records: int = 0
    decisions: int = 0
    fold_s: float = 0.0
    commit_s: float = 0.0
    store_s: float = 0.0

    def record(
        self, out: BatchResult, records: int, fold_s: float, commit_s: float, store_s: float
    ) -> None:
        """Add one batch; log and reset when the period is over."""
        self.batches += 1
        self.records += records
        self.decisions += out.decisions
        self.fold_s += fold_s
        self.commit_s += commit_s
        self.store_s += store_s
        now = time.monotonic()
        if now - self.since >= self.every_s:
            log.info(
                "fold stats",
                extra={
                    "action": "fold_stats",
                    "records": self.records,
                    "decisions": self.decisions,
                    "batches": self.batches,
                    "rate": f"{self.records / (now - self.since):.0f}/s",
                    "fold": f"{self.fold_s:.2f}s",
                    "commit": f"{self.commit_s:.2f}s",
                    "store": f"{self.store_s:.2f}s",
                },
            )
            self.since, self.batches, self.records, self.decisions = now, 0, 0, 0
            self.fold_s = self.commit_s = self.store_s = 0.0
