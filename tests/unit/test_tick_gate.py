"""TickGate: at most one unfolded tick of a ticker per partition (services/scheduler/ticker.py)."""

from __future__ import annotations

from services.scheduler.ticker import TickGate


def test_the_next_tick_waits_until_the_last_one_is_folded() -> None:
    gate = TickGate()
    assert gate.may_tick(3)
    gate.sent(3)
    assert not gate.may_tick(3)  # produced, no delivery report yet
    gate.delivered(3, 41)
    assert not gate.may_tick(3)  # appended at 41, not folded
    gate.folded(3, 41)
    assert not gate.may_tick(3)  # the fold reads 41 next: the tick is not folded yet
    gate.folded(3, 42)
    assert gate.may_tick(3)
    assert gate.may_tick(3)  # and stays open until the next tick is sent


def test_partitions_are_independent_and_a_failed_tick_frees_its_partition() -> None:
    gate = TickGate()
    gate.sent(0)
    gate.sent(1)
    gate.failed(1)
    assert not gate.may_tick(0)
    assert gate.may_tick(1)
    assert gate.may_tick(2)


def test_a_stall_holds_back_every_tick_after_the_first() -> None:
    # what a stall of 900 seconds leaves in the log: one tick per partition, not 900
    gate = TickGate()
    sent = 0
    for second in range(900):
        if gate.may_tick(0):
            gate.sent(0)
            gate.delivered(0, 100 + second)
            sent += 1
    assert sent == 1
    gate.folded(0, 101)  # the fold moves again
    assert gate.may_tick(0)


def test_folded_never_goes_back() -> None:
    gate = TickGate()
    gate.sent(5)
    gate.delivered(5, 10)
    gate.folded(5, 20)
    gate.folded(5, 3)  # an older commit reported late
    assert gate.may_tick(5)
