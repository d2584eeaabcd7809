"""A watchdog for blocking client calls that may outlive their own timeout.

librdkafka's transactional calls take a timeout, yet one of them can block for good:
``send_offsets_to_transaction`` waits forever for a group coordinator lost in a broker outage
(librdkafka issues #5456 "send_offsets_to_transaction() ignores timeout" and #5511, both open
in 2.16; the chaos and broker-outage tests hit it). Python cannot interrupt a thread blocked in
C, so the watchdog applies the rule for a thread that cannot go on: it ends the process
(``topology.kafka.retrying.fatal``, exit 70) and the supervisor (``./ops/up``) restarts it. The
restarted scheduler's ``init_transactions`` fences the stuck producer and aborts its open
transaction, so nothing of the stuck batch becomes visible.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from topology.kafka.retrying import fatal

GRACE_S = 15.0
"""How long past its own timeout a guarded call may block before the process ends."""


class Watchdog:
    """Ends the process when a guarded call blocks longer than its timeout plus a grace.

    Args:
        thread: names the guarded thread in the fatal log line.
        grace_s: seconds past a call's own timeout before ``on_expiry`` (default ``GRACE_S``).
        every_s: how often the watchdog looks, seconds.
        on_expiry: called once, from the watchdog's thread, with (thread, reason); default
            ``fatal`` (log one critical line, exit 70). Tests pass a recorder.

    Thread safety: ``guard`` is meant for one thread (the guarded one); any number of
    guards may nest, the innermost deadline counts.
    """

    def __init__(
        self,
        thread: str,
        *,
        grace_s: float = GRACE_S,
        every_s: float = 1.0,
        on_expiry: Callable[[str, str], object] = fatal,
    ) -> None:
        self.thread = thread
        self.grace_s = grace_s
        self.every_s = every_s
        self.on_expiry = on_expiry
        self._lock = threading.Lock()
        self._calls: list[tuple[str, float, float]] = []
        """(what, started, deadline) of the calls in progress, monotonic seconds."""
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None

    @contextmanager
    def guard(self, what: str, timeout_s: float) -> Iterator[None]:
        """Watch the block's duration: longer than ``timeout_s + grace_s`` ends the process.

        Args:
            what: the call, for the log line (e.g. ``send_offsets_to_transaction``).
            timeout_s: the call's own timeout, seconds.
        """
        now = time.monotonic()
        entry = (what, now, now + timeout_s + self.grace_s)
        with self._lock:
            self._calls.append(entry)
        try:
            yield
        finally:
            with self._lock:
                self._calls.remove(entry)

    def start(self) -> Watchdog:
        """Start the watching thread (a daemon); returns self."""
        self._watcher = threading.Thread(
            target=self._watch, name=f"{self.thread}-watchdog", daemon=True
        )
        self._watcher.start()
        return self

    def stop(self) -> None:
        """Stop watching (on shutdown)."""
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join()

    def _watch(self) -> None:
        while not self._stop.wait(self.every_s):
            now = time.monotonic()
            with self._lock:
                late = [c for c in self._calls if now > c[2]]
            if late:
                what, started, _ = late[-1]
                self.on_expiry(
                    self.thread,
                    f"{what} blocked {now - started:.0f}s, past its own timeout and a "
                    f"{self.grace_s:.0f}s grace (a librdkafka call that ignores its timeout: "
                    f"issues #5456, #5511); a restart gets fresh clients",
                )
                return
