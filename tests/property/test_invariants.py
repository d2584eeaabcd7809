"""DESIGN.md's invariants against random command sequences folded through ``handle``.

A sequence mixes registration, pause/resume, updates, manual triggers, backfills (with the
ticks the API would choose), ticks at increasing and
sometimes decreasing record times, claims/renewals/completions with right and wrong epochs
and workers, and re-deliveries of earlier envelopes. Every invariant is checked on the whole
trace (each step's command, record time, state before/after and events).

``CRONLOG_PROPERTY_EXAMPLES`` raises the number of examples (default 100) for a thorough run.
The sequences, their driver and their trace are in ``tests/property/sequences.py``.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta

from hypothesis import Phase, event, given, settings
from hypothesis import strategies as st

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.decide import WORKER_COMMANDS, handle
from cronlog.evolve import evolve
from cronlog.firing import ON_TIME_GRACE
from cronlog.ids import run_id_for_tick
from cronlog.job import MAX_RENEWAL_MARKERS, JobState
from cronlog.model import CatchupPolicy, JobSpec, OverlapPolicy, ScheduleKind
from cronlog.schedule import next_tick
from cronlog.vocabulary import (
    OFF_SCHEDULE_TRIGGERS,
    TERMINAL_TASK_STATES,
    CommandKind,
    FailureKind,
    JobStatus,
    RejectReason,
    RunTrigger,
    SkipReason,
    TaskState,
)
from tests.property.sequences import (
    COMMON,
    EXAMPLES,
    JOB,
    KINDS,
    MAX_STEPS,
    Driver,
    Step,
    cron_specs,
    fold_log,
    once_specs,
)

# --- the invariants ------------------------------------------------------------------------------


def check_one_run_per_tick(steps: list[Step]) -> None:
    """Invariant 2: a (job_id, scheduled_for) creates at most one run; run_ids are unique."""
    runs = [e for s in steps for e in s.events if isinstance(e, ev.RunScheduled)]
    per_tick = Counter(  # reprocessing backfill runs are the documented exception
        e.scheduled_for
        for e in runs
        if e.trigger not in (RunTrigger.MANUAL, RunTrigger.REPLAY)  # replays: any tick
        and (
            e.trigger is not RunTrigger.BACKFILL
            or e.run_id == run_id_for_tick(JOB, e.scheduled_for)
        )
    )
    assert [t for t, n in per_tick.items() if n > 1] == [], "a tick made more than one run"
    per_id = Counter(e.run_id for e in runs)
    assert [r for r, n in per_id.items() if n > 1] == [], "a run_id was scheduled twice"
    for s in steps:
        if s.after is not None:
            ids = [r.run_id for r in s.after.runs]
            assert len(ids) == len(set(ids)), "two active runs share a run_id"


def check_every_tick_is_accounted(steps: list[Step]) -> None:
    """Invariant 1: ticks are decided in order, each once, as a run or a TickSkipped; only a
    pause may pass over ticks, and a Tick leaves nothing due behind. On-time ticks always
    fire; skips follow the catch-up policy."""
    cursor: datetime | None = None
    buffered: dict[str, datetime] = {}
    queued: dict[str, datetime] = {}
    for s in steps:
        now = s.after.clock if s.after is not None else s.record_time
        spec = s.before.spec if s.before is not None else None
        for e in s.events:
            match e:
                case ev.JobRegistered() | ev.JobRedefined():
                    cursor, spec = e.next_fire_at, e.spec
                    if isinstance(e, ev.JobRegistered):
                        buffered.clear()
                case ev.JobResumed():
                    if not e.catchup:  # ticks passed while paused are not owed
                        assert e.next_fire_at is None or e.next_fire_at > now, (
                            "resume owes a tick from the past"
                        )
                    else:
                        assert e.next_fire_at == cursor, "resume with catch-up lost the cursor"
                    cursor = e.next_fire_at
                case ev.RunScheduled() if e.run_id in buffered:
                    assert buffered.pop(e.run_id) == e.scheduled_for  # a buffered tick starts
                case ev.RunScheduled() if e.run_id in queued:
                    assert queued.pop(e.run_id) == e.scheduled_for  # a queued run starts
                case ev.RunCancelled() if e.run_id in queued:
                    queued.pop(e.run_id)  # a queued run cancelled before it started
                case ev.JobDeleted():
                    cursor = None
                    buffered.clear()  # a deleted job drops its buffered tick
                    assert not queued, "a deleted job's queued runs were not cancelled"
                case ev.RunScheduled(trigger=RunTrigger.MANUAL):
                    assert e.scheduled_for == now
                case ev.RunScheduled(trigger=RunTrigger.REPLAY):
                    assert e.replay_of is not None and e.tasks == (e.tasks[0],)
                case ev.RunScheduled(trigger=RunTrigger.BACKFILL):
                    assert e.scheduled_for <= now, "a backfill ran a future tick"
                    assert cursor is None or e.scheduled_for < cursor, (
                        "a backfill ran a tick the schedule still owns"
                    )
                case ev.RunScheduled() | ev.TickSkipped() | ev.RunBuffered() | ev.RunQueued():
                    assert spec is not None
                    assert e.scheduled_for == cursor, "a tick was decided out of order or lost"
                    ends = isinstance(e, ev.TickSkipped) and e.reason in (
                        SkipReason.MAX_RUNS,
                        SkipReason.END_AT,
                    )
                    assert e.next_fire_at == (
                        None
                        if ends
                        else next_tick(spec.schedule, e.scheduled_for, hash_id=s.envelope.job_id)
                    )
                    if isinstance(e, ev.RunBuffered):
                        assert not buffered, "a second tick was buffered"
                        buffered[e.run_id] = e.scheduled_for
                        cursor = e.next_fire_at
                        continue
                    if isinstance(e, ev.RunQueued):  # delayed, never dropped, in tick order
                        active = s.before.active_runs() if s.before is not None else 0
                        started = sum(
                            isinstance(x, ev.RunScheduled)
                            and x.trigger in (RunTrigger.SCHEDULE, RunTrigger.CATCHUP)
                            for x in s.events[: s.events.index(e)]
                        )
                        assert queued or active + started >= spec.max_active_runs, (
                            "queued below the cap"
                        )
                        queued[e.run_id] = e.scheduled_for
                        assert len(queued) <= spec.max_queued_runs
                        cursor = e.next_fire_at
                        continue
                    late = now - e.scheduled_for
                    once = spec.schedule.kind is ScheduleKind.ONCE
                    if isinstance(e, ev.TickSkipped) and e.reason in (
                        SkipReason.OVERLAP,
                        SkipReason.MAX_RUNS,
                    ):
                        pass  # overlap: checked by check_overlap; max_runs: by check_max_runs
                    elif isinstance(e, ev.TickSkipped) and e.reason is SkipReason.QUEUE_FULL:
                        assert len(queued) >= spec.max_queued_runs, "skipped with room queued"
                    elif isinstance(e, ev.TickSkipped):
                        assert not once, "a once job's only tick was skipped"
                        assert late > ON_TIME_GRACE, "an on-time tick was skipped"
                        window = late > spec.schedule.catchup_window
                        assert (e.reason is SkipReason.CATCHUP_WINDOW) == window
                        assert spec.schedule.catchup is not CatchupPolicy.ALL or window
                    else:
                        on_time = late <= ON_TIME_GRACE
                        assert (e.trigger is RunTrigger.SCHEDULE) == on_time
                        # a once job's only tick fires however late (firing.first_tick)
                        assert on_time or once or spec.schedule.catchup is not CatchupPolicy.NONE
                        assert on_time or once or late <= spec.schedule.catchup_window
                    cursor = e.next_fire_at
        if s.after is not None:
            assert s.after.next_fire_at == cursor
            if isinstance(s.envelope.command, cmd.Tick) and s.after.status is JobStatus.ACTIVE:
                assert cursor is None or cursor > now, "a due tick was left undecided"


def check_leases(steps: list[Step]) -> None:
    """Invariant 3: one valid lease per task instance; epochs only grow; fenced commands are
    rejected, as events."""
    live: dict[tuple[str, str], tuple[int, str]] = {}
    last_epoch: dict[tuple[str, str], int] = {}
    for s in steps:
        prev: ev.Event | None = None
        for e in s.events:
            match e:
                case ev.TaskClaimed():
                    key = (e.run_id, e.task)
                    assert key not in live, "a second lease was granted while one is valid"
                    assert e.epoch == last_epoch.get(key, 0) + 1, "epoch did not bump by one"
                    live[key], last_epoch[key] = (e.epoch, e.worker_id), e.epoch
                    assert s.after is not None
                    assert e.lease_expires_at == s.after.clock + e.lease_ttl
                case ev.LeaseRenewed():
                    assert live.get((e.run_id, e.task)) == (e.epoch, e.worker_id)
                case ev.LeaseExpired():
                    assert live.pop((e.run_id, e.task)) == (e.epoch, e.worker_id)
                case ev.TaskFailed(failure_kind=FailureKind.LEASE_EXPIRED):
                    assert isinstance(prev, ev.LeaseExpired)
                    assert (prev.run_id, prev.task, prev.epoch) == (e.run_id, e.task, e.epoch)
                case ev.TaskSucceeded() | ev.TaskFailed():
                    assert live.pop((e.run_id, e.task)) == (e.epoch, e.worker_id)
                case ev.TaskCancelled():  # revokes the lease, if one was held
                    held = live.pop((e.run_id, e.task), None)
                    assert (held[1] if held else None) == e.worker_id
            prev = e
        if isinstance(s.envelope.command, cmd.ClaimTask | cmd.RenewLease | cmd.CompleteTask):
            rejections = [e for e in s.events if isinstance(e, ev.CommandRejected)]
            assert s.events == () or not rejections or list(s.events) == rejections
        # State view: the record agrees with the event view.
        if s.after is not None:
            for run in s.after.runs:
                for ti in run.tasks:
                    claimed = ti.state is TaskState.CLAIMED
                    assert claimed == ((run.run_id, ti.task) in live)
                    assert claimed == (ti.lease_expires_at is not None)
                    if claimed:
                        assert live[(run.run_id, ti.task)] == (ti.epoch, ti.worker_id)
            if s.before is not None:
                before = {(r.run_id, t.task): t.epoch for r in s.before.runs for t in r.tasks}
                for run in s.after.runs:
                    for ti in run.tasks:
                        assert ti.epoch >= before.get((run.run_id, ti.task), 0)


def check_fenced_commands_are_rejected(steps: list[Step]) -> None:
    """A renew/complete whose epoch or worker is not the current lease changes nothing."""
    for s in steps:
        c = s.envelope.command
        if not isinstance(c, cmd.RenewLease | cmd.CompleteTask) or s.before is None:
            continue
        run = s.before.run(c.run_id)
        ti = run.task(c.task) if run else None
        valid = (
            ti is not None
            and ti.state is TaskState.CLAIMED
            and ti.epoch == c.epoch
            and ti.worker_id == c.worker_id
        )
        if s.events and not valid:
            assert [type(e) for e in s.events] == [ev.CommandRejected]
            assert s.after is not None and s.after.runs == s.before.runs


def check_duplicates_yield_nothing(steps: list[Step]) -> None:
    """Invariant 5: a command whose idem_key was applied is a no-op and emits nothing."""
    applied: dict[str, cmd.Command] = {}
    for s in steps:
        key, command = s.envelope.idem_key, s.envelope.command
        if isinstance(command, cmd.Tick):
            continue
        if key in applied:
            if applied[key] == command:
                assert s.events == (), f"re-delivered {key} emitted events"
                assert s.after is s.before
        elif s.after is not None:
            applied[key] = command


def _is_user(command: cmd.Command) -> bool:
    return not isinstance(command, (*WORKER_COMMANDS, cmd.Tick))


def check_reused_keys_are_refused(steps: list[Step]) -> None:
    """Another user command under an applied user command's idem_key is refused, once per
    content, as one CommandRejected (idempotency_conflict) that changes nothing but the clock
    and the markers; a re-used key of a worker command (markers without digests) stays a no-op."""
    applied: dict[str, cmd.Command] = {}
    refused: set[tuple[str, cmd.Command]] = set()
    for s in steps:
        key, command = s.envelope.idem_key, s.envelope.command
        if isinstance(command, cmd.Tick):
            continue
        if key not in applied:
            if s.after is not None:
                applied[key] = command
            continue
        first = applied[key]
        if first == command:
            continue  # a re-delivery: check_duplicates_yield_nothing
        if not (_is_user(first) and _is_user(command)) or (key, command) in refused:
            assert s.events == () and s.after is s.before, f"re-used {key} was not a no-op"
            continue
        refused.add((key, command))
        [refusal] = s.events
        assert isinstance(refusal, ev.CommandRejected)
        assert refusal.reason is RejectReason.IDEMPOTENCY_CONFLICT
        assert refusal.command == CommandKind(type(command).__name__)
        assert s.before is not None and s.after is not None
        same = ("spec", "status", "next_fire_at", "runs", "buffered", "runs_fired", "renewals")
        assert [getattr(s.after, f) for f in same] == [getattr(s.before, f) for f in same]


def check_ticks_at_the_same_instant_fire_nothing(steps: list[Step]) -> None:
    """A Tick right after a Tick folded at the same fold time fires no schedule tick.

    (It may still release a retry whose retry_at is that same instant: a zero backoff decided
    by the first Tick is released by the next one.)
    """
    for prev, s in itertools.pairwise(steps):
        if (
            isinstance(prev.envelope.command, cmd.Tick)
            and isinstance(s.envelope.command, cmd.Tick)
            and prev.after is not None
            and s.after is not None
            and s.after.clock == prev.after.clock
        ):
            fired = [e for e in s.events if isinstance(e, ev.RunScheduled | ev.TickSkipped)]
            assert fired == []
            assert all(isinstance(e, ev.TaskReady) for e in s.events)


def check_terminal_states_absorb(steps: list[Step]) -> None:
    """Invariant 8 and absorbing terminals: one terminal event per attempt; after a task's
    final success/failure, and after its run ends, nothing but rejections names it again."""
    closed_tasks: set[tuple[str, str]] = set()
    closed_runs: set[str] = set()
    terminal_attempts: Counter[tuple[str, str, int]] = Counter()
    for s in steps:
        events = list(s.events)
        for i, e in enumerate(events):
            if isinstance(e, ev.CommandRejected):
                continue
            run_id, task = getattr(e, "run_id", None), getattr(e, "task", None)
            if run_id is not None:
                assert run_id not in closed_runs, f"{type(e).__name__} after the run ended"
            failed_before = events[i - 1] if i > 0 else None
            if isinstance(e, ev.TaskDeadLettered):  # only right after its final TaskFailed
                assert isinstance(failed_before, ev.TaskFailed)
                assert (failed_before.run_id, failed_before.task, failed_before.attempt) == (
                    e.run_id,
                    e.task,
                    e.attempt,
                )
                assert (failed_before.failure_kind, failed_before.exit_code) == (
                    e.failure_kind,
                    e.exit_code,
                )
            elif task is not None:
                assert (run_id, task) not in closed_tasks, f"{type(e).__name__} after terminal"
            match e:
                case ev.TaskSucceeded() | ev.TaskFailed():
                    terminal_attempts[(e.run_id, e.task, e.attempt)] += 1
                    retried = (
                        i + 1 < len(events)
                        and isinstance(events[i + 1], ev.RetryScheduled)
                        and events[i + 1].attempt == e.attempt + 1
                    )  # type: ignore[union-attr]
                    if isinstance(e, ev.TaskSucceeded) or not retried:
                        closed_tasks.add((e.run_id, e.task))
                    if isinstance(e, ev.TaskFailed) and not retried:  # a dead letter follows
                        nxt = events[i + 1] if i + 1 < len(events) else None
                        assert isinstance(nxt, ev.TaskDeadLettered), "final failure not listed"
                case ev.TaskCancelled():
                    closed_tasks.add((e.run_id, e.task))
                case ev.RunSucceeded() | ev.RunFailed() | ev.RunCancelled():
                    closed_runs.add(e.run_id)
        # State view: a terminal task instance stays as it is while its run is in the record.
        if s.before is not None and s.after is not None:
            after = {(r.run_id, t.task): t for r in s.after.runs for t in r.tasks}
            for run in s.before.runs:
                for ti in run.tasks:
                    if ti.state in TERMINAL_TASK_STATES and (run.run_id, ti.task) in after:
                        assert after[(run.run_id, ti.task)] == ti
    assert [k for k, n in terminal_attempts.items() if n > 1] == []


def check_run_outcomes(steps: list[Step]) -> None:
    """A run ends succeeded iff every task succeeded, failed iff all ended and one failed."""
    for s in steps:
        for e in s.events:
            if isinstance(e, ev.RunSucceeded | ev.RunFailed):
                assert s.before is not None
                run = s.before.run(e.run_id)
                assert run is not None
                assert s.after is not None and s.after.run(e.run_id) is None
        if s.after is not None:
            for run in s.after.runs:  # a run whose tasks all ended is never left in the record
                assert not all(t.state in TERMINAL_TASK_STATES for t in run.tasks)


def check_clock(steps: list[Step]) -> None:
    """The fold's clock is the max record time so far: it never moves back."""
    high: datetime | None = None
    for s in steps:
        if s.after is None:
            continue
        if s.before is not None:
            assert s.after.clock >= s.before.clock
        if s.after is not s.before:
            high = s.record_time if high is None else max(high, s.record_time)
            assert s.after.clock == high


def check_determinism(
    log: list[tuple[cmd.Envelope, datetime]], steps: list[Step], split: int
) -> None:
    """Invariant 4: folding the same log again gives identical states and events, and folding
    a prefix, then the rest from the state reached, gives the same as folding it all."""
    again = fold_log(log)
    assert [(s.after, s.events) for s in again] == [(s.after, s.events) for s in steps]
    head = fold_log(log[:split])
    tail = fold_log(log[split:], head[-1].after if head else None)
    assert [(s.after, s.events) for s in head + tail] == [(s.after, s.events) for s in steps]


def check_evolve_is_total(steps: list[Step]) -> None:
    """evolve never raises for an event decide emitted, whatever state it is replayed on."""
    states = [None, *(s.after for s in steps[:: max(1, len(steps) // 4)]), steps[-1].after]
    for e in {e for s in steps for e in s.events}:
        for state in states:
            evolve(state, JOB, e)


def check_overlap_and_max_runs(steps: list[Step]) -> None:
    """Overlap policies other than ``allow`` never start a tick's run beside an active run;
    an ``overlap`` skip happens only beside one; scheduled runs never exceed ``max_runs``."""
    fired = 0

    def lane(state: JobState) -> list[object]:  # backfill runs are outside the overlap policy
        return [r for r in state.runs if r.trigger not in OFF_SCHEDULE_TRIGGERS]

    for s in steps:
        state = s.before
        for e in s.events:
            if isinstance(e, ev.JobRegistered):
                fired = 0
            elif state is not None and isinstance(e, ev.RunBuffered):
                fired += 1
                assert lane(state) and state.spec.overlap is OverlapPolicy.BUFFER_ONE
            elif (
                state is not None
                and isinstance(e, ev.RunScheduled)
                and e.trigger is not RunTrigger.MANUAL
                and e.trigger not in OFF_SCHEDULE_TRIGGERS
            ):
                if state.buffered is None or state.buffered.run_id != e.run_id:
                    fired += 1
                if state.spec.overlap is not OverlapPolicy.ALLOW:
                    assert not lane(state), "a run started beside an active one"
            elif isinstance(e, ev.TickSkipped) and e.reason is SkipReason.OVERLAP:
                assert state is not None and lane(state)
            limit = state.spec.schedule.max_runs if state is not None else None
            assert limit is None or fired <= limit, "more runs than max_runs"
            state = evolve(state, JOB, e)


ALL_CHECKS: list[Callable[[list[Step]], None]] = [
    check_overlap_and_max_runs,
    check_one_run_per_tick,
    check_every_tick_is_accounted,
    check_leases,
    check_fenced_commands_are_rejected,
    check_duplicates_yield_nothing,
    check_reused_keys_are_refused,
    check_ticks_at_the_same_instant_fire_nothing,
    check_terminal_states_absorb,
    check_run_outcomes,
    check_clock,
    check_evolve_is_total,
]


def _label(steps: list[Step]) -> None:
    seen = {type(e).__name__ for s in steps for e in s.events}
    for name in sorted(seen):
        event(name)
    triggers = {e.trigger.value for s in steps for e in s.events if isinstance(e, ev.RunScheduled)}
    for trigger in sorted(triggers):
        event(f"trigger:{trigger}")
    reasons = {e.reason.value for s in steps for e in s.events if isinstance(e, ev.CommandRejected)}
    for reason in sorted(reasons):
        event(f"rejected:{reason}")


@COMMON
@given(data=st.data(), spec=cron_specs(), n_steps=st.integers(5, MAX_STEPS))
def test_random_command_sequences_keep_every_invariant(
    data: st.DataObject, spec: JobSpec, n_steps: int
) -> None:
    driver = Driver(data, spec, KINDS)
    driver.run(n_steps)
    _label(driver.steps)
    for check in ALL_CHECKS:
        check(driver.steps)
    split = data.draw(st.integers(0, len(driver.log)))
    check_determinism(driver.log, driver.steps, split)


@settings(COMMON, max_examples=max(10, EXAMPLES // 2))
@given(
    data=st.data(),
    spec=st.one_of(cron_specs(), once_specs()),
    n_steps=st.integers(5, MAX_STEPS),
    later_s=st.integers(0, 3600),
)
def test_re_delivering_any_applied_command_emits_nothing(
    data: st.DataObject, spec: JobSpec, n_steps: int, later_s: int
) -> None:
    """Invariant 5, at the end of a random history: each command that was applied (the first
    delivery of its idem_key, in its marker window), delivered again later, is a no-op."""
    driver = Driver(data, spec, [*KINDS, "delete", "register"])
    driver.run(n_steps)
    firsts: dict[str, cmd.Envelope] = {}
    for s in driver.steps:
        key = s.envelope.idem_key
        if not isinstance(s.envelope.command, cmd.Tick) and key not in firsts and s.after:
            firsts[key] = s.envelope
    worker = [k for k, e in firsts.items() if not _is_user(e.command)]
    in_window = set(worker[-MAX_RENEWAL_MARKERS:])  # user commands: MAX_STEPS < 128
    state = driver.state
    later = driver.t + timedelta(seconds=later_s)
    for key, envelope in firsts.items():
        if _is_user(envelope.command) or key in in_window:
            after, events = handle(state, envelope, later)
            assert events == [], f"re-delivered {key} emitted {events}"
            assert after is state


@settings(COMMON, max_examples=max(10, EXAMPLES // 2))
@given(data=st.data(), spec=cron_specs(), n_steps=st.integers(5, MAX_STEPS))
def test_sequences_with_delete_and_reregistration_keep_every_invariant(
    data: st.DataObject, spec: JobSpec, n_steps: int
) -> None:
    driver = Driver(data, spec, [*KINDS, "delete", "register", "register"])
    driver.run(n_steps)
    for check in ALL_CHECKS:
        check(driver.steps)


@settings(COMMON, derandomize=True, database=None, phases=[Phase.explicit, Phase.generate])
@given(data=st.data(), spec=once_specs(), n_steps=st.integers(5, MAX_STEPS))
def test_once_jobs_keep_every_invariant(data: st.DataObject, spec: JobSpec, n_steps: int) -> None:
    driver = Driver(data, spec, [*KINDS, "pause", "resume", "update"])
    driver.run(n_steps)
    for check in ALL_CHECKS:
        check(driver.steps)
