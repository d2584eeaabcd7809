"""Job after job in the fold, table-driven: given events / when UpstreamRunEnded / then events.

Every branch of ``cronlog.after.upstream_run_ended``, plus validation of ``after`` schedules.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.decide import handle
from cronlog.errors import InvalidDefinition
from cronlog.ids import run_id_for_after
from cronlog.job import JobState
from cronlog.model import AfterOn, Exclusion, JobSpec, Schedule, ScheduleKind, main_task
from cronlog.validation import validate_spec
from cronlog.vocabulary import RejectReason, RunTrigger, SkipReason, UpstreamOutcome
from tests import builders

JOB, UP = "load", "extract"
T0 = datetime(2024, 6, 10, 12, 0, tzinfo=UTC)
UP_TICK = T0 - timedelta(minutes=5)
NOW = T0 + timedelta(seconds=30)


def after(upstream: str = UP, on: AfterOn = AfterOn.SUCCESS, **kw: object) -> JobSpec:
    sched = Schedule(ScheduleKind.AFTER, after_job_id=upstream, after_on=on, **kw)  # type: ignore[arg-type]
    return JobSpec("load after extract", sched, main_task(("true",)))


def given(*events: ev.Event) -> JobState:
    return builders.given(*events, clock=T0, job_id=JOB)


def ended(
    outcome: UpstreamOutcome = UpstreamOutcome.SUCCEEDED,
    *,
    run: str = "rup1",
    upstream: str = UP,
    scheduled_for: datetime | None = UP_TICK,
) -> cmd.UpstreamRunEnded:
    return cmd.UpstreamRunEnded(
        upstream_job_id=upstream,
        upstream_run_id=run,
        upstream_scheduled_for=scheduled_for,
        outcome=outcome,
    )


def when(
    state: JobState | None, command: cmd.Command, key: str | None = None
) -> tuple[JobState | None, list[ev.Event]]:
    up_run = getattr(command, "upstream_run_id", "x")
    return handle(
        state,
        cmd.Envelope(idem_key=key or f"after:{JOB}:{up_run}", job_id=JOB, command=command),
        NOW,
    )


def started(
    run: str = "rup1",
    scheduled_for: datetime = UP_TICK,
    incarnation: int = 0,
    remaining: int | None = None,
) -> list[ev.Event]:
    run_id = run_id_for_after(JOB, run, incarnation)
    return [
        ev.RunScheduled(
            run_id=run_id,
            scheduled_for=scheduled_for,
            trigger=RunTrigger.AFTER,
            tasks=("main",),
            next_fire_at=None,
            runs_remaining=remaining,
            upstream_job_id=UP,
            upstream_run_id=run,
            ready=("main",),
        ),
        ev.TaskReady(run_id=run_id, task="main", attempt=1, scheduled_for=scheduled_for),
    ]


def test_an_upstream_success_starts_a_run_with_the_upstream_tick_and_ids() -> None:
    state, events = when(given(ev.JobRegistered(spec=after(), next_fire_at=None)), ended())
    assert events == started()
    assert state is not None and state.runs[0].trigger is RunTrigger.AFTER
    assert state.next_fire_at is None


@pytest.mark.parametrize("outcome", [UpstreamOutcome.FAILED, UpstreamOutcome.CANCELLED])
def test_a_failed_or_cancelled_upstream_run_starts_nothing_under_on_success(
    outcome: UpstreamOutcome,
) -> None:
    _, events = when(given(ev.JobRegistered(spec=after(), next_fire_at=None)), ended(outcome))
    assert events == []


@pytest.mark.parametrize("outcome", list(UpstreamOutcome))
def test_every_upstream_end_starts_a_run_under_on_done(outcome: UpstreamOutcome) -> None:
    _, events = when(
        given(ev.JobRegistered(spec=after(on=AfterOn.DONE), next_fire_at=None)), ended(outcome)
    )
    assert events == started()


def test_an_unknown_upstream_tick_takes_the_folds_now() -> None:
    _, events = when(
        given(ev.JobRegistered(spec=after(), next_fire_at=None)), ended(scheduled_for=None)
    )
    assert events == started(scheduled_for=NOW)


def test_a_resent_command_whose_run_is_active_starts_nothing_even_under_another_key() -> None:
    state, _ = when(given(ev.JobRegistered(spec=after(), next_fire_at=None)), ended())
    same_key_state, events = when(state, ended())
    assert events == [] and same_key_state == state
    _, events = when(state, ended(), key="another-relay-key")
    assert events == []


def test_each_upstream_run_gets_its_own_run() -> None:
    state, _ = when(given(ev.JobRegistered(spec=after(), next_fire_at=None)), ended(run="rup1"))
    state, events = when(state, ended(run="rup2"))
    assert events == started(run="rup2")
    assert state is not None and len(state.runs) == 2


def test_a_paused_job_lets_upstream_runs_pass() -> None:
    _, events = when(
        given(ev.JobRegistered(spec=after(), next_fire_at=None), ev.JobPaused()), ended()
    )
    assert events == []


def test_another_upstream_is_ignored() -> None:
    _, events = when(
        given(ev.JobRegistered(spec=after(), next_fire_at=None)), ended(upstream="other")
    )
    assert events == []


def test_a_job_that_is_no_longer_after_ignores_its_old_upstream() -> None:
    manual = JobSpec("now manual", Schedule(ScheduleKind.MANUAL), main_task(("true",)))
    _, events = when(
        given(
            ev.JobRegistered(spec=after(), next_fire_at=None),
            ev.JobRedefined(spec=manual, next_fire_at=None),
        ),
        ended(),
    )
    assert events == []


def test_a_deleted_job_rejects_it() -> None:
    _, events = when(
        given(ev.JobRegistered(spec=after(), next_fire_at=None), ev.JobDeleted()), ended()
    )
    assert [type(e) for e in events] == [ev.CommandRejected]
    assert isinstance(events[0], ev.CommandRejected)
    assert events[0].reason is RejectReason.JOB_DELETED


def test_an_unknown_job_rejects_it() -> None:
    _, events = when(None, ended())
    assert isinstance(events[0], ev.CommandRejected)
    assert events[0].reason is RejectReason.UNKNOWN_JOB


def test_max_active_runs_reached_queues_the_run_with_the_upstream_tick_and_ids() -> None:
    state, _ = when(
        given(ev.JobRegistered(spec=replace(after(), max_active_runs=1), next_fire_at=None)),
        ended(),
    )
    state, events = when(state, ended(run="rup2"))
    assert events == [
        ev.RunQueued(
            run_id=run_id_for_after(JOB, "rup2"),
            scheduled_for=UP_TICK,
            trigger=RunTrigger.AFTER,
            next_fire_at=None,
            upstream_job_id=UP,
            upstream_run_id="rup2",
        )
    ]
    _, again = when(state, ended(run="rup2"))  # a re-sent end: the run is queued already
    assert again == []


def test_max_runs_counts_after_runs_and_then_skips() -> None:
    state, events = when(
        given(ev.JobRegistered(spec=after(max_runs=1), next_fire_at=None, runs_remaining=1)),
        ended(),
    )
    assert events == started(remaining=0)
    _, events = when(state, ended(run="rup2"))
    assert events == [
        ev.TickSkipped(scheduled_for=UP_TICK, reason=SkipReason.MAX_RUNS, next_fire_at=None)
    ]


def test_a_re_registered_job_gets_new_run_ids() -> None:
    state = given(
        ev.JobRegistered(spec=after(), next_fire_at=None),
        ev.JobDeleted(),
        ev.JobRegistered(spec=after(), next_fire_at=None),
    )
    _, events = when(state, ended())
    assert events == started(incarnation=1)


def test_registering_a_job_after_itself_is_rejected() -> None:
    _, events = when(None, cmd.RegisterJob(spec=after(upstream=JOB)), key="reg")
    assert isinstance(events[0], ev.CommandRejected)
    assert events[0].reason is RejectReason.INVALID_DEFINITION
    assert "schedule.job_id" in events[0].detail


def test_registering_an_after_job_has_no_first_tick() -> None:
    _, events = when(None, cmd.RegisterJob(spec=after()), key="reg")
    assert events == [ev.JobRegistered(spec=after(), next_fire_at=None, runs_remaining=None)]


@pytest.mark.parametrize(
    ("schedule", "field"),
    [
        (Schedule(ScheduleKind.AFTER), "schedule.job_id"),
        (Schedule(ScheduleKind.AFTER, after_job_id="bad id/"), "schedule.job_id"),
        (Schedule(ScheduleKind.AFTER, after_job_id=UP, start_at=T0), "schedule.start_at"),
        (Schedule(ScheduleKind.AFTER, after_job_id=UP, end_at=T0), "schedule.end_at"),
        (
            Schedule(
                ScheduleKind.AFTER, after_job_id=UP, exclusions=(Exclusion(weekdays=("sat",)),)
            ),
            "schedule.exclusions",
        ),
    ],
)
def test_invalid_after_schedules_name_the_field(schedule: Schedule, field: str) -> None:
    with pytest.raises(InvalidDefinition) as exc:
        validate_spec(JobSpec("x", schedule, main_task(("true",))), job_id=JOB)
    assert exc.value.field == field


def test_a_tick_does_nothing_for_an_after_job() -> None:
    _, events = when(
        given(ev.JobRegistered(spec=after(), next_fire_at=None)), cmd.Tick(), key="tick"
    )
    assert events == []
