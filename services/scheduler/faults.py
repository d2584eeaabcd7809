"""Crash points for the tests of invariant 6 ("no lost events across a crash").

Off unless ``CRONLOG_FAULT_CRASH_AT`` names a point: the scheduler then exits with status 137
(as ``kill -9`` would) the ``CRONLOG_FAULT_AFTER_BATCHES``-th time (default 1) a batch (or a
restore) reaches that point. The points, in a batch's order (docs/architecture.md, "The fold
runtime"):

- ``before_commit``: the batch's output is produced in its transaction, not committed;
- ``after_commit``: the transaction (output, changelog records, offsets) committed; RocksDB
  not written;
- ``after_store``: RocksDB written too;
- ``during_restore``: a partition's store is opened, its changelog not yet read.

With ``CRONLOG_FAULT_ACTION=stop`` the process freezes there instead (SIGSTOP to itself, every
thread stopped as by ``kill -STOP``), once, and goes on where it was after a SIGCONT: a zombie
at a chosen point of the protocol (tests/integration/test_zombie_fencing.py).
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Mapping

from cronlog.errors import CronlogError

POINTS = ("before_commit", "after_commit", "after_store", "during_restore")
ACTIONS = ("crash", "stop")
log = logging.getLogger("cronlog.scheduler.faults")


class CrashPoints:
    """The configured crash point, if any (from the environment).

    Raises:
        CronlogError: ``CRONLOG_FAULT_CRASH_AT`` is not one of POINTS,
            ``CRONLOG_FAULT_AFTER_BATCHES`` is not a positive integer, or
            ``CRONLOG_FAULT_ACTION`` is not one of ACTIONS.
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
        self.action = env.get("CRONLOG_FAULT_ACTION") or "crash"
        if self.action not in ACTIONS:
            raise CronlogError(
                f"CRONLOG_FAULT_ACTION must be one of {', '.join(ACTIONS)}, got {self.action!r}"
            )
        self.seen = 0

    def reached(self, point: str) -> None:
        """Exit the process (status 137, no cleanup) if ``point`` is the configured one and
        this is the configured batch; with the ``stop`` action, freeze it there once."""
        if point != self.point:
            return
        self.seen += 1
        if self.action == "stop":
            if self.seen == self.after:
                log.critical("fault injection: stopping at %s (batch %d)", point, self.seen)
                os.kill(os.getpid(), signal.SIGSTOP)
                log.critical("fault injection: continued at %s", point)
            return
        if self.seen >= self.after:
            log.critical("fault injection: crashing at %s (batch %d)", point, self.seen)
            logging.shutdown()
            os._exit(137)
