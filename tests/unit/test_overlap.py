"""Issue 3 item 6: the overlap policies (after Temporal's ScheduleOverlapPolicy) and
max_active_runs, table-driven through ``handle``."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.ids import run_id_for_tick
from cronlog.model import OverlapPolicy
from cronlog.vocabulary import CancelReason, RejectReason, RunTrigger, SkipReason, TaskState
from tests.builders import completed
from tests.unit.core_fold import JOB, Fold, at, every, fired, skipped, spec


def long_running(policy: OverlapPolicy, **kw: object) -> Fold:
    """A job every minute whose first run (12:01) was claimed by w1 and is still running."""
    f = Fold()
    kw.setdefault("lease_ttl", timedelta(minutes=10))
    f.send(cmd.RegisterJob(spec=spec(every(60), overlap=policy, **kw)), at())
    f.send(cmd.Tick(), at(minutes=1))
    f.send(
        cmd.ClaimTask(
            run_id=run_id_for_tick(JOB, at(minutes=1)), task="main", attempt=1, worker_id="w1"
        ),
        at(minutes=1),
    )
    return f


def complete_first(f: Fold, now: datetime) -> list[ev.Event]:
    return f.send(
        completed(run_id_for_tick(JOB, at(minutes=1)), at=now, started_at=at(minutes=1)),
        now,
    )


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (OverlapPolicy.ALLOW, [ev.RunScheduled, ev.TaskReady]),
        (OverlapPolicy.SKIP, [ev.TickSkipped]),
        (OverlapPolicy.BUFFER_ONE, [ev.RunBuffered]),
        (OverlapPolicy.CANCEL_PREVIOUS, [ev.RunCancelled, ev.RunScheduled, ev.TaskReady]),
    ],
)
def test_a_tick_during_an_active_run_follows_the_overlap_policy(
    policy: OverlapPolicy, expected: list[type]
) -> None:
    f = long_running(policy)
    events = f.send(cmd.Tick(), at(minutes=2))
    assert [type(e) for e in events] == expected


def test_skip_emits_an_overlap_skip_and_fires_again_once_the_run_ended() -> None:
    f = long_running(OverlapPolicy.SKIP)
    assert skipped(f.send(cmd.Tick(), at(minutes=2))) == [(at(minutes=2), SkipReason.OVERLAP)]
    complete_first(f, at(minutes=2, seconds=30))
    assert fired(f.send(cmd.Tick(), at(minutes=3))) == [at(minutes=3)]


def test_buffer_one_keeps_one_tick_and_starts_it_when_the_active_run_ends() -> None:
    f = long_running(OverlapPolicy.BUFFER_ONE)
    f.send(cmd.Tick(), at(minutes=2))
    third = f.send(cmd.Tick(), at(minutes=3))
    assert skipped(third) == [(at(minutes=3), SkipReason.OVERLAP)]
    assert f.live().buffered is not None and f.live().next_fire_at == at(minutes=4)
    done = complete_first(f, at(minutes=3, seconds=20))
    buffered_run = run_id_for_tick(JOB, at(minutes=2))
    assert [type(e) for e in done] == [
        ev.TaskSucceeded,
        ev.RunSucceeded,
        ev.RunScheduled,
        ev.TaskReady,
    ]
    started = done[2]
    assert started == ev.RunScheduled(
        run_id=buffered_run,
        scheduled_for=at(minutes=2),
        trigger=RunTrigger.SCHEDULE,
        tasks=("main",),
        next_fire_at=at(minutes=4),
        runs_remaining=None,
        release_at=None,
        ready=("main",),
    )
    assert done[3] == ev.TaskReady(
        run_id=buffered_run, task="main", attempt=1, scheduled_for=at(minutes=2)
    )
    assert f.live().buffered is None and f.live().next_fire_at == at(minutes=4)
    # the buffered run is active now: the next tick is buffered in its turn
    assert [type(e) for e in f.send(cmd.Tick(), at(minutes=4))] == [ev.RunBuffered]


def test_buffer_one_counts_the_buffered_tick_against_max_runs_once() -> None:
    f = Fold()
    f.send(
        cmd.RegisterJob(
            spec=spec(
                every(60, max_runs=2),
                overlap=OverlapPolicy.BUFFER_ONE,
                lease_ttl=timedelta(minutes=10),
            )
        ),
        at(),
    )
    f.send(cmd.Tick(), at(minutes=1))
    f.send(
        cmd.ClaimTask(
            run_id=run_id_for_tick(JOB, at(minutes=1)), task="main", attempt=1, worker_id="w1"
        ),
        at(minutes=1),
    )
    buffered = f.send(cmd.Tick(), at(minutes=2))
    assert buffered == [
        ev.RunBuffered(
            run_id=run_id_for_tick(JOB, at(minutes=2)),
            scheduled_for=at(minutes=2),
            trigger=RunTrigger.SCHEDULE,
            next_fire_at=at(minutes=3),
            runs_remaining=0,
        )
    ]
    assert skipped(f.send(cmd.Tick(), at(minutes=3))) == [(at(minutes=3), SkipReason.MAX_RUNS)]
    done = complete_first(f, at(minutes=3, seconds=5))
    assert fired(done) == [at(minutes=2)]
    assert f.live().runs_fired == 2


def test_cancel_previous_cancels_the_active_run_and_fences_its_worker() -> None:
    f = long_running(OverlapPolicy.CANCEL_PREVIOUS)
    first, second = run_id_for_tick(JOB, at(minutes=1)), run_id_for_tick(JOB, at(minutes=2))
    events = f.send(cmd.Tick(), at(minutes=2))
    assert events[0] == ev.RunCancelled(
        run_id=first,
        reason=CancelReason.OVERLAP,
        replaced_by=second,
        scheduled_for=at(minutes=1),
        tenant="default",
    )
    assert [r.run_id for r in f.live().runs] == [second]
    renewal = f.send(
        cmd.RenewLease(run_id=first, task="main", attempt=1, epoch=1, worker_id="w1"),
        at(minutes=2, seconds=10),
    )
    assert [(type(e), e.reason) for e in renewal] == [  # type: ignore[union-attr]
        (ev.CommandRejected, RejectReason.UNKNOWN_TASK_INSTANCE)
    ]


def test_cancel_previous_cancels_every_active_run_including_manual_ones() -> None:
    f = long_running(OverlapPolicy.CANCEL_PREVIOUS)
    f.send(cmd.TriggerJob(), at(minutes=1, seconds=30))
    events = f.send(cmd.Tick(), at(minutes=2))
    assert [type(e) for e in events] == [
        ev.RunCancelled,
        ev.RunCancelled,
        ev.RunScheduled,
        ev.TaskReady,
    ]


def queued(events: list[ev.Event]) -> list[datetime]:
    return [e.scheduled_for for e in events if isinstance(e, ev.RunQueued)]


def test_allow_is_bounded_by_max_active_runs_and_queues_the_rest() -> None:
    # overload delays, never drops (DESIGN.md): past max_active_runs a tick's run waits
    f = long_running(OverlapPolicy.ALLOW, max_active_runs=2)
    assert fired(f.send(cmd.Tick(), at(minutes=2))) == [at(minutes=2)]
    assert queued(f.send(cmd.Tick(), at(minutes=3))) == [at(minutes=3)]
    assert queued(f.send(cmd.Tick(), at(minutes=4))) == [at(minutes=4)]
    assert [q.scheduled_for for q in f.live().queue] == [at(minutes=3), at(minutes=4)]
    assert f.live().runs_fired == 4  # queued runs count toward max_runs when queued


def test_queued_runs_start_in_tick_order_as_slots_free() -> None:
    f = long_running(OverlapPolicy.ALLOW, max_active_runs=1)
    f.send(cmd.Tick(), at(minutes=2))
    f.send(cmd.Tick(), at(minutes=3))
    events = complete_first(f, at(minutes=3, seconds=30))
    started = [e for e in events if isinstance(e, ev.RunScheduled)]
    assert [(e.run_id, e.scheduled_for, e.trigger) for e in started] == [
        (run_id_for_tick(JOB, at(minutes=2)), at(minutes=2), RunTrigger.SCHEDULE)
    ]
    assert [q.scheduled_for for q in f.live().queue] == [at(minutes=3)]
    assert f.live().runs_fired == 3  # starting a queued run does not count it again


def test_a_full_queue_skips_the_tick_as_queue_full() -> None:
    f = long_running(OverlapPolicy.ALLOW, max_active_runs=1, max_queued_runs=1)
    assert queued(f.send(cmd.Tick(), at(minutes=2))) == [at(minutes=2)]
    assert skipped(f.send(cmd.Tick(), at(minutes=3))) == [(at(minutes=3), SkipReason.QUEUE_FULL)]


def test_a_queued_run_can_be_cancelled_and_a_delete_cancels_the_queue() -> None:
    f = long_running(OverlapPolicy.ALLOW, max_active_runs=1)
    f.send(cmd.Tick(), at(minutes=2))
    f.send(cmd.Tick(), at(minutes=3))
    first = run_id_for_tick(JOB, at(minutes=2))
    events = f.send(cmd.CancelRun(run_id=first), at(minutes=3, seconds=5))
    assert events == [
        ev.RunCancelled(
            run_id=first, reason=CancelReason.USER, scheduled_for=at(minutes=2), tenant="default"
        )
    ]
    events = f.send(cmd.DeleteJob(), at(minutes=3, seconds=10))
    assert [type(e) for e in events] == [ev.RunCancelled, ev.JobDeleted]
    assert events[0] == ev.RunCancelled(
        run_id=run_id_for_tick(JOB, at(minutes=3)),
        reason=CancelReason.JOB_DELETED,
        scheduled_for=at(minutes=3),
        tenant="default",
    )
    assert f.live().queue == ()


def test_delete_drops_the_buffered_tick() -> None:
    f = long_running(OverlapPolicy.BUFFER_ONE)
    f.send(cmd.Tick(), at(minutes=2))
    f.send(cmd.DeleteJob(), at(minutes=2, seconds=5))
    assert f.live().buffered is None
    assert fired(complete_first(f, at(minutes=2, seconds=10))) == []


def test_a_paused_job_still_starts_its_buffered_tick() -> None:
    f = long_running(OverlapPolicy.BUFFER_ONE)
    f.send(cmd.Tick(), at(minutes=2))
    f.send(cmd.PauseJob(), at(minutes=2, seconds=5))
    assert fired(complete_first(f, at(minutes=2, seconds=10))) == [at(minutes=2)]


def test_a_buffered_run_with_jitter_is_released_by_a_later_tick_or_at_once() -> None:
    f = Fold()
    f.send(
        cmd.RegisterJob(
            spec=spec(
                every(60),
                overlap=OverlapPolicy.BUFFER_ONE,
                jitter=timedelta(seconds=50),
                lease_ttl=timedelta(minutes=10),
            )
        ),
        at(),
    )
    f.send(cmd.Tick(), at(minutes=1, seconds=55))  # past any release of the 12:01 run
    f.send(
        cmd.ClaimTask(
            run_id=run_id_for_tick(JOB, at(minutes=1)), task="main", attempt=1, worker_id="w1"
        ),
        at(minutes=1),
    )
    assert [type(e) for e in f.send(cmd.Tick(), at(minutes=2))] == [ev.RunBuffered]
    done = complete_first(f, at(minutes=2, seconds=1))
    started = next(e for e in done if isinstance(e, ev.RunScheduled))
    if started.release_at is not None:
        assert f.live().run(started.run_id).tasks[0].state is TaskState.DELAYED  # type: ignore[union-attr]
        assert f.send(cmd.Tick(), started.release_at) == [
            ev.TaskReady(run_id=started.run_id, task="main", attempt=1, scheduled_for=at(minutes=2))
        ]
    else:
        assert isinstance(done[-1], ev.TaskReady)
