"""BackfillJob in the pure core: runs for past ticks, trigger ``backfill`` (docs/schedules.md)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.decide import handle
from cronlog.ids import run_id_for_backfill, run_id_for_tick
from cronlog.job import JobState, Run, TaskInstance
from cronlog.limits import MAX_BACKFILL_TASK_INSTANCES, MAX_TASKS
from cronlog.model import JobSpec, OverlapPolicy, Schedule, ScheduleKind, TaskSpec, main_task
from cronlog.vocabulary import CommandKind, RejectReason, Reprocess, RunTrigger, TaskState
from tests import builders
from topology.fold.folder import MAX_RECORD_BYTES
from topology.wire.state_codec import dump_state

JOB = "job-b"
T0 = datetime(2024, 6, 10, 12, 0, tzinfo=UTC)
SPEC = JobSpec("bf", Schedule(ScheduleKind.CRON, expression="*/5 * * * *"), main_task(("true",)))
NOW = T0 + timedelta(hours=1)
CURSOR = NOW + timedelta(minutes=5)
PAST = tuple(T0 + timedelta(minutes=5 * k) for k in range(1, 4))  # 12:05, 12:10, 12:15


def given(*events: ev.Event, spec: JobSpec = SPEC, cursor: datetime | None = CURSOR) -> JobState:
    registered = ev.JobRegistered(
        spec=spec, next_fire_at=cursor, runs_remaining=spec.schedule.max_runs
    )
    return builders.given(registered, *events, clock=NOW, job_id=JOB)


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


# --- the record bound: MAX_BACKFILL_TASK_INSTANCES ---------------------------------------------


def wide(tasks: int) -> JobSpec:
    """SPEC with ``tasks`` independent tasks."""
    names = tuple(f"t{i}" for i in range(tasks))
    return replace(
        SPEC,
        task_specs=tuple(TaskSpec(n, ("true",)) for n in names),
        max_active_runs=1,
        max_active_tasks=tasks,
    )


def hourly(n: int) -> tuple[datetime, ...]:
    return tuple(NOW - timedelta(hours=n - k) for k in range(n))


def test_backfill_of_more_task_instances_than_a_record_holds_is_refused_before_building() -> None:
    """Issue 11: 1000 ticks x 200 tasks used to build 200,000 task instances (~13-22 s) before
    the fold refused the 33 MB record; now decide refuses at once, with the same reason."""
    state = given(spec=wide(200))
    after, events = backfill(state, ticks=hourly(1000))
    assert events == [
        ev.CommandRejected(
            command=CommandKind.BACKFILL_JOB,
            reason=RejectReason.RECORD_TOO_LARGE,
            detail=f"ticks: 1000 new runs x 200 tasks = 200000 task instances; a backfill may "
            f"start at most {MAX_BACKFILL_TASK_INSTANCES} (more never fit the job's record): "
            "send fewer ticks per backfill",
        )
    ]
    assert after is not None and after.runs == ()
    again, events = backfill(after, ticks=hourly(1000))  # the refusal is applied: a no-op
    assert events == [] and again is after


def test_backfill_at_the_bound_is_built_and_one_run_past_it_is_refused() -> None:
    per_run = 7
    n = MAX_BACKFILL_TASK_INSTANCES // per_run  # 500 runs x 7 = 3500
    after, events = backfill(given(spec=wide(per_run)), ticks=hourly(n))
    assert len(runs(events)) == n and after is not None and len(after.runs) == n
    _, events = backfill(given(spec=wide(per_run)), ticks=hourly(n + 1))
    assert [(type(e), getattr(e, "reason", None)) for e in events] == [
        (ev.CommandRejected, RejectReason.RECORD_TOO_LARGE)
    ]


def test_the_bound_counts_only_the_runs_the_backfill_starts() -> None:
    """Ticks whose run is active (reprocess none) start nothing, so they do not count."""
    per_run = 7
    ticks = hourly(MAX_BACKFILL_TASK_INSTANCES // per_run + 1)
    active = ev.RunScheduled(
        run_id=run_id_for_tick(JOB, ticks[0]),
        scheduled_for=ticks[0],
        trigger=RunTrigger.SCHEDULE,
        tasks=wide(per_run).tasks,
        next_fire_at=CURSOR,
    )
    _, events = backfill(given(active, spec=wide(per_run)), ticks=ticks)
    assert [r.scheduled_for for r in runs(events)] == list(ticks[1:])


def test_more_task_instances_than_the_bound_never_fit_a_job_record() -> None:
    """The bound refuses nothing that could fit: one more than it of the smallest task
    instances a record can hold (one-character names, ready, in runs of the most tasks) is
    already past the fold's limit, before the definition and anything else in the record."""
    smallest = TaskInstance("a", TaskState.READY)
    count = MAX_BACKFILL_TASK_INSTANCES + 1
    full, rest = divmod(count, MAX_TASKS)
    sizes = [MAX_TASKS] * full + ([rest] if rest else [])
    state = replace(
        given(),
        runs=tuple(
            Run(f"r{k:024x}", NOW, RunTrigger.BACKFILL, (smallest,) * size)
            for k, size in enumerate(sizes)
        ),
    )
    assert sum(len(r.tasks) for r in state.runs) == count
    assert len(dump_state(state)) > MAX_RECORD_BYTES
