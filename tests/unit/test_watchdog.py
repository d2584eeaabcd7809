"""The watchdog ends the process when a guarded call outlives its timeout plus the grace, and
only then (topology/kafka/watchdog.py; the librdkafka call it exists for ignores its timeout)."""

from __future__ import annotations

import threading

from topology.kafka.watchdog import Watchdog


def _recorder() -> tuple[list[tuple[str, str]], threading.Event, Watchdog]:
    calls: list[tuple[str, str]] = []
    fired = threading.Event()

    def on_expiry(thread: str, reason: str) -> None:
        calls.append((thread, reason))
        fired.set()

    dog = Watchdog("fold", grace_s=0.05, every_s=0.01, on_expiry=on_expiry)
    return calls, fired, dog


def test_a_call_blocked_past_its_timeout_and_grace_ends_the_process() -> None:
    calls, fired, dog = _recorder()
    dog.start()
    with dog.guard("send_offsets_to_transaction", 0.05):
        assert fired.wait(5.0)  # blocked: the watchdog fires while the call is in progress
    dog.stop()
    assert len(calls) == 1
    thread, reason = calls[0]
    assert thread == "fold"
    assert reason.startswith("send_offsets_to_transaction blocked ")
    assert "#5456" in reason


def test_calls_that_return_in_time_never_fire_it() -> None:
    calls, fired, dog = _recorder()
    dog.start()
    for _ in range(50):
        with dog.guard("commit_transaction", 10.0):
            pass
    assert not fired.wait(0.2)
    dog.stop()
    assert calls == []
    assert dog._calls == []  # every guard cleaned up after itself


def test_the_innermost_late_call_is_named() -> None:
    calls, fired, dog = _recorder()
    dog.start()
    with dog.guard("outer", 60.0), dog.guard("abort_transaction", 0.0):
        assert fired.wait(5.0)
    dog.stop()
    assert calls[0][1].startswith("abort_transaction blocked")
