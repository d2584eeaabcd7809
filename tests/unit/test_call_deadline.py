"""``_call_with_deadline``: a transactional call that never returns is left behind, not waited
on for good (librdkafka #5456, #5511); what a call raises reaches the caller."""

from __future__ import annotations

import threading

import pytest

from services.scheduler.transaction import CallStuck, _call_with_deadline


def test_a_call_that_never_returns_is_given_up_on_as_stuck() -> None:
    release = threading.Event()
    try:
        with pytest.raises(CallStuck, match="send_offsets_to_transaction did not return"):
            _call_with_deadline(release.wait, 0.05, "send_offsets_to_transaction")
    finally:
        release.set()


def test_what_the_call_raises_reaches_the_caller_and_a_return_is_quiet() -> None:
    def fail() -> None:
        raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):
        _call_with_deadline(fail, 5.0, "x")
    seen: list[int] = []
    _call_with_deadline(lambda: seen.append(1), 5.0, "x")
    assert seen == [1]
