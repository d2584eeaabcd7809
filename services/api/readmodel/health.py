"""An API background thread: how it starts and stops, and how a reader's reports its health to
``/readyz`` and ``/healthz``."""

from __future__ import annotations

import threading

from topology.kafka.retrying import Liveness, start_thread


class DaemonLoop:
    """``start`` and ``stop`` of an API background thread that runs ``_run`` until ``_stop``
    is set, and keeps ``_thread`` and ``_stop``.

    Shared by the readers (``ReaderHealth``) and the history pruner.
    """

    thread_name: str
    """The name of the thread (in logs, and in ``fatal``'s line if it dies)."""
    _thread: threading.Thread | None
    _stop: threading.Event

    def start(self) -> None:
        """Start the loop in a daemon thread (returns at once); ``_run`` raising anything but
        ``Stopped`` ends the process (``topology.kafka.retrying.start_thread``)."""
        self._thread = start_thread(self.thread_name, self._run)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Ask the loop to stop and wait up to ``timeout_s`` seconds for the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        """The thread's loop, until ``_stop`` is set."""
        raise NotImplementedError


class ReaderHealth(DaemonLoop):
    """``working`` and ``stuck`` of a reader thread that also keeps ``liveness``, and its
    ``start``, which counts as the reader's first sign of life.

    Shared by the read model (and its log model) and the worker directory.
    """

    liveness: Liveness

    def start(self) -> None:
        """Start reading in a daemon thread (returns at once); see ``DaemonLoop.start``."""
        self.liveness.beat()
        super().start()

    @property
    def working(self) -> bool:
        """True while the thread runs without a broker episode (not started: True)."""
        return self._thread is None or (self._thread.is_alive() and not self.liveness.troubled)

    def stuck(self, max_age_s: float) -> bool:
        """True when the started thread died or made no progress for ``max_age_s`` seconds."""
        if self._thread is None or self._stop.is_set():
            return False
        return not self._thread.is_alive() or self.liveness.stalled(max_age_s)
