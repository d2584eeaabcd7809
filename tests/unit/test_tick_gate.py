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


def test_a_partition_that_comes_back_may_be_ticked_again() -> None:
    # our tick was folded by the owner it had meanwhile; this fold never sees it again
    gate = TickGate()
    gate.sent(2)
    gate.delivered(2, 500)
    gate.reset(2)  # revoked, then assigned and restored again
    assert gate.may_tick(2)


def test_a_late_delivery_report_of_a_tick_below_the_committed_offset_holds_nothing_back() -> None:
    gate = TickGate()
    gate.sent(4)
    gate.reset(4, committed=900)  # revoked, re-assigned: the fold starts at 900
    gate.delivered(4, 850)  # the old tick's report, served after the reset
    assert gate.may_tick(4)
    gate.sent(4)
    gate.delivered(4, 950)  # a new tick, not folded yet
    assert not gate.may_tick(4)
