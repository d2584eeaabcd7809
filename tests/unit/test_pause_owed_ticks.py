"""Ticks that came due before a pause or a reschedule, while the fold was behind.

A tick is decided when a Tick record whose time passes it is folded. When the fold is behind
(its owner dead or stalled: the ticker appends nothing meanwhile), a PauseJob or UpdateJob
can be folded while ticks due before it are still undecided. They came due while the job was
active, so they are owed (DESIGN.md invariant 1): the command's own fold decides them first,
exactly as the Tick that would have come before it. The chaos run under an overloaded box
lost thousands of ticks so: no RunScheduled, no RunQueued, no TickSkipped.
"""

from __future__ import annotations

from datetime import datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.model import CatchupPolicy
from cronlog.vocabulary import JobStatus, RunTrigger, SkipReason
from tests.unit.core_fold import Fold, at, every, fired, skipped, spec


def _accounted(events: list[ev.Event]) -> list[datetime]:
    """Every tick an event decided: fired, queued, buffered or skipped."""
    kinds = ev.RunScheduled | ev.RunQueued | ev.RunBuffered | ev.TickSkipped
    return sorted(
        e.scheduled_for
        for e in events
        if isinstance(e, kinds) and getattr(e, "trigger", RunTrigger.SCHEDULE) != RunTrigger.MANUAL
    )


def test_pause_decides_the_ticks_due_before_it_first() -> None:
    f = Fold()
    f.send(cmd.RegisterJob(spec=spec(every(10))), at())
    f.send(cmd.Tick(), at(seconds=10))  # fires 12:00:10; then the fold falls behind
    events = f.send(cmd.PauseJob(), at(seconds=35))
    assert fired(events) == [at(seconds=20), at(seconds=30)]
    assert isinstance(events[-1], ev.JobPaused)
    assert f.live().status is JobStatus.PAUSED
    assert f.live().next_fire_at == at(seconds=40)  # a resume with catch-up owes from here


def test_pause_long_after_the_last_tick_follows_the_catch_up_policy() -> None:
    f = Fold()
    f.send(cmd.RegisterJob(spec=spec(every(30, catchup=CatchupPolicy.LATEST))), at())
    events = f.send(cmd.PauseJob(), at(minutes=5, seconds=10))  # ticks 12:00:30 .. 12:05:00
    # within the 60 s misfire grace: on time; older: missed, each one visible
    assert fired(events) == [at(minutes=4, seconds=30), at(minutes=5)]
    assert skipped(events) == [(at(seconds=30 * i), SkipReason.CATCHUP_POLICY) for i in range(1, 9)]


def test_a_tick_at_the_pauses_own_instant_stays_the_schedules() -> None:
    """As if its Tick came after the pause: not owed, unless a resume with catch-up owes it."""
    f = Fold()
    f.send(cmd.RegisterJob(spec=spec(every(10))), at())
    events = f.send(cmd.PauseJob(), at(seconds=20))
    assert fired(events) == [at(seconds=10)]
    assert f.live().next_fire_at == at(seconds=20)


def test_a_reschedule_decides_the_old_schedules_due_ticks_first() -> None:
    f = Fold()
    f.send(cmd.RegisterJob(spec=spec(every(10))), at())
    events = f.send(cmd.UpdateJob(spec=spec(every(60))), at(seconds=25))
    assert fired(events) == [at(seconds=10), at(seconds=20)]
    assert isinstance(events[-1], ev.JobRedefined)
    assert f.live().next_fire_at == at(minutes=1)


def test_an_edit_that_keeps_the_schedule_fires_nothing_early() -> None:
    f = Fold()
    f.send(cmd.RegisterJob(spec=spec(every(10))), at())
    events = f.send(cmd.UpdateJob(spec=spec(every(10), max_active_runs=3)), at(seconds=5))
    assert fired(events) == []
    assert f.live().next_fire_at == at(seconds=10)


@settings(max_examples=60, deadline=None)
@given(
    tick_at=st.lists(st.integers(1, 600), max_size=8, unique=True).map(sorted),
    pause_after=st.integers(0, 300),
    period=st.sampled_from([2, 5, 12, 30]),  # each divides 12:00 (the epoch anchor)
)
def test_every_tick_due_before_a_pause_has_exactly_one_decision(
    tick_at: list[int], pause_after: int, period: int
) -> None:
    """Ticks folded at random moments (any gaps: a dead or stalled owner), then a pause."""
    f = Fold()
    f.send(cmd.RegisterJob(spec=spec(every(period, catchup=CatchupPolicy.LATEST))), at())
    for s in tick_at:
        f.send(cmd.Tick(), at(seconds=s))
    pause = (tick_at[-1] if tick_at else 0) + pause_after
    f.send(cmd.PauseJob(), at(seconds=pause))
    f.send(cmd.Tick(), at(seconds=pause + 600))  # paused: nothing more
    last_tick = tick_at[-1] if tick_at else 0
    owed = [t for t in range(period, pause + 1, period) if t < pause or t <= last_tick]
    assert _accounted(f.events) == [at(seconds=t) for t in owed]
    assert f.live().next_fire_at == at(seconds=(owed[-1] if owed else 0) + period)
