"""The worker's reused threads (``services/worker/threads.py``): reuse, no cap, idle ends."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from services.worker.threads import Threads


def _wait(condition: object, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


def test_jobs_one_after_another_run_in_one_reused_thread() -> None:
    threads = Threads("t")
    names: list[str] = []
    for _ in range(20):
        done = threading.Event()
        threads.submit(lambda d=done: (names.append(threading.current_thread().name), d.set()))
        assert done.wait(10)
        _wait(lambda: threads.idle() == 1)  # back to waiting before the next job comes
    assert (threads.started, set(names)) == (1, {"t-1"})


def test_a_blocked_job_never_holds_up_the_next_one() -> None:
    threads = Threads("t")
    release, second = threading.Event(), threading.Event()
    threads.submit(release.wait)
    threads.submit(second.set)
    assert second.wait(10)  # ran beside the blocked one, in a thread of its own
    release.set()
    _wait(lambda: threads.idle() == 2)
    assert threads.started == 2


def test_a_thread_idle_for_idle_s_ends_and_a_later_job_starts_a_new_one() -> None:
    threads = Threads("idles", idle_s=0.05)
    ran = threading.Event()
    threads.submit(ran.set)
    assert ran.wait(10)
    _wait(lambda: threads.idle() == 0 and not _alive("idles-1"))
    again = threading.Event()
    threads.submit(again.set)
    assert again.wait(10)
    assert threads.started == 2


def test_a_job_that_raises_is_logged_and_its_thread_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    threads = Threads("t")

    def boom() -> None:
        raise RuntimeError("bug in a job")

    with caplog.at_level(logging.ERROR, logger="cronlog.worker"):
        threads.submit(boom)
        _wait(lambda: threads.idle() == 1)
    after = threading.Event()
    threads.submit(after.set)
    assert after.wait(10)
    assert threads.started == 1
    assert [r.getMessage() for r in caplog.records] == ["a worker thread's job failed"]


def _alive(name: str) -> bool:
    return any(t.name == name for t in threading.enumerate())
