"""How an API reader thread reports its health to ``/readyz`` and ``/healthz``."""

from __future__ import annotations

import threading

from topology.kafka.retrying import Liveness


class ReaderHealth:
    """``working`` and ``stuck`` of a reader that keeps ``_thread``, ``_stop`` and ``liveness``.

    Shared by the read model (and its log model) and the worker directory.
    """

    _thread: threading.Thread | None
    _stop: threading.Event
    liveness: Liveness

    @property
    def working(self) -> bool:
        """True while the thread runs without a broker episode (not started: True)."""
        return self._thread is None or (self._thread.is_alive() and not self.liveness.troubled)

    def stuck(self, max_age_s: float) -> bool:
        """True when the started thread died or made no progress for ``max_age_s`` seconds."""
        if self._thread is None or self._stop.is_set():
            return False
        return not self._thread.is_alive() or self.liveness.stalled(max_age_s)
