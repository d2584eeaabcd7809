"""Crash points for the tests of invariant 6 ("no lost events across a crash").

Off unless ``CRONLOG_FAULT_CRASH_AT`` names a point: the scheduler then exits with status 137
(as ``kill -9`` would) the ``CRONLOG_FAULT_AFTER_BATCHES``-th time (default 1) a batch with
something to deliver reaches that point. The points, in a batch's order
(docs/architecture.md, "The fold under at-least-once"):

- ``after_events``: the batch's events are acknowledged; no changelog record, no RocksDB write;
- ``after_changelog``: the job records are acknowledged on the changelog; RocksDB not written;
- ``after_store``: RocksDB written; faust has not committed the batch's source offsets.

No point is after the commit: from there a crash loses nothing to re-fold.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from cronlog.errors import CronlogError

POINTS = ("after_events", "after_changelog", "after_store")
log = logging.getLogger("cronlog.scheduler.faults")


class CrashPoints:
    """The configured crash point, if any (from the environment).

    Raises:
        CronlogError: ``CRONLOG_FAULT_CRASH_AT`` is not one of POINTS, or
            ``CRONLOG_FAULT_AFTER_BATCHES`` is not a positive integer.
    """

    def __init__(self, env: Mapping[str, str] = os.environ) -> None:
        self.point = env.get("CRONLOG_FAULT_CRASH_AT") or None
        if self.point is not None and self.point not in POINTS:
            raise CronlogError(
                f"CRONLOG_FAULT_CRASH_AT must be one of {', '.join(POINTS)}, got {self.point!r}"
            )
        raw = env.get("CRONLOG_FAULT_AFTER_BATCHES", "1")
        if not raw.isdigit() or int(raw) < 1:
            raise CronlogError(
                f"CRONLOG_FAULT_AFTER_BATCHES must be a positive integer, got {raw!r}"
            )
        self.after = int(raw)
        self.seen = 0

    def reached(self, point: str) -> None:
        """Exit the process (status 137, no cleanup) if ``point`` is the configured one and
        this is the configured batch."""
        if point != self.point:
            return
        self.seen += 1
        if self.seen >= self.after:
            log.critical("fault injection: crashing at %s (batch %d)", point, self.seen)
            logging.shutdown()
            os._exit(137)
