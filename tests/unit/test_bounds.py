"""Issue 3 items 3, 4, 7, 8 in the pure core: ``every`` schedules, start_at/end_at/max_runs,
exclusion windows, jitter and resume with or without catch-up. Given events / when command /
then events, through ``handle`` as the adapter runs it."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.errors import InvalidDefinition
from cronlog.exclusions import is_excluded
from cronlog.ids import run_id_for_tick
from cronlog.model import CatchupPolicy, Exclusion, Schedule, ScheduleKind
from cronlog.runs import release_at
from cronlog.schedule import every_tick, next_tick
from cronlog.validation import validate_spec
from cronlog.vocabulary import RunTrigger, SkipReason, TaskState
from tests.unit.core_fold import JOB, Fold, at, every, fired, skipped, spec

# --- every --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("interval", "anchor", "after", "expected"),
    [
        (300, None, at(minutes=1), at(minutes=5)),  # aligned on the epoch
        (300, None, at(minutes=5), at(minutes=10)),  # strictly after
        (300, at(seconds=7), at(), at(seconds=7)),  # the anchor sets the phase
        (300, at(days=3, seconds=7), at(), at(seconds=7)),  # ticks before the anchor exist
        (90, None, at(seconds=-1), at()),  # 12:00 is a multiple of 90 s
        (3600, at(minutes=30), at(minutes=31), at(minutes=90)),
    ],
)
def test_every_ticks_at_anchor_plus_multiples_of_the_interval(
    interval: int, anchor: datetime | None, after: datetime, expected: datetime
) -> None:
    assert every_tick(timedelta(seconds=interval), anchor, after) == expected
    assert next_tick(every(interval, anchor_at=anchor), after) == expected


def test_every_job_fires_each_interval() -> None:
    f = Fold()
    f.send(cmd.RegisterJob(spec=spec(every(120))), at(seconds=1))
    assert f.live().next_fire_at == at(minutes=2)
    for minute in (2, 4, 6):
        f.send(cmd.Tick(), at(minutes=minute, seconds=0.5))
    assert fired(f.events) == [at(minutes=2), at(minutes=4), at(minutes=6)]


@pytest.mark.parametrize(
    ("schedule", "field"),
    [
        (Schedule(ScheduleKind.EVERY), "schedule.interval_s"),
        (every(0.5), "schedule.interval_s"),
        (every(60, start_at=at(hours=1), end_at=at()), "schedule.end_at"),
        (every(60, max_runs=0), "schedule.max_runs"),
        (every(60, misfire_grace=timedelta(0)), "schedule.misfire_grace_s"),
        (Schedule(ScheduleKind.ONCE, run_at=at(), start_at=at(hours=1)), "schedule.run_at"),
        (every(60, exclusions=(Exclusion(),)), "schedule.exclusions[0]"),
        (
            every(60, exclusions=(Exclusion(start_date="2024-13-01"),)),
            "schedule.exclusions[0].start_date",
        ),
        (
            every(60, exclusions=(Exclusion(start_date="2024-06-02", end_date="2024-06-01"),)),
            "schedule.exclusions[0].end_date",
        ),
        (
            every(60, exclusions=(Exclusion(weekdays=("monday",)),)),
            "schedule.exclusions[0].weekdays",
        ),
        (
            every(60, exclusions=(Exclusion(start_time="25:00"),)),
            "schedule.exclusions[0].start_time",
        ),
    ],
)
def test_invalid_schedules_are_refused_naming_the_field(schedule: Schedule, field: str) -> None:
    with pytest.raises(InvalidDefinition) as info:
        validate_spec(spec(schedule))
    assert info.value.field == field


def test_negative_jitter_is_refused() -> None:
    with pytest.raises(InvalidDefinition) as info:
        validate_spec(spec(every(60), jitter=timedelta(seconds=-1)))
    assert info.value.field == "jitter_s"


# --- start_at / end_at / max_runs -----------------------------------------------------------------


def test_start_at_makes_the_first_tick_the_first_at_or_after_it() -> None:
    f = Fold()
    f.send(cmd.RegisterJob(spec=spec(every(60, start_at=at(minutes=10)))), at())
    assert f.live().next_fire_at == at(minutes=10)
    f.send(cmd.RegisterJob(spec=spec(every(60, start_at=at(minutes=10, seconds=1)))), at())
    # a second registration of a live job is refused: the cursor is unchanged
    assert f.live().next_fire_at == at(minutes=10)


def test_end_at_skips_the_first_tick_past_it_once_and_ends_the_schedule() -> None:
    f = Fold()
    f.send(cmd.RegisterJob(spec=spec(every(60, end_at=at(minutes=2)))), at())
    for minute in (1, 2, 3, 4, 10):
        f.send(cmd.Tick(), at(minutes=minute))
    assert fired(f.events) == [at(minutes=1), at(minutes=2)]
    assert skipped(f.events) == [(at(minutes=3), SkipReason.END_AT)]
    assert f.live().next_fire_at is None
    assert f.live().next_deadline() is None or f.live().runs


def test_max_runs_counts_down_and_the_next_tick_is_skipped_once() -> None:
    f = Fold()
    events = f.send(cmd.RegisterJob(spec=spec(every(60, max_runs=2))), at())
    assert events[0] == ev.JobRegistered(
        spec=spec(every(60, max_runs=2)), next_fire_at=at(minutes=1), runs_remaining=2
    )
    f.send(cmd.TriggerJob(), at(seconds=30))  # manual runs do not count
    for minute in (1, 2, 3, 4):
        f.send(cmd.Tick(), at(minutes=minute))
    runs = [e for e in f.of(ev.RunScheduled) if e.trigger is not RunTrigger.MANUAL]
    assert [(e.scheduled_for, e.runs_remaining) for e in runs] == [
        (at(minutes=1), 1),
        (at(minutes=2), 0),
    ]
    assert skipped(f.events) == [(at(minutes=3), SkipReason.MAX_RUNS)]
    assert f.live().next_fire_at is None and f.live().runs_remaining() == 0


def test_max_runs_catches_up_no_further_than_the_limit_in_one_fold() -> None:
    f = Fold()
    f.send(cmd.RegisterJob(spec=spec(every(60, max_runs=2, catchup=CatchupPolicy.ALL))), at())
    events = f.send(cmd.Tick(), at(minutes=5, seconds=30))
    assert fired(events) == [at(minutes=1), at(minutes=2)]
    assert skipped(events) == [(at(minutes=3), SkipReason.MAX_RUNS)]


def test_raising_max_runs_by_an_edit_restarts_an_ended_schedule() -> None:
    f = Fold()
    f.send(cmd.RegisterJob(spec=spec(every(60, max_runs=1))), at())
    f.send(cmd.Tick(), at(minutes=1))
    f.send(cmd.Tick(), at(minutes=2))
    assert f.live().next_fire_at is None
    events = f.send(cmd.UpdateJob(spec=spec(every(60, max_runs=3))), at(minutes=2, seconds=10))
    assert events == [
        ev.JobRedefined(
            spec=spec(every(60, max_runs=3)), next_fire_at=at(minutes=3), runs_remaining=2
        )
    ]


# --- exclusions ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("window", "local", "excluded"),
    [
        (Exclusion(start_date="2024-12-24", end_date="2024-12-26"), "2024-12-25T10:00", True),
        (Exclusion(start_date="2024-12-24", end_date="2024-12-26"), "2024-12-27T00:00", False),
        (Exclusion(start_date="2024-12-24"), "2024-12-24T23:59", True),
        (Exclusion(start_date="2024-12-24"), "2024-12-25T00:00", False),
        (Exclusion(weekdays=("sat", "sun")), "2024-06-15T12:00", True),  # a Saturday
        (Exclusion(weekdays=("sat", "sun")), "2024-06-14T12:00", False),
        (
            Exclusion(weekdays=("mon",), start_time="09:00", end_time="17:00"),
            "2024-06-10T09:00",
            True,
        ),
        (
            Exclusion(weekdays=("mon",), start_time="09:00", end_time="17:00"),
            "2024-06-10T17:00",
            False,
        ),
        (
            Exclusion(weekdays=("mon",), start_time="09:00", end_time="17:00"),
            "2024-06-11T10:00",
            False,
        ),
        (Exclusion(start_time="22:00", end_time="06:00"), "2024-06-10T23:30", True),  # wraps
        (Exclusion(start_time="22:00", end_time="06:00"), "2024-06-10T05:59", True),
        (Exclusion(start_time="22:00", end_time="06:00"), "2024-06-10T06:00", False),
    ],
)
def test_exclusion_windows_are_read_in_the_schedule_zone(
    window: Exclusion, local: str, excluded: bool
) -> None:
    sched = every(60, timezone="Europe/Berlin", exclusions=(window,))
    validate_spec(spec(sched))
    tick = datetime.fromisoformat(local).replace(
        tzinfo=__import__("zoneinfo").ZoneInfo("Europe/Berlin")
    )
    assert is_excluded(sched, tick) is excluded


def test_excluded_ticks_are_skipped_with_an_event() -> None:
    window = Exclusion(start_time="12:01", end_time="12:03")  # UTC: 12:01 and 12:02
    f = Fold()
    f.send(cmd.RegisterJob(spec=spec(every(60, exclusions=(window,)))), at())
    for minute in (1, 2, 3):
        f.send(cmd.Tick(), at(minutes=minute))
    assert fired(f.events) == [at(minutes=3)]
    assert skipped(f.events) == [
        (at(minutes=1), SkipReason.EXCLUDED),
        (at(minutes=2), SkipReason.EXCLUDED),
    ]


def test_latest_catchup_fires_the_latest_tick_that_is_not_excluded() -> None:
    window = Exclusion(start_time="12:04", end_time="12:08")
    f = Fold()
    f.send(cmd.RegisterJob(spec=spec(every(60, exclusions=(window,)))), at())
    events = f.send(cmd.Tick(), at(minutes=7, seconds=30))  # 12:07 is on time but excluded
    assert fired(events) == [at(minutes=3)]
    assert dict(skipped(events))[at(minutes=4)] is SkipReason.EXCLUDED
    assert dict(skipped(events))[at(minutes=2)] is SkipReason.CATCHUP_POLICY


# --- misfire grace ------------------------------------------------------------------------------


def test_misfire_grace_decides_which_ticks_count_as_missed() -> None:
    f = Fold()
    f.send(
        cmd.RegisterJob(
            spec=spec(every(10, misfire_grace=timedelta(seconds=2), catchup=CatchupPolicy.NONE))
        ),
        at(),
    )
    events = f.send(cmd.Tick(), at(seconds=31))
    assert fired(events) == [at(seconds=30)]
    assert skipped(events) == [
        (at(seconds=10), SkipReason.CATCHUP_POLICY),
        (at(seconds=20), SkipReason.CATCHUP_POLICY),
    ]


# --- jitter -------------------------------------------------------------------------------------


def test_jitter_delays_the_release_deterministically_and_keeps_the_nominal_tick() -> None:
    jittered = spec(every(60), jitter=timedelta(seconds=30))
    f = Fold()
    f.send(cmd.RegisterJob(spec=jittered), at())
    events = f.send(cmd.Tick(), at(minutes=1))
    run = events[0]
    assert isinstance(run, ev.RunScheduled) and run.scheduled_for == at(minutes=1)
    assert run.release_at is not None
    assert at(minutes=1) < run.release_at < at(minutes=1, seconds=30)
    assert run.release_at == release_at(jittered, JOB, at(minutes=1), at(minutes=1))
    assert [type(e) for e in events] == [ev.RunScheduled]  # no TaskReady yet
    assert f.live().runs[0].tasks[0].state is TaskState.DELAYED
    assert f.live().next_deadline() == run.release_at
    assert f.send(cmd.Tick(), run.release_at - timedelta(milliseconds=1)) == []
    released = f.send(cmd.Tick(), run.release_at)
    assert released == [
        ev.TaskReady(run_id=run.run_id, task="main", attempt=1, scheduled_for=at(minutes=1))
    ]


def test_jitter_offsets_spread_over_the_range_and_differ_per_job() -> None:
    jittered = spec(every(60), jitter=timedelta(seconds=60))
    offsets = [release_at(jittered, JOB, at(minutes=m), at(minutes=m)) for m in range(200)]
    seconds = [(o - at(minutes=m)).total_seconds() for m, o in enumerate(offsets) if o]
    assert len(seconds) >= 199 and 0 <= min(seconds) < 5 and 55 < max(seconds) < 60
    other = release_at(jittered, "other-job", at(minutes=1), at(minutes=1))
    assert other != offsets[1]


def test_a_late_run_is_released_at_once_whatever_its_jitter() -> None:
    f = Fold()
    f.send(cmd.RegisterJob(spec=spec(every(60), jitter=timedelta(seconds=10))), at())
    events = f.send(cmd.Tick(), at(minutes=1, seconds=10))
    assert [type(e) for e in events] == [ev.RunScheduled, ev.TaskReady]
    assert events[0].release_at is None  # type: ignore[union-attr]


# --- resume with or without catch-up ---------------------------------------------------------


@pytest.mark.parametrize(
    ("catchup", "policy", "expected_fired", "expected_cursor"),
    [
        (False, CatchupPolicy.ALL, [], at(minutes=11)),
        (True, CatchupPolicy.ALL, [at(minutes=m) for m in range(2, 11)], at(minutes=11)),
        (True, CatchupPolicy.LATEST, [at(minutes=10)], at(minutes=11)),
        (True, CatchupPolicy.NONE, [], at(minutes=11)),
    ],
)
def test_resume_fires_the_paused_over_ticks_only_when_asked(
    catchup: bool, policy: CatchupPolicy, expected_fired: list[datetime], expected_cursor: datetime
) -> None:
    f = Fold()
    f.send(
        cmd.RegisterJob(spec=spec(every(60, catchup=policy, misfire_grace=timedelta(seconds=5)))),
        at(),
    )
    f.send(cmd.Tick(), at(minutes=1))
    f.send(cmd.PauseJob(), at(minutes=1, seconds=10))
    f.send(cmd.Tick(), at(minutes=6))
    resumed = f.send(cmd.ResumeJob(catchup=catchup), at(minutes=10, seconds=30))
    assert resumed[0] == ev.JobResumed(
        next_fire_at=at(minutes=2) if catchup else at(minutes=11), catchup=catchup
    )
    assert fired(resumed) == expected_fired
    unfired = [t for t, _ in skipped(resumed)]
    assert sorted(unfired + expected_fired) == (
        [at(minutes=m) for m in range(2, 11)] if catchup else []
    )
    assert f.live().next_fire_at == expected_cursor
    assert all(e.trigger is RunTrigger.CATCHUP for e in f.of(ev.RunScheduled)[1:])


def test_resume_with_catchup_respects_the_catchup_window() -> None:
    f = Fold()
    sched = every(60, catchup=CatchupPolicy.ALL, catchup_window=timedelta(minutes=3))
    f.send(cmd.RegisterJob(spec=spec(sched)), at())
    f.send(cmd.PauseJob(), at(seconds=10))
    resumed = f.send(cmd.ResumeJob(catchup=True), at(minutes=10, seconds=30))
    assert fired(resumed) == [at(minutes=8), at(minutes=9), at(minutes=10)]
    assert {r for _, r in skipped(resumed)} == {SkipReason.CATCHUP_WINDOW}


def test_resume_is_replayed_identically() -> None:
    f = Fold()
    f.send(cmd.RegisterJob(spec=spec(every(60, catchup=CatchupPolicy.ALL))), at())
    f.send(cmd.PauseJob(), at(seconds=10))
    f.send(cmd.ResumeJob(catchup=True), at(minutes=4))
    again = Fold()
    again.send(cmd.RegisterJob(spec=spec(every(60, catchup=CatchupPolicy.ALL))), at())
    again.send(cmd.PauseJob(), at(seconds=10))
    again.send(cmd.ResumeJob(catchup=True), at(minutes=4))
    assert (again.state, again.events) == (f.state, f.events)
    assert replace(f.live(), clock=at()) is not None
    assert run_id_for_tick(JOB, at(minutes=1)) in {e.run_id for e in f.of(ev.RunScheduled)}
