"""The job aggregate, table-driven: given events / when command / then events.

``given`` folds events with ``evolve`` (what replay does); ``when`` runs one command through
``handle`` (dedupe + decide + evolve + clock), exactly as the adapter does; both, and the
events and commands they take, are in ``tests/builders.py``.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.decide import handle
from cronlog.firing import MAX_TICKS_PER_FOLD, ON_TIME_GRACE
from cronlog.ids import command_digest, idem_marker, run_id_for_tick, run_id_for_trigger
from cronlog.job import MAX_APPLIED_MARKERS, JobState
from cronlog.model import CatchupPolicy, JobSpec, RetryPolicy, Schedule, ScheduleKind, main_task
from cronlog.retry import next_attempt_at
from cronlog.vocabulary import (
    FailureKind,
    JobStatus,
    RejectReason,
    RunTrigger,
    SkipReason,
    TaskState,
)
from tests.builders import (
    CLAIMED,
    CLAIMED_RETRYING,
    DAG,
    FINISHED,
    JOB,
    LEASE_END,
    READY,
    RETRYING,
    RUN,
    SPEC,
    STARTED,
    T0,
    TICK,
    at,
    claim,
    claimed,
    complete,
    completed,
    cron,
    fold,
    given,
    only_task,
    ready,
    registered,
    rejected,
    renew,
    scheduled,
    succeeded,
    when,
)

# --- RegisterJob ------------------------------------------------------------------------------


def test_register_cron_job_sets_cursor_to_first_tick_after_now() -> None:
    state, events = when(None, cmd.RegisterJob(spec=SPEC), at(minutes=1))
    assert events == [ev.JobRegistered(spec=SPEC, next_fire_at=TICK)]
    digest = command_digest(cmd.RegisterJob(spec=SPEC))
    assert state == JobState(
        JOB, SPEC, JobStatus.ACTIVE, at(minutes=1), TICK, (), (idem_marker("cmd-1"),), (digest,)
    )


def test_register_exactly_on_a_tick_sets_cursor_to_the_following_tick() -> None:
    _, events = when(None, cmd.RegisterJob(spec=SPEC), T0)
    assert events == [ev.JobRegistered(spec=SPEC, next_fire_at=TICK)]


@pytest.mark.parametrize("run_at", [at(hours=1), at(hours=-1)], ids=["future", "past"])
def test_register_once_job_sets_cursor_to_run_at(run_at: datetime) -> None:
    spec = replace(SPEC, schedule=Schedule(ScheduleKind.ONCE, run_at=run_at))
    state, events = when(None, cmd.RegisterJob(spec=spec), T0)
    assert events == [ev.JobRegistered(spec=spec, next_fire_at=run_at)]
    assert state is not None and state.next_fire_at == run_at


def test_register_manual_job_has_no_cursor() -> None:
    spec = replace(SPEC, schedule=Schedule(ScheduleKind.MANUAL))
    state, events = when(None, cmd.RegisterJob(spec=spec), T0)
    assert events == [ev.JobRegistered(spec=spec, next_fire_at=None)]
    assert state is not None and state.next_deadline() is None


def test_register_of_a_live_job_is_rejected_job_exists() -> None:
    command = cmd.RegisterJob(spec=RETRYING)
    state, events = when(given(registered()), command, at(minutes=1))
    assert events == [
        rejected(command, RejectReason.JOB_EXISTS, "job 'job-1' is already registered")
    ]
    assert state is not None and state.spec == SPEC


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (replace(SPEC, schedule=cron("61 * * * *")), "schedule.expression: cron field minute"),
        (replace(SPEC, schedule=cron("* * * * *", timezone="Mars/Olympus")), "schedule.timezone"),
        (replace(SPEC, schedule=Schedule(ScheduleKind.ONCE)), "schedule.run_at"),
        (replace(SPEC, name=""), "name"),
        (replace(SPEC, task_specs=main_task(())), "tasks[0].command"),
        (replace(SPEC, timeout=timedelta(0)), "timeout_s"),
        (replace(SPEC, lease_ttl=timedelta(milliseconds=500)), "lease_ttl_s"),
        (replace(SPEC, retry_policy=RetryPolicy(max_attempts=0)), "retry_policy.max_attempts"),
        (
            replace(SPEC, retry_policy=RetryPolicy(backoff_coefficient=0.5)),
            "retry_policy.backoff_coefficient",
        ),
        (replace(SPEC, task_specs=main_task(("x",)) * 2), "tasks[1].name"),
        (replace(SPEC, task_specs=()), "tasks"),
        # a RegisterJob produced straight onto Kafka past the API's checks (invariant 7)
        (replace(SPEC, tags=("Critical",)), "tags[0]"),
        (replace(SPEC, tags=("ok", "ok")), "tags[1]"),
        (replace(SPEC, tags=tuple(f"t{i}" for i in range(17))), "tags"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_register_invalid_definition_is_rejected_naming_the_field(
    spec: JobSpec, field: str
) -> None:
    state, events = when(None, cmd.RegisterJob(spec=spec), T0)
    assert len(events) == 1
    event = events[0]
    assert isinstance(event, ev.CommandRejected)
    assert (event.command, event.reason) == ("RegisterJob", RejectReason.INVALID_DEFINITION)
    assert event.detail.startswith(field)
    assert state is None


def test_register_after_delete_starts_the_job_again() -> None:
    state, events = when(
        given(registered(), ev.JobDeleted()), cmd.RegisterJob(spec=SPEC), at(minutes=7)
    )
    assert events == [ev.JobRegistered(spec=SPEC, next_fire_at=at(minutes=10))]
    assert state is not None and state.status is JobStatus.ACTIVE


@pytest.mark.parametrize(
    "command",
    [
        cmd.UpdateJob(spec=SPEC),
        cmd.PauseJob(),
        cmd.ResumeJob(),
        cmd.DeleteJob(),
        cmd.TriggerJob(),
        cmd.Tick(),
        claim(),
        renew(),
        complete(),
    ],
    ids=lambda c: type(c).__name__,
)
def test_command_for_an_unregistered_job_is_rejected_unknown_job(command: cmd.Command) -> None:
    state, events = when(None, command, T0)
    assert events == [rejected(command, RejectReason.UNKNOWN_JOB, "job 'job-1' is not registered")]
    assert state is None


# --- UpdateJob --------------------------------------------------------------------------------


def test_update_with_the_same_schedule_keeps_the_cursor() -> None:
    new = replace(SPEC, task_specs=main_task(("echo", "bye")))
    state, events = when(given(registered()), cmd.UpdateJob(spec=new), at(minutes=3))
    assert events == [ev.JobRedefined(spec=new, next_fire_at=TICK)]
    assert state is not None and state.spec == new


def test_update_with_a_new_schedule_recomputes_the_cursor_from_now() -> None:
    new = replace(SPEC, schedule=cron("0 * * * *"))
    _, events = when(given(registered()), cmd.UpdateJob(spec=new), at(minutes=3))
    assert events == [ev.JobRedefined(spec=new, next_fire_at=at(hours=1))]


def test_update_with_an_invalid_definition_is_rejected() -> None:
    command = cmd.UpdateJob(spec=replace(SPEC, schedule=cron("* 25 * * *")))
    state, events = when(given(registered()), command, at(minutes=3))
    assert events == [
        rejected(
            command,
            RejectReason.INVALID_DEFINITION,
            "schedule.expression: cron field hour '25' is not valid",
        )
    ]
    assert state is not None and state.spec == SPEC


# --- PauseJob / ResumeJob -----------------------------------------------------------------------


def test_pause_of_an_active_job_emits_job_paused() -> None:
    state, events = when(given(registered()), cmd.PauseJob(), at(minutes=1))
    assert events == [ev.JobPaused()]
    assert state is not None and state.status is JobStatus.PAUSED


def test_pause_of_a_paused_job_is_rejected_already_in_state() -> None:
    _, events = when(given(registered(), ev.JobPaused()), cmd.PauseJob(), at(minutes=1))
    assert events == [
        rejected(cmd.PauseJob(), RejectReason.ALREADY_IN_STATE, "job is already paused")
    ]


def test_resume_of_an_active_job_is_rejected_already_in_state() -> None:
    _, events = when(given(registered()), cmd.ResumeJob(), at(minutes=1))
    assert events == [rejected(cmd.ResumeJob(), RejectReason.ALREADY_IN_STATE, "job is not paused")]


def test_resume_sets_the_cursor_to_the_first_tick_after_now() -> None:
    state, events = when(given(registered(), ev.JobPaused()), cmd.ResumeJob(), at(minutes=23))
    assert events == [ev.JobResumed(next_fire_at=at(minutes=25))]
    assert state is not None and state.status is JobStatus.ACTIVE


def test_tick_while_paused_fires_nothing() -> None:
    state, events = when(given(registered(), ev.JobPaused()), cmd.Tick(), at(minutes=30))
    assert events == []
    assert state is not None and state.next_fire_at == TICK


def test_resume_does_not_fire_ticks_that_passed_while_paused() -> None:
    state = fold(
        given(registered()),
        (cmd.PauseJob(), at(minutes=1)),
        (cmd.Tick(), TICK),
        (cmd.Tick(), at(minutes=10)),
        (cmd.ResumeJob(), at(minutes=12)),
    )
    state, events = when(state, cmd.Tick(), at(minutes=12, seconds=1), key="t1")
    assert events == []  # neither 12:05 nor 12:10: not owed, not even as TickSkipped
    _, events = when(state, cmd.Tick(), at(minutes=15), key="t2")
    assert events == [scheduled(at(minutes=15)), ready(at(minutes=15))]


def test_run_started_before_pause_can_still_be_claimed() -> None:
    state = given(registered(), scheduled(), ready(), ev.JobPaused(), clock=TICK)
    _, events = when(state, claim(), TICK)
    assert events == [claimed()]


# --- DeleteJob ----------------------------------------------------------------------------------


def test_delete_emits_job_deleted_and_stops_firing() -> None:
    state, events = when(given(registered()), cmd.DeleteJob(), at(minutes=1))
    assert events == [ev.JobDeleted()]
    assert state is not None
    assert (state.status, state.next_fire_at) == (JobStatus.DELETED, None)
    _, events = when(state, cmd.Tick(), at(hours=1), key="tick")
    assert events == []


@pytest.mark.parametrize(
    "command",
    [cmd.UpdateJob(spec=SPEC), cmd.PauseJob(), cmd.ResumeJob(), cmd.DeleteJob(), cmd.TriggerJob()],
    ids=lambda c: type(c).__name__,
)
def test_command_after_delete_is_rejected_job_deleted(command: cmd.Command) -> None:
    state = given(registered(), scheduled(), ready(), ev.JobDeleted(), clock=TICK)
    _, events = when(state, command, TICK)
    assert events == [rejected(command, RejectReason.JOB_DELETED, "job 'job-1' was deleted")]


def test_lease_holder_can_still_complete_after_delete() -> None:
    state = given(registered(), scheduled(), ready(), claimed(), ev.JobDeleted(), clock=TICK)
    _, events = when(state, complete(), FINISHED)
    assert events == [
        succeeded(),
        ev.RunSucceeded(run_id=RUN, scheduled_for=TICK, tenant="default"),
    ]


# --- TriggerJob ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "events_before", [[registered()], [registered(), ev.JobPaused()]], ids=["active", "paused"]
)
def test_trigger_starts_a_manual_run_now_without_moving_the_cursor(
    events_before: list[ev.Event],
) -> None:
    state, events = when(given(*events_before), cmd.TriggerJob(), at(minutes=2), key="trig-1")
    run_id = run_id_for_trigger(JOB, "trig-1")
    assert events == [
        ev.RunScheduled(
            run_id=run_id,
            scheduled_for=at(minutes=2),
            trigger=RunTrigger.MANUAL,
            tasks=("main",),
            next_fire_at=TICK,
            ready=("main",),
        ),
        ev.TaskReady(run_id=run_id, task="main", attempt=1, scheduled_for=at(minutes=2)),
    ]
    assert state is not None
    assert state.next_fire_at == TICK
    assert [r.run_id for r in state.runs] == [run_id]


def test_triggers_with_different_idem_keys_make_different_runs() -> None:
    state, first = when(given(registered()), cmd.TriggerJob(), at(minutes=2), key="a")
    _, second = when(state, cmd.TriggerJob(), at(minutes=2), key="b")
    assert isinstance(first[0], ev.RunScheduled) and isinstance(second[0], ev.RunScheduled)
    assert first[0].run_id != second[0].run_id


# --- Tick: firing -------------------------------------------------------------------------------


def test_tick_at_the_cursor_fires_the_tick() -> None:
    state, events = when(given(registered()), cmd.Tick(), TICK)
    assert events == [scheduled(TICK, at(minutes=10)), ready(TICK)]
    assert state is not None
    assert state.next_fire_at == at(minutes=10)
    assert [(r.run_id, r.scheduled_for, r.trigger) for r in state.runs] == [
        (RUN, TICK, RunTrigger.SCHEDULE)
    ]
    assert state.runs[0].tasks[0].state is TaskState.READY


def test_tick_before_the_cursor_fires_nothing() -> None:
    state, events = when(given(registered()), cmd.Tick(), TICK - timedelta(milliseconds=1))
    assert events == []
    assert state is not None and state.runs == ()


def test_second_tick_at_the_same_instant_fires_nothing() -> None:
    state, _ = when(given(registered()), cmd.Tick(), TICK, key="t1")
    again, events = when(state, cmd.Tick(), TICK, key="t2")
    assert events == []
    assert again == state


def test_duplicate_tick_envelope_at_the_same_instant_fires_nothing() -> None:
    state, _ = when(given(registered()), cmd.Tick(), TICK, key="tick")
    _, events = when(state, cmd.Tick(), TICK, key="tick")
    assert events == []


def test_tick_with_an_earlier_record_time_decides_at_the_fold_clock() -> None:
    # The clock never moves back: a late-stamped Tick is decided at the clock already reached.
    state, events = when(given(registered(), clock=at(minutes=6)), cmd.Tick(), at(minutes=1))
    assert events == [scheduled(TICK, at(minutes=10)), ready(TICK)]
    assert state is not None and state.clock == at(minutes=6)


def test_tick_fires_every_due_tick_folded_within_the_grace() -> None:
    spec = replace(SPEC, schedule=cron("*/10 * * * * *"))
    state = given(registered(spec, at(seconds=10)))
    _, events = when(state, cmd.Tick(), at(seconds=30))
    assert events == [
        scheduled(at(seconds=10), at(seconds=20), spec=spec),
        ready(at(seconds=10)),
        scheduled(at(seconds=20), at(seconds=30), spec=spec),
        ready(at(seconds=20)),
        scheduled(at(seconds=30), at(seconds=40), spec=spec),
        ready(at(seconds=30)),
    ]


def test_tick_makes_every_task_of_the_dag_ready() -> None:
    _, events = when(given(registered(DAG)), cmd.Tick(), TICK)
    assert events == [scheduled(TICK, spec=DAG), ready(TICK, "extract"), ready(TICK, "load")]


def test_once_job_fires_once() -> None:
    spec = replace(SPEC, schedule=Schedule(ScheduleKind.ONCE, run_at=TICK))
    state, events = when(given(registered(spec, TICK)), cmd.Tick(), TICK, key="t1")
    assert events == [
        ev.RunScheduled(
            run_id=RUN,
            scheduled_for=TICK,
            trigger=RunTrigger.SCHEDULE,
            tasks=("main",),
            next_fire_at=None,
            ready=("main",),
        ),
        ready(TICK),
    ]
    assert state is not None and state.next_fire_at is None
    _, events = when(state, cmd.Tick(), at(days=2), key="t2")
    assert events == []


@pytest.mark.parametrize(
    ("past_by", "trigger"),
    [(timedelta(seconds=30), RunTrigger.SCHEDULE), (timedelta(hours=3), RunTrigger.CATCHUP)],
    ids=["within-grace", "hours-late"],
)
def test_once_job_registered_after_run_at_fires_on_the_first_tick(
    past_by: timedelta, trigger: RunTrigger
) -> None:
    run_at = T0 - past_by
    spec = replace(SPEC, schedule=Schedule(ScheduleKind.ONCE, run_at=run_at))
    state = fold(None, (cmd.RegisterJob(spec=spec), T0))
    state, events = when(state, cmd.Tick(), T0, key="t1")
    run_id = run_id_for_tick(JOB, run_at)
    assert events == [
        ev.RunScheduled(
            run_id=run_id,
            scheduled_for=run_at,
            trigger=trigger,
            tasks=("main",),
            next_fire_at=None,
            ready=("main",),
        ),
        ev.TaskReady(run_id=run_id, task="main", attempt=1, scheduled_for=run_at),
    ]
    _, events = when(state, cmd.Tick(), at(minutes=1), key="t2")
    assert events == []


@pytest.mark.parametrize(
    ("past_by", "catchup"),
    [(timedelta(days=2), CatchupPolicy.LATEST), (timedelta(minutes=5), CatchupPolicy.NONE)],
    ids=["beyond-catchup-window", "catchup-none"],
)
def test_once_job_registered_after_run_at_fires_whatever_its_catchup(
    past_by: timedelta, catchup: CatchupPolicy
) -> None:
    run_at = T0 - past_by
    spec = replace(SPEC, schedule=Schedule(ScheduleKind.ONCE, run_at=run_at, catchup=catchup))
    state = fold(None, (cmd.RegisterJob(spec=spec), T0))
    _, events = when(state, cmd.Tick(), T0, key="t1")
    assert [type(e) for e in events] == [ev.RunScheduled, ev.TaskReady]


ONCE = replace(SPEC, schedule=Schedule(ScheduleKind.ONCE, run_at=TICK))


def test_once_job_does_not_fire_again_after_pause_and_resume() -> None:
    state = fold(
        None,
        (cmd.RegisterJob(spec=ONCE), T0),
        (cmd.Tick(), TICK),
        (cmd.PauseJob(), at(minutes=6)),
        (cmd.ResumeJob(), at(minutes=7)),
    )
    _, events = when(state, cmd.Tick(), at(minutes=8), key="after-resume")
    assert events == []


def test_once_job_does_not_fire_again_after_update() -> None:
    new = replace(ONCE, schedule=replace(ONCE.schedule, catchup=CatchupPolicy.ALL))
    state = fold(
        None,
        (cmd.RegisterJob(spec=ONCE), T0),
        (cmd.Tick(), TICK),
        (cmd.UpdateJob(spec=new), at(minutes=6)),
    )
    _, events = when(state, cmd.Tick(), at(minutes=8), key="after-update")
    assert events == []


def test_resume_inside_a_fall_back_hour_does_not_refire_ticks() -> None:
    zurich = replace(SPEC, schedule=cron("*/5 * * * *", timezone="Europe/Zurich"))
    start = datetime(2023, 10, 29, 0, 30, tzinfo=UTC)
    steps: list[tuple[cmd.Command, datetime]] = [(cmd.RegisterJob(spec=zurich), start)]
    steps += [(cmd.Tick(), start + timedelta(minutes=m)) for m in range(29)]
    steps += [
        (cmd.PauseJob(), start + timedelta(minutes=28)),
        (cmd.ResumeJob(), start + timedelta(minutes=60)),
    ]
    state = fold(None, *steps)
    _, events = when(state, cmd.Tick(), start + timedelta(minutes=61), key="after-resume")
    assert events == []


# --- Tick: catch-up after a long gap ----------------------------------------------------------

EVERY_10 = replace(SPEC, schedule=cron("*/10 * * * *"))
GAP_TICKS = [at(minutes=m) for m in (10, 20, 30, 40, 50, 60)]  # 12:10 .. 13:00
RUN_ON_TIME, RUN_LATE = "schedule", "catchup"
SKIP_POLICY, SKIP_WINDOW = SkipReason.CATCHUP_POLICY, SkipReason.CATCHUP_WINDOW


def gap_events(spec: JobSpec, outcomes: list[str | SkipReason]) -> list[ev.Event]:
    """Expected events for GAP_TICKS with the given outcome each; the cursor chains to 13:10."""
    expected: list[ev.Event] = []
    for i, (tick, outcome) in enumerate(zip(GAP_TICKS, outcomes, strict=True)):
        nxt = GAP_TICKS[i + 1] if i + 1 < len(GAP_TICKS) else at(minutes=70)
        if isinstance(outcome, SkipReason):
            expected.append(ev.TickSkipped(scheduled_for=tick, reason=outcome, next_fire_at=nxt))
        else:
            trigger = RunTrigger.SCHEDULE if outcome == RUN_ON_TIME else RunTrigger.CATCHUP
            expected += [scheduled(tick, nxt, trigger=trigger, spec=spec), ready(tick)]
    return expected


@pytest.mark.parametrize(
    ("catchup", "window", "now", "outcomes"),
    [
        # 13:00:05: 12:10..12:50 were missed (> ON_TIME_GRACE late); 13:00 is on time.
        (
            CatchupPolicy.ALL,
            timedelta(days=1),
            at(minutes=60, seconds=5),
            [RUN_LATE] * 5 + [RUN_ON_TIME],
        ),
        (
            CatchupPolicy.LATEST,
            timedelta(days=1),
            at(minutes=60, seconds=5),
            [SKIP_POLICY] * 5 + [RUN_ON_TIME],
        ),
        (
            CatchupPolicy.NONE,
            timedelta(days=1),
            at(minutes=60, seconds=5),
            [SKIP_POLICY] * 5 + [RUN_ON_TIME],
        ),
        # 13:05: every tick was missed.
        (CatchupPolicy.ALL, timedelta(days=1), at(minutes=65), [RUN_LATE] * 6),
        (CatchupPolicy.LATEST, timedelta(days=1), at(minutes=65), [SKIP_POLICY] * 5 + [RUN_LATE]),
        (CatchupPolicy.NONE, timedelta(days=1), at(minutes=65), [SKIP_POLICY] * 6),
        # 13:05 with a 30-minute window: 12:10, 12:20, 12:30 are older than the window.
        (
            CatchupPolicy.ALL,
            timedelta(minutes=30),
            at(minutes=65),
            [SKIP_WINDOW] * 3 + [RUN_LATE] * 3,
        ),
        (
            CatchupPolicy.LATEST,
            timedelta(minutes=30),
            at(minutes=65),
            [SKIP_WINDOW] * 3 + [SKIP_POLICY] * 2 + [RUN_LATE],
        ),
        (
            CatchupPolicy.NONE,
            timedelta(minutes=30),
            at(minutes=65),
            [SKIP_WINDOW] * 3 + [SKIP_POLICY] * 3,
        ),
    ],
    ids=[
        "all",
        "latest",
        "none",
        "all-none-on-time",
        "latest-none-on-time",
        "none-none-on-time",
        "all-window",
        "latest-window",
        "none-window",
    ],
)
def test_tick_after_a_long_gap_applies_the_catchup_policy(
    catchup: CatchupPolicy, window: timedelta, now: datetime, outcomes: list[str | SkipReason]
) -> None:
    spec = replace(
        EVERY_10, schedule=replace(EVERY_10.schedule, catchup=catchup, catchup_window=window)
    )
    state, events = when(given(registered(spec, at(minutes=10))), cmd.Tick(), now)
    assert events == gap_events(spec, outcomes)
    assert state is not None and state.next_fire_at == at(minutes=70)
    fired = [r.scheduled_for for r in state.runs]
    assert fired == [
        t for t, o in zip(GAP_TICKS, outcomes, strict=True) if not isinstance(o, SkipReason)
    ]


@pytest.mark.parametrize(
    ("late_by", "trigger"),
    [
        (ON_TIME_GRACE, RunTrigger.SCHEDULE),
        (ON_TIME_GRACE + timedelta(milliseconds=1), RunTrigger.CATCHUP),
    ],
    ids=["exactly-grace", "just-past-grace"],
)
def test_tick_folded_at_most_on_time_grace_late_is_on_time(
    late_by: timedelta, trigger: RunTrigger
) -> None:
    _, events = when(given(registered()), cmd.Tick(), TICK + late_by)
    assert events == [scheduled(TICK, trigger=trigger), ready(TICK)]


def test_catchup_decides_at_most_max_ticks_per_fold_per_tick() -> None:
    every_second = replace(SPEC, schedule=cron("* * * * * *"), max_active_runs=100)
    state: JobState | None = given(registered(every_second, at(seconds=1)))
    now = at(hours=1)  # 3600 ticks due: 12:00:01 .. 13:00:00
    batches: list[list[datetime]] = []
    runs: list[ev.RunScheduled] = []
    for i in range(5):
        state, events = when(state, cmd.Tick(), now, key=f"t{i}")
        batches.append(
            [e.scheduled_for for e in events if isinstance(e, ev.RunScheduled | ev.TickSkipped)]
        )
        runs += [e for e in events if isinstance(e, ev.RunScheduled)]
    assert [len(b) for b in batches] == [MAX_TICKS_PER_FOLD] * 3 + [600, 0]
    assert [t for b in batches for t in b] == [at(seconds=s) for s in range(1, 3601)]
    # latest: the missed ticks are skipped; the 61 folded within the grace (12:59:00 ..
    # 13:00:00) are on time and fire.
    assert [(r.scheduled_for, r.trigger) for r in runs] == [
        (at(minutes=59, seconds=s), RunTrigger.SCHEDULE) for s in range(61)
    ]


# --- idempotency ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "command"),
    [
        (None, cmd.RegisterJob(spec=SPEC)),
        (given(registered()), cmd.UpdateJob(spec=replace(SPEC, name="renamed"))),
        (given(registered()), cmd.PauseJob()),
        (given(registered(), ev.JobPaused()), cmd.ResumeJob()),
        (given(registered()), cmd.DeleteJob()),
        (given(registered()), cmd.TriggerJob()),
        (READY, claim()),
        (CLAIMED, renew()),
        (CLAIMED, complete()),
        (CLAIMED, complete(ok=False, exit_code=1)),
        (CLAIMED, complete(epoch=7)),  # a rejection is applied too: its repeat is a no-op
    ],
    ids=[
        "register",
        "update",
        "pause",
        "resume",
        "delete",
        "trigger",
        "claim",
        "renew",
        "complete",
        "complete-failed",
        "rejected-complete",
    ],
)
def test_repeated_idem_key_is_a_no_op(state: JobState | None, command: cmd.Command) -> None:
    first, events = when(state, command, at(minutes=5, seconds=10), key="dup")
    assert events != []
    again, events = when(first, command, at(minutes=5, seconds=20), key="dup")
    assert events == []
    assert again is first


def test_tick_idem_key_is_not_marked_applied() -> None:
    state, _ = when(given(registered()), cmd.Tick(), TICK, key="tick-1")
    assert state is not None and not state.has_applied("tick-1")


def test_applied_markers_keep_the_most_recent() -> None:
    state: JobState | None = given(registered())
    for i in range(MAX_APPLIED_MARKERS + 2):
        state, _ = when(state, cmd.PauseJob() if i % 2 == 0 else cmd.ResumeJob(), TICK, key=f"k{i}")
    assert state is not None
    assert state.applied == tuple(idem_marker(f"k{i}") for i in range(2, MAX_APPLIED_MARKERS + 2))


def test_duplicate_trigger_beyond_the_marker_window_is_a_no_op() -> None:
    state, _ = when(given(registered()), cmd.TriggerJob(), at(minutes=1), key="trigger")
    for i in range(MAX_APPLIED_MARKERS):
        state, _ = when(
            state, cmd.PauseJob() if i % 2 == 0 else cmd.ResumeJob(), at(minutes=2), key=f"k{i}"
        )
    _, events = when(state, cmd.TriggerJob(), at(minutes=3), key="trigger")
    assert events == []


# --- ClaimTask / RenewLease / CompleteTask -----------------------------------------------------


def test_claim_of_a_ready_task_grants_the_lease_at_epoch_1() -> None:
    state, events = when(READY, claim(), TICK)
    assert events == [claimed()]
    ti = only_task(state)
    assert ti == replace(
        ti, state=TaskState.CLAIMED, epoch=1, worker_id="w1", lease_expires_at=LEASE_END
    )


def test_claim_of_a_claimed_task_is_rejected_not_ready() -> None:
    command = claim("w2")
    state, events = when(CLAIMED, command, TICK)
    assert events == [
        rejected(command, RejectReason.NOT_READY, "task instance is claimed at attempt 1")
    ]
    assert only_task(state) == only_task(CLAIMED)


def test_claim_of_another_attempt_is_rejected_not_ready() -> None:
    command = claim(attempt=2)
    _, events = when(READY, command, TICK)
    assert events == [
        rejected(command, RejectReason.NOT_READY, "task instance is ready at attempt 1")
    ]


@pytest.mark.parametrize(
    "command",
    [
        claim(run_id="r-unknown"),
        claim(task="nope"),
        complete(task="nope"),
        cmd.RenewLease(run_id="r-unknown", task="main", attempt=1, epoch=1, worker_id="w1"),
    ],
    ids=["claim-unknown-run", "claim-unknown-task", "complete-unknown-task", "renew-unknown-run"],
)
def test_lease_command_for_an_unknown_task_instance_is_rejected(command: cmd.Command) -> None:
    _, events = when(CLAIMED, command, TICK)
    assert events == [
        rejected(
            command,
            RejectReason.UNKNOWN_TASK_INSTANCE,
            f"no active task instance {command.run_id}/{command.task}",
        )
    ]  # type: ignore[union-attr]


def test_renew_by_the_holder_extends_the_lease_from_now() -> None:
    state, events = when(CLAIMED, renew(), at(minutes=5, seconds=30))
    assert events == [
        ev.LeaseRenewed(
            run_id=RUN,
            task="main",
            attempt=1,
            epoch=1,
            worker_id="w1",
            lease_expires_at=at(minutes=6, seconds=30),
        )
    ]
    assert state is not None and state.next_deadline() == at(minutes=6, seconds=30)


@pytest.mark.parametrize("epoch", [0, 2])
def test_renew_with_a_stale_epoch_is_rejected(epoch: int) -> None:
    command = renew(epoch=epoch)
    state, events = when(CLAIMED, command, at(minutes=5, seconds=30))
    assert events == [
        rejected(
            command,
            RejectReason.STALE_EPOCH,
            f"epoch {epoch} is not the current lease (epoch 1, claimed)",
        )
    ]
    assert only_task(state) == only_task(CLAIMED)


def test_renew_by_a_non_holder_is_rejected() -> None:
    command = renew(worker="w2")
    _, events = when(CLAIMED, command, at(minutes=5, seconds=30))
    assert events == [rejected(command, RejectReason.NOT_HOLDER, "lease is held by w1")]


def test_complete_success_ends_the_run_succeeded() -> None:
    state, events = when(CLAIMED, complete(exit_code=None), FINISHED)
    assert events == [
        succeeded(),
        ev.RunSucceeded(run_id=RUN, scheduled_for=TICK, tenant="default"),
    ]
    assert state is not None and state.runs == ()


def test_complete_with_stale_epoch_is_rejected() -> None:
    command = complete(epoch=0)
    state, events = when(CLAIMED, command, FINISHED)
    assert events == [
        rejected(
            command, RejectReason.STALE_EPOCH, "epoch 0 is not the current lease (epoch 1, claimed)"
        )
    ]
    assert only_task(state) == only_task(CLAIMED)


def test_complete_by_a_non_holder_is_rejected() -> None:
    command = complete(worker="w2")
    state, events = when(CLAIMED, command, FINISHED)
    assert events == [rejected(command, RejectReason.NOT_HOLDER, "lease is held by w1")]
    assert only_task(state) == only_task(CLAIMED)


def test_complete_of_an_unclaimed_task_is_rejected_stale_epoch() -> None:
    command = complete(epoch=0)
    _, events = when(READY, command, FINISHED)
    assert events == [
        rejected(
            command, RejectReason.STALE_EPOCH, "epoch 0 is not the current lease (epoch 0, ready)"
        )
    ]


@pytest.mark.parametrize(
    ("kind", "expected_kind"),
    [(None, FailureKind.NONZERO_EXIT), (FailureKind.TIMEOUT, FailureKind.TIMEOUT)],
)
def test_complete_failure_without_retries_ends_the_run_failed(
    kind: FailureKind | None, expected_kind: FailureKind
) -> None:
    state, events = when(CLAIMED, complete(ok=False, exit_code=2, kind=kind), FINISHED)
    assert events == [
        ev.TaskFailed(
            run_id=RUN,
            task="main",
            attempt=1,
            epoch=1,
            worker_id="w1",
            failure_kind=expected_kind,
            exit_code=2,
            output_tail="tail",
            started_at=STARTED,
            finished_at=FINISHED,
        ),
        ev.TaskDeadLettered(
            run_id=RUN,
            task="main",
            attempt=1,
            failure_kind=expected_kind,
            exit_code=2,
            output_tail="tail",
        ),
        ev.RunFailed(run_id=RUN, scheduled_for=TICK, tenant="default"),
    ]
    assert state is not None and state.runs == ()


def test_complete_failure_with_attempts_left_schedules_a_retry() -> None:
    state, events = when(CLAIMED_RETRYING, complete(ok=False, exit_code=1), FINISHED)
    retry_at = next_attempt_at(RETRYING.retry_policy, RUN, "main", 1, FINISHED)
    assert retry_at is not None
    assert FINISHED + timedelta(seconds=8) <= retry_at <= FINISHED + timedelta(seconds=10)
    assert events == [
        ev.TaskFailed(
            run_id=RUN,
            task="main",
            attempt=1,
            epoch=1,
            worker_id="w1",
            failure_kind=FailureKind.NONZERO_EXIT,
            exit_code=1,
            output_tail="tail",
            started_at=STARTED,
            finished_at=FINISHED,
        ),
        ev.RetryScheduled(run_id=RUN, task="main", attempt=2, retry_at=retry_at),
    ]
    ti = only_task(state)
    assert ti == replace(
        ti,
        state=TaskState.RETRY_WAIT,
        attempt=2,
        epoch=1,
        worker_id=None,
        lease_expires_at=None,
        retry_at=retry_at,
    )


def test_dag_run_succeeds_only_when_every_task_succeeded() -> None:
    state: JobState | None = given(
        registered(DAG),
        scheduled(spec=DAG),
        ready(task="extract"),
        ready(task="load"),
        claimed(task="extract", spec=DAG),
        claimed(task="load", worker="w2", spec=DAG),
        clock=TICK,
    )
    state, events = when(state, complete(task="extract"), FINISHED, key="c1")
    assert events == [succeeded(task="extract")]
    _, events = when(state, complete(task="load", worker="w2"), FINISHED, key="c2")
    assert events == [
        succeeded(task="load", worker="w2"),
        ev.RunSucceeded(run_id=RUN, scheduled_for=TICK, tenant="default"),
    ]


def test_dag_run_fails_once_every_task_ended_and_one_failed() -> None:
    state: JobState | None = given(
        registered(DAG),
        scheduled(spec=DAG),
        ready(task="extract"),
        ready(task="load"),
        claimed(task="extract", spec=DAG),
        claimed(task="load", worker="w2", spec=DAG),
        clock=TICK,
    )
    state, events = when(state, complete(task="extract", ok=False, exit_code=3), FINISHED, key="c1")
    # load still holds its lease: extract is dead-lettered, the run goes on
    assert [type(e) for e in events] == [ev.TaskFailed, ev.TaskDeadLettered]
    _, events = when(state, complete(task="load", worker="w2"), FINISHED, key="c2")
    assert events == [
        succeeded(task="load", worker="w2"),
        ev.RunFailed(run_id=RUN, scheduled_for=TICK, tenant="default"),
    ]


# --- lease expiry and retries ---------------------------------------------------------------


def test_tick_before_the_lease_ends_expires_nothing() -> None:
    _, events = when(CLAIMED, cmd.Tick(), LEASE_END - timedelta(milliseconds=1))
    assert events == []


def test_lease_expiry_gives_the_attempt_back_without_spending_the_retry_budget() -> None:
    # DESIGN.md: "running → scheduled: lease expired — reclaim"; a crash is not a failure, so
    # even a task with no retries left (max_attempts 1) gets its next attempt, ready at once.
    state, events = when(CLAIMED, cmd.Tick(), LEASE_END)
    assert events == [
        ev.LeaseExpired(run_id=RUN, task="main", attempt=1, epoch=1, worker_id="w1"),
        ev.TaskReady(run_id=RUN, task="main", attempt=2, scheduled_for=TICK),
    ]
    assert state is not None
    ti = state.runs[0].tasks[0]
    assert (ti.state, ti.attempt, ti.epoch, ti.lease_expiries) == (TaskState.READY, 2, 1, 1)
    _, events = when(state, claim("w2", attempt=2), LEASE_END, key="reclaim")
    assert events == [replace(claimed(now=LEASE_END), attempt=2, epoch=2, worker_id="w2")]


def test_a_task_whose_lease_lapses_past_max_lease_expiries_is_dead_lettered() -> None:
    # the bound that stops a task that kills every worker it lands on
    once = replace(SPEC, max_lease_expiries=1)
    state = given(registered(once), scheduled(spec=once), ready(), claimed(spec=once), clock=TICK)
    state, events = when(state, cmd.Tick(), LEASE_END, key="expire-1")
    assert [type(e) for e in events] == [ev.LeaseExpired, ev.TaskReady]
    state = fold(state, (claim("w2", attempt=2), LEASE_END))
    assert state is not None
    until = state.runs[0].tasks[0].lease_expires_at
    assert until is not None
    _, events = when(state, cmd.Tick(), until, key="expire-2")
    tail = "the lease lapsed 2 times (max_lease_expiries 1): the task is not given back again"
    assert events == [
        ev.LeaseExpired(run_id=RUN, task="main", attempt=2, epoch=2, worker_id="w2"),
        ev.TaskFailed(
            run_id=RUN,
            task="main",
            attempt=2,
            epoch=2,
            worker_id="w2",
            failure_kind=FailureKind.LEASE_EXPIRED,
            exit_code=None,
            output_tail=tail,
            started_at=None,
            finished_at=until,
        ),
        ev.TaskDeadLettered(
            run_id=RUN,
            task="main",
            attempt=2,
            failure_kind=FailureKind.LEASE_EXPIRED,
            exit_code=None,
            output_tail=tail,
        ),
        ev.RunFailed(run_id=RUN, scheduled_for=TICK, tenant="default"),
    ]


def test_attempts_given_back_after_a_lapsed_lease_leave_the_retries_intact() -> None:
    # max_attempts 2: a lapse, then a real failure still gets its one retry
    state, _ = when(CLAIMED_RETRYING, cmd.Tick(), LEASE_END, key="expire-1")
    state = fold(state, (claim("w2", attempt=2), LEASE_END))
    _, events = when(
        state,
        complete(ok=False, exit_code=1, epoch=2, worker="w2", attempt=2),
        LEASE_END,
        key="fail-2",
    )
    assert [type(e) for e in events] == [ev.TaskFailed, ev.RetryScheduled]
    assert events[1] == ev.RetryScheduled(
        run_id=RUN,
        task="main",
        attempt=3,
        retry_at=next_attempt_at(RETRYING.retry_policy, RUN, "main", 1, LEASE_END),
    )


def _failed_retrying() -> tuple[JobState, datetime]:
    state, _ = when(CLAIMED_RETRYING, complete(ok=False, exit_code=1), FINISHED, key="fail")
    assert state is not None
    retry_at = state.runs[0].tasks[0].retry_at
    assert retry_at is not None
    return state, retry_at


def test_retry_is_released_by_a_tick_once_the_backoff_elapsed() -> None:
    state, retry_at = _failed_retrying()
    _, events = when(state, cmd.Tick(), retry_at - timedelta(milliseconds=1), key="early")
    assert events == []
    state2, events = when(state, cmd.Tick(), retry_at, key="release")
    assert events == [ev.TaskReady(run_id=RUN, task="main", attempt=2, scheduled_for=TICK)]
    _, events = when(state2, claim("w2", attempt=2), retry_at, key="claim-2")
    assert events == [
        replace(claimed(now=retry_at, spec=RETRYING), attempt=2, epoch=2, worker_id="w2")
    ]


def test_claim_while_waiting_for_retry_is_rejected_not_ready() -> None:
    state, _ = _failed_retrying()
    command = claim(attempt=2)
    _, events = when(state, command, FINISHED, key="claim")
    assert events == [
        rejected(command, RejectReason.NOT_READY, "task instance is retry_wait at attempt 2")
    ]


def test_renew_after_the_lease_expired_is_rejected_stale_epoch() -> None:
    state, _ = when(CLAIMED, cmd.Tick(), LEASE_END, key="expire")
    command = renew()
    _, events = when(state, command, LEASE_END, key="late-renew")
    assert events == [
        rejected(
            command,
            RejectReason.STALE_EPOCH,
            "epoch 1 is not the current lease (epoch 1, ready)",
        )
    ]


def test_zombie_completion_after_reassignment_is_rejected_and_the_new_holder_wins() -> None:
    state, _ = when(CLAIMED_RETRYING, cmd.Tick(), LEASE_END, key="expire")
    state = fold(state, (claim("w2", attempt=2), LEASE_END))
    zombie = complete(epoch=1, worker="w1")
    state, events = when(state, zombie, LEASE_END, key="zombie")
    assert events == [
        rejected(
            zombie, RejectReason.STALE_EPOCH, "epoch 1 is not the current lease (epoch 2, claimed)"
        )
    ]
    impostor = complete(epoch=2, worker="w1", attempt=2)
    state, events = when(state, impostor, LEASE_END, key="impostor")
    assert events == [rejected(impostor, RejectReason.NOT_HOLDER, "lease is held by w2")]
    _, events = when(state, complete(epoch=2, worker="w2", attempt=2), LEASE_END, key="w2-done")
    assert events == [
        succeeded(worker="w2", attempt=2, epoch=2),
        ev.RunSucceeded(run_id=RUN, scheduled_for=TICK, tenant="default"),
    ]


def test_failure_of_the_last_attempt_ends_the_run_failed() -> None:
    two = replace(SPEC, retry_policy=RetryPolicy(max_attempts=2, backoff=timedelta(0)))
    state = fold(
        given(registered(two), scheduled(spec=two), ready(), claimed(spec=two), clock=TICK),
        (complete(ok=False, exit_code=1), FINISHED),
        (cmd.Tick(), FINISHED),
        (claim("w2", attempt=2), FINISHED),
    )
    _, events = when(
        state,
        complete(ok=False, exit_code=1, epoch=2, worker="w2", attempt=2),
        FINISHED,
        key="last",
    )
    assert events == [
        ev.TaskFailed(
            run_id=RUN,
            task="main",
            attempt=2,
            epoch=2,
            worker_id="w2",
            failure_kind=FailureKind.NONZERO_EXIT,
            exit_code=1,
            output_tail="tail",
            started_at=STARTED,
            finished_at=FINISHED,
        ),
        ev.TaskDeadLettered(
            run_id=RUN,
            task="main",
            attempt=2,
            failure_kind=FailureKind.NONZERO_EXIT,
            exit_code=1,
            output_tail="tail",
        ),
        ev.RunFailed(run_id=RUN, scheduled_for=TICK, tenant="default"),
    ]


def test_failure_with_a_huge_backoff_coefficient_is_capped_at_max_backoff() -> None:
    spec = replace(SPEC, retry_policy=RetryPolicy(max_attempts=5, backoff_coefficient=1e200))
    state = given(
        registered(spec),
        scheduled(spec=spec),
        ready(attempt=3),
        claimed(spec=spec, attempt=3, epoch=3),
        clock=TICK,
    )
    _, events = when(state, complete(ok=False, exit_code=1, epoch=3, attempt=3), FINISHED)
    assert [type(e) for e in events] == [ev.TaskFailed, ev.RetryScheduled]


# --- the clock --------------------------------------------------------------------------------


def test_clock_is_the_latest_record_time_and_never_moves_back() -> None:
    state, _ = when(given(registered(), clock=at(minutes=3)), cmd.PauseJob(), at(minutes=1))
    assert state is not None and state.clock == at(minutes=3)
    state, _ = when(state, cmd.ResumeJob(), at(minutes=4), key="resume")
    assert state is not None and state.clock == at(minutes=4)


def test_hashed_schedule_ticks_are_spread_by_job_id_and_stable() -> None:
    hashed = replace(SPEC, schedule=cron("H * * * *"))
    minutes = set()
    for job in ("job-a", "job-b", "job-c", "job-d"):
        first, _ = handle(
            None, cmd.Envelope(idem_key="k", job_id=job, command=cmd.RegisterJob(spec=hashed)), T0
        )
        again, _ = handle(
            None, cmd.Envelope(idem_key="k2", job_id=job, command=cmd.RegisterJob(spec=hashed)), T0
        )
        assert first is not None and again is not None
        assert first.next_fire_at == again.next_fire_at  # deterministic per job_id
        assert first.next_fire_at is not None
        minutes.add(first.next_fire_at.minute)
    assert len(minutes) > 1  # H spreads jobs over the hour


def test_a_trigger_re_sent_after_many_runs_is_still_a_no_op() -> None:
    """Claims and completions of many runs must not push a user command's marker out."""
    state, first = when(given(registered()), cmd.TriggerJob(), at(minutes=1), key="trigger-K")
    assert first and isinstance(first[0], ev.RunScheduled)
    for i in range(100):  # 100 runs' worth of worker commands
        state, _ = when(
            state,
            cmd.ClaimTask(run_id="nope", task="main", attempt=1, worker_id="w"),
            at(minutes=2),
            key=f"claim-{i}",
        )
        state, _ = when(
            state,
            completed("nope", worker="w", at=at(minutes=2)),
            at(minutes=2),
            key=f"complete-{i}",
        )
    _, again = when(state, cmd.TriggerJob(), at(minutes=3), key="trigger-K")
    assert again == []


def test_a_re_registered_once_job_gets_new_run_ids() -> None:
    """Delete + register again with the same run_at: a new run, not the deleted job's."""
    once = replace(SPEC, schedule=Schedule(ScheduleKind.ONCE, run_at=at(minutes=1)))
    state, _ = when(None, cmd.RegisterJob(spec=once), T0, key="r1")
    state, fired = when(state, cmd.Tick(), at(minutes=2), key="t1")
    first = next(e for e in fired if isinstance(e, ev.RunScheduled))
    state, _ = when(state, cmd.DeleteJob(), at(minutes=3), key="d1")
    state, _ = when(state, cmd.RegisterJob(spec=once), at(minutes=4), key="r2")
    _, fired_again = when(state, cmd.Tick(), at(minutes=5), key="t2")
    second = next(e for e in fired_again if isinstance(e, ev.RunScheduled))
    assert second.scheduled_for == first.scheduled_for
    assert second.run_id != first.run_id
