"""Reusable threads for the worker's blocking work: attempts, and thread-isolated calls.

Starting a thread per attempt (and one more per ``isolation: thread`` call) cost a thread
start and its teardown per task. ``Threads`` keeps the threads: a job goes to an idle one, a
new one starts only when none is idle (so a hung call never holds another job up, and there is
no cap to deadlock on), and a thread idle for ``idle_s`` ends. Like
``concurrent.futures.ThreadPoolExecutor`` without its fixed size, which a call that never
returns would use up.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("cronlog.worker")
Job = tuple[Callable[..., object], tuple[Any, ...]]


class Threads:
    """Daemon threads that run submitted jobs, reused while they are wanted (thread-safe).

    Args:
        name: the threads' name prefix (``<name>-<n>``, as py-spy and tracebacks show them).
        idle_s: seconds an idle thread waits for a job before it ends.
    """

    def __init__(self, name: str, idle_s: float = 60.0) -> None:
        self.name, self.idle_s = name, idle_s
        self._jobs: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        """Threads waiting for a job; each job put on ``_jobs`` took one of them."""
        self._numbers = itertools.count(1)
        self.started = 0
        """Threads started so far (a measure of reuse: ``started`` against jobs run)."""

    def submit(self, fn: Callable[..., object], *args: Any) -> None:
        """Run ``fn(*args)`` in an idle thread, or a new one. An exception it raises is logged
        (``action=thread_job_failed``) and the thread goes on."""
        with self._lock:
            if self._idle > 0:
                self._idle -= 1
                self._jobs.put((fn, args))
                return
            self.started += 1
            n = next(self._numbers)
        thread = threading.Thread(
            target=self._loop, args=((fn, args),), daemon=True, name=f"{self.name}-{n}"
        )
        thread.start()

    def idle(self) -> int:
        """Threads waiting for a job now."""
        with self._lock:
            return self._idle

    def _loop(self, job: Job) -> None:
        while True:
            fn, args = job
            try:
                fn(*args)
            except Exception:
                log.exception("a worker thread's job failed", extra={"action": "thread_job_failed"})
            del fn, args, job  # nothing of a finished job stays alive while idle
            with self._lock:
                self._idle += 1
            try:
                job = self._jobs.get(timeout=self.idle_s)
            except queue.Empty:
                with self._lock:
                    try:  # a job put as the wait ended was counted on this thread
                        job = self._jobs.get_nowait()
                    except queue.Empty:
                        self._idle -= 1
                        return
