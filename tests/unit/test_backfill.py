"""BackfillJob in the pure core: runs for past ticks, trigger ``backfill`` (docs/schedules.md)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.decide import handle
from cronlog.ids import run_id_for_backfill, run_id_for_tick
from cronlog.job import JobState, evolve
from cronlog.model import JobSpec, OverlapPolicy, Schedule, ScheduleKind
from cronlog.vocabulary import RejectReason, Reprocess, RunTrigger

JOB = "job-b"
T0 = datetime(2024, 6, 10, 12, 0, tzinfo=UTC)
SPEC = JobSpec("bf", Schedule(ScheduleKind.CRON, expression="*/5 * * * *"), ("true",))
NOW = T0 + timedelta(hours=1)
CURSOR = NOW + timedelta(minutes=5)
PAST = tuple(T0 + timedelta(minutes=5 * k) for k in range(1, 4))  # 12:05, 12:10, 12:15


def given(*events: ev.Event, spec: JobSpec = SPEC, cursor: datetime | None = CURSOR) -> JobState:
    state: JobState | None = None
    for event in (
        ev.JobRegistered(spec=spec, next_fire_at=cursor, runs_remaining=spec.schedule.max_runs),
        *events,
    ):
        state = evolve(state, JOB, event)
    assert state is not None
    return replace(state, clock=NOW)


def backfill(
    state: JobState | None,
    ticks: tuple[datetime, ...] = PAST,
    reprocess: Reprocess = Reprocess.NONE,
    key: str = "bf-1",
    now: datetime = NOW,
) -> tuple[JobState | None, list[ev.Event]]:
    return handle(
        state,
        cmd.Envelope(
            idem_key=key, job_id=JOB, command=cmd.BackfillJob(ticks=ticks, reprocess=reprocess)
        ),
        now,
    )


def runs(events: list[ev.Event]) -> list[ev.RunScheduled]:
    return [e for e in events if isinstance(e, ev.RunScheduled)]


def test_backfill_creates_a_run_per_tick_with_trigger_backfill_and_the_ticks_run_id() -> None:
    state = given()
    after, events = backfill(state)
    assert [(r.run_id, r.scheduled_for, r.trigger) for r in runs(events)] == [
        (run_id_for_tick(JOB, t), t, RunTrigger.BACKFILL) for t in PAST
    ]
    assert [e for e in events if isinstance(e, ev.TaskReady)] == [
        ev.TaskReady(run_id=run_id_for_tick(JOB, t), task="main", attempt=1, scheduled_for=t)
        for t in PAST
    ]
    assert after is not None
    assert after.next_fire_at == CURSOR and after.runs_fired == 0  # cursor and count untouched
    assert len(after.runs) == 3


def test_backfill_is_idempotent_by_idem_key() -> None:
    after, _ = backfill(given())
    again, events = backfill(after)
    assert events == [] and again == after


def test_backfill_none_skips_ticks_whose_run_is_active() -> None:
    tick = PAST[0]
    state = given(
        ev.RunScheduled(
            run_id=run_id_for_tick(JOB, tick),
            scheduled_for=tick,
            trigger=RunTrigger.SCHEDULE,
            tasks=("main",),
            next_fire_at=CURSOR,
        )
    )
    _, events = backfill(state)
    assert [r.scheduled_for for r in runs(events)] == list(PAST[1:])
    # a second backfill (another idem_key) of the same ticks: every run is active, nothing new
    _, events2 = backfill(backfill(state)[0], key="bf-2")
    assert runs(events2) == []


def test_backfill_reprocess_gives_distinct_run_ids_per_command() -> None:
    tick = PAST[0]
    state = given(
        ev.RunScheduled(
            run_id=run_id_for_tick(JOB, tick),
            scheduled_for=tick,
            trigger=RunTrigger.SCHEDULE,
            tasks=("main",),
            next_fire_at=CURSOR,
        )
    )
    after, events = backfill(state, (tick,), Reprocess.ALL)
    (run,) = runs(events)
    assert run.run_id == run_id_for_backfill(JOB, tick, "bf-1") != run_id_for_tick(JOB, tick)
    _, events2 = backfill(after, (tick,), Reprocess.FAILED, key="bf-2")
    (run2,) = runs(events2)
    assert run2.run_id == run_id_for_backfill(JOB, tick, "bf-2") not in (run.run_id,)


def test_backfill_drops_ticks_the_schedule_still_owns() -> None:
    future = NOW + timedelta(minutes=1)
    at_cursor = CURSOR
    _, events = backfill(given(cursor=T0 + timedelta(minutes=10)), (*PAST, future, at_cursor))
    assert [r.scheduled_for for r in runs(events)] == [PAST[0]]  # 12:10 is the cursor


def test_backfill_of_a_deleted_job_is_rejected() -> None:
    _, events = backfill(given(ev.JobDeleted()))
    assert len(events) == 1 and isinstance(events[0], ev.CommandRejected)
    assert events[0].reason is RejectReason.JOB_DELETED


def test_backfill_of_too_many_ticks_is_rejected_naming_ticks() -> None:
    ticks = tuple(T0 - timedelta(minutes=k) for k in range(cmd.MAX_BACKFILL_TICKS + 1))
    _, events = backfill(given(), ticks)
    assert len(events) == 1 and isinstance(events[0], ev.CommandRejected)
    assert events[0].reason is RejectReason.INVALID_DEFINITION
    assert events[0].detail.startswith("ticks: ")


def test_backfill_runs_are_exempt_from_overlap_and_do_not_block_the_schedule() -> None:
    spec = replace(SPEC, overlap=OverlapPolicy.CANCEL_PREVIOUS, max_active_runs=1)
    after, events = backfill(given(spec=spec))
    assert len(runs(events)) == 3  # beyond max_active_runs=1: exempt
    tick_state, tick_events = handle(
        after, cmd.Envelope(idem_key="t", job_id=JOB, command=cmd.Tick()), CURSOR
    )
    assert not any(isinstance(e, ev.RunCancelled) for e in tick_events)  # not cancelled
    assert [r.trigger for r in runs(tick_events)] == [RunTrigger.SCHEDULE]  # not skipped
    assert tick_state is not None and tick_state.runs_fired == 1


def test_backfill_does_not_take_the_buffered_ticks_run_id() -> None:
    spec = replace(SPEC, overlap=OverlapPolicy.BUFFER_ONE)
    active = ev.RunScheduled(
        run_id="r-active",
        scheduled_for=PAST[0],
        trigger=RunTrigger.MANUAL,
        tasks=("main",),
        next_fire_at=CURSOR,
    )
    held = ev.RunBuffered(
        run_id=run_id_for_tick(JOB, PAST[1]),
        scheduled_for=PAST[1],
        trigger=RunTrigger.SCHEDULE,
        next_fire_at=CURSOR,
    )
    _, events = backfill(given(active, held, spec=spec))
    assert [r.scheduled_for for r in runs(events)] == [PAST[0], PAST[2]]
