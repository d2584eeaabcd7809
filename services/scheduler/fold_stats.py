"""The fold's counts and timings, logged every few seconds (``action=fold_stats``)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from topology.fold.folder import BatchResult

log = logging.getLogger("cronlog.scheduler")


@dataclass
class FoldStats:
    """Counts and timings of the fold, logged every ``every_s`` seconds (action=fold_stats).

    ``batches`` counts transactions (``txns`` is their rate), ``passes`` the decide passes
    that went into them; ``commit`` is the commit thread's time, ``wait`` the fold thread's
    time blocked on it (services/scheduler/pipeline.py).
    """

    every_s: float = 10.0
    since: float = field(default_factory=time.monotonic)
    batches: int = 0
    passes: int = 0
    records: int = 0
    decisions: int = 0
    fold_s: float = 0.0
    commit_s: float = 0.0
    store_s: float = 0.0
    wait_s: float = 0.0

    def passed(self, records: int) -> None:
        """Count one decide pass of ``records`` command records."""
        self.passes += 1

    def record(
        self,
        out: BatchResult,
        records: int,
        fold_s: float,
        commit_s: float,
        store_s: float,
        wait_s: float = 0.0,
    ) -> None:
        """Add one committed transaction (seconds); log and reset when the period is over."""
        self.batches += 1
        self.records += records
        self.decisions += out.decisions
        self.fold_s += fold_s
        self.commit_s += commit_s
        self.store_s += store_s
        self.wait_s += wait_s
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
                    "txns": f"{self.batches / (now - self.since):.1f}/s",
                    "wait": f"{self.wait_s:.2f}s",
                    "passes": self.passes,
                },
            )
            self.since, self.batches, self.records, self.decisions = now, 0, 0, 0
            self.passes = 0
            self.fold_s = self.commit_s = self.store_s = self.wait_s = 0.0
