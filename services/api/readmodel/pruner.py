"""The hot-history pruner: a thread that deletes ended runs (and what belongs to them) older
than the hot window from the read model, a small batch at a time (``history.prune``).

Each step holds the read model's write lock for one small batch only: reads never wait, and
the projection waits at most one step. The window is measured on the run-events' own clock
(``history.newest_ms``), or on an injected ``clock`` in tests. A step that raises ends the
process (``topology.kafka.retrying.start_thread``: nothing dies quietly).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import timedelta

from services.api.readmodel import metrics
from services.api.readmodel import retention as history
from services.api.readmodel.health import DaemonLoop
from services.api.readmodel.reader import ReadModel
from services.api.readmodel.store import Store

log = logging.getLogger("cronlog.api.history")


class HistoryPruner(DaemonLoop):
    """Prunes ``read_model``'s runs that ended more than ``window`` before its clock."""

    thread_name = "history-pruner"

    def __init__(
        self,
        read_model: ReadModel,
        window: timedelta,
        *,
        interval_s: float = 60.0,
        batch_size: int = 500,
        logs: Store | None = None,
        clock: Callable[[], int | None] | None = None,
    ) -> None:
        """Prepare; nothing is pruned before ``start()`` (or a direct ``run_pass()``).

        Args:
            read_model: the read model whose store is pruned (its ``write_lock`` is taken).
            window: how long ended runs stay (positive).
            interval_s: seconds between passes.
            batch_size: most runs (and most events) deleted per step.
            logs: the task-log store whose rows of pruned runs go too, or None.
            clock: returns "now" as epoch ms (None: no event seen yet); default the newest
                applied run-event's ``at`` (``history.newest_ms``).
        """
        self.read_model = read_model
        self.window_ms = int(window.total_seconds() * 1000)
        self.interval_s = interval_s
        self.batch_size = batch_size
        self.logs = logs
        self.clock = clock or (lambda: history.newest_ms(read_model.store))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # start: a pass now and then every ``interval_s`` seconds, in a daemon thread; stop: after
    # the current step (DaemonLoop's)
    def _run(self) -> None:
        while not self._stop.is_set():
            self.run_pass()
            self._stop.wait(self.interval_s)

    def run_pass(self) -> history.Pruned:
        """Prune everything older than the window, step by step; log and count it.

        Returns:
            What the pass deleted (all zero before the first event or with nothing old).
        """
        now = self.clock()
        total = history.Pruned()
        if now is None:
            return total
        cutoff = now - self.window_ms
        while not self._stop.is_set():
            with self.read_model.write_lock:
                step = history.prune(self.read_model.store, cutoff, self.batch_size, self.logs)
            total.add(step)
            if not step.more:
                break
        for kind in ("runs", "dead_letters", "events", "log_rows"):
            if n := getattr(total, kind):
                metrics.HISTORY_PRUNED.labels(kind).inc(n)
        log.info(
            "history pruned: %d runs, %d dead letters, %d events, %d log rows ended before %d",
            total.runs,
            total.dead_letters,
            total.events,
            total.log_rows,
            cutoff,
            extra={"action": "history.pruned", "cutoff_ms": cutoff, "runs": total.runs},
        )
        return total
