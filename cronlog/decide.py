"""``decide`` for the job aggregate, and ``handle``: dedupe + decide + evolve for one command."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import assert_never

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.errors import InvalidDefinition, InvariantViolation, RejectReason
from cronlog.firing import (
    fire_due_ticks,
    first_tick,
    rescheduled_tick,
    resume_tick,
    start_run,
)
from cronlog.ids import (
    run_id_for_backfill,
    run_id_for_replay,
    run_id_for_tick,
    run_id_for_trigger,
)
from cronlog.job import (
    MAX_APPLIED_MARKERS,
    MAX_RENEWAL_MARKERS,
    TERMINAL_TASK_STATES,
    WAITING_TASK_STATES,
    JobState,
    JobStatus,
    TaskInstance,
    TaskState,
    evolve,
)
from cronlog.retry import next_attempt_at
from cronlog.validation import validate_spec

WORKER_COMMANDS = (cmd.ClaimTask, cmd.RenewLease, cmd.CompleteTask, cmd.ReleaseTask)
"""Commands whose dedupe markers live in the worker window (``JobState.renewals``)."""


class Decision:
    """Events being decided, with the state they lead to (each emit evolves it)."""

    def __init__(self, state: JobState | None, job_id: str) -> None:
        self.state = state
        self.job_id = job_id
        self.events: list[ev.Event] = []

    def live(self) -> JobState:
        """Return the state, which callers past the registration check know exists.

        Raises:
            InvariantViolation: the state is None (a bug in decide's dispatch).
        """
        if self.state is None:
            raise InvariantViolation(f"job {self.job_id!r} has no state here")
        return self.state

    def emit(self, event: ev.Event) -> None:
        """Append ``event`` and apply it to ``self.state``."""
        self.events.append(event)
        self.state = evolve(self.state, self.job_id, event)

    def reject(self, command: cmd.Command, reason: RejectReason, detail: str) -> None:
        """Emit a CommandRejected for ``command``."""
        self.emit(ev.CommandRejected(
            command=type(command).__name__, reason=reason, detail=detail,
            run_id=getattr(command, "run_id", None), task=getattr(command, "task", None),
            worker_id=getattr(command, "worker_id", None)))


def handle(
    state: JobState | None, envelope: cmd.Envelope, record_time: datetime
) -> tuple[JobState | None, list[ev.Event]]:
    """Apply one command to a job: dedupe by idem_key, decide, evolve, advance the clock.

    Args:
        state: the job's record, None if it has none.
        envelope: the command with its idem_key and job_id.
        record_time: the Kafka record's timestamp (LogAppendTime), aware UTC.

    Returns:
        ``(state after, events)``. A command whose idem_key is already applied returns the
        state unchanged and no events.

    Idempotency: every applied command leaves its idem_key in the record's recent markers,
    except Ticks (firing is idempotent by the schedule cursor and the deterministic run_id);
    The keys of worker commands (ClaimTask, RenewLease, CompleteTask, ReleaseTask: several
    per run) go to a
    window of their own so that they never push out the markers of the rare user commands
    (register, pause, trigger, …); a worker command older than its window is still fenced by
    the task instance's state and epoch.
    Determinism: now = max(state.clock, record_time); the same log gives the same result.
    """
    if state is not None and state.has_applied(envelope.idem_key):
        return state, []
    now = max(state.clock, record_time) if state is not None else record_time
    decision = Decision(state, envelope.job_id)
    decide(decision, envelope, now)
    new = decision.state
    if new is not None:
        new = replace(new, clock=now)
        if isinstance(envelope.command, WORKER_COMMANDS):
            new = replace(new, renewals=(*new.renewals, envelope.idem_key)[-MAX_RENEWAL_MARKERS:])
        elif not isinstance(envelope.command, cmd.Tick):
            new = replace(new, applied=(*new.applied, envelope.idem_key)[-MAX_APPLIED_MARKERS:])
    return new, decision.events


def decide(d: Decision, envelope: cmd.Envelope, now: datetime) -> None:
    """Decide the events of one command, emitting them into ``d``.

    Business refusals become CommandRejected events; nothing here raises for bad input.
    """
    state, command = d.state, envelope.command
    if isinstance(command, cmd.RegisterJob):
        _register(d, command, now)
        return
    if state is None:
        d.reject(command, RejectReason.UNKNOWN_JOB, f"job {envelope.job_id!r} is not registered")
        return
    if state.status is JobStatus.DELETED and not isinstance(
            command, (cmd.Tick, cmd.RenewLease, cmd.CompleteTask, cmd.ReleaseTask)):
        d.reject(command, RejectReason.JOB_DELETED, f"job {envelope.job_id!r} was deleted")
        return
    match command:
        case cmd.UpdateJob():
            _update(d, state, command, now)
        case cmd.PauseJob():
            if state.status is JobStatus.PAUSED:
                d.reject(command, RejectReason.ALREADY_IN_STATE, "job is already paused")
            else:
                d.emit(ev.JobPaused())
        case cmd.ResumeJob():
            if state.status is JobStatus.ACTIVE:
                d.reject(command, RejectReason.ALREADY_IN_STATE, "job is not paused")
            else:
                nxt = resume_tick(state.spec.schedule, state.next_fire_at, now, d.job_id,
                                  catchup=command.catchup)
                d.emit(ev.JobResumed(next_fire_at=nxt, catchup=command.catchup))
                if command.catchup:  # the owed ticks are decided now, not on the next Tick
                    _fire(d, now)
        case cmd.DeleteJob():
            d.emit(ev.JobDeleted())
        case cmd.TriggerJob():
            run_id = run_id_for_trigger(envelope.job_id, envelope.idem_key)
            if state.run(run_id) is not None:
                return  # a re-delivered trigger whose run is still active: nothing new
            d.emit(ev.RunScheduled(run_id, now, ev.RunTrigger.MANUAL, state.spec.tasks,
                                   state.next_fire_at))
            for task in state.spec.tasks:
                d.emit(ev.TaskReady(run_id, task, 1, now))
        case cmd.BackfillJob():
            _backfill(d, state, command, envelope.idem_key, now)
        case cmd.Tick():
            _tick(d, now)
        case cmd.ClaimTask() | cmd.RenewLease() | cmd.CompleteTask() | cmd.ReleaseTask():
            _lease_command(d, command, now)
        case cmd.CancelRun():
            _cancel(d, state, command, now)
        case cmd.ReplayTask():
            _replay(d, state, command, envelope.idem_key)
        case cmd.RegisterJob():
            raise AssertionError("handled above")
        case _:
            assert_never(command)


def _register(d: Decision, command: cmd.RegisterJob, now: datetime) -> None:
    if d.state is not None and d.state.status is not JobStatus.DELETED:
        d.reject(command, RejectReason.JOB_EXISTS, f"job {d.job_id!r} is already registered")
        return
    try:
        validate_spec(command.spec)
    except InvalidDefinition as exc:
        d.reject(command, RejectReason.INVALID_DEFINITION, str(exc))
        return
    d.emit(ev.JobRegistered(command.spec, first_tick(command.spec.schedule, now, d.job_id),
                            command.spec.schedule.max_runs))


def _update(d: Decision, state: JobState, command: cmd.UpdateJob, now: datetime) -> None:
    try:
        validate_spec(command.spec)
    except InvalidDefinition as exc:
        d.reject(command, RejectReason.INVALID_DEFINITION, str(exc))
        return
    nxt = rescheduled_tick(state.spec.schedule, command.spec.schedule, state.next_fire_at, now,
                           d.job_id)
    limit = command.spec.schedule.max_runs
    d.emit(ev.JobRedefined(command.spec, nxt,
                           None if limit is None else max(0, limit - state.runs_fired)))


def backfill_ticks(state: JobState, ticks: tuple[datetime, ...],
                   now: datetime) -> list[datetime]:
    """Return the ticks of a backfill that are the backfill's to run, ascending, once each.

    A tick after ``now`` or at/after the schedule's cursor (``next_fire_at``) is still the
    schedule's: it will be fired or skipped by a Tick with the tick's own run_id, so a
    backfill run for it could share that id. Those are dropped.
    """
    cursor = state.next_fire_at
    return sorted({t for t in ticks if t <= now and (cursor is None or t < cursor)})


def _backfill(d: Decision, state: JobState, command: cmd.BackfillJob, idem_key: str,
              now: datetime) -> None:
    """Start a run (trigger ``backfill``) for each of the command's past ticks.

    ``reprocess=none``: the run_id is the tick's own, so a tick whose run is active (or held
    by ``buffer_one``) is left alone, and a re-delivered command creates nothing twice.
    Otherwise the run_id derives from the command's idem_key: a new run beside the old ones.
    Backfill runs are not jittered, never move the cursor, do not count toward ``max_runs``
    and are exempt from the overlap policy and ``max_active_runs`` (the user asked for each
    of them; the command's ``MAX_BACKFILL_TICKS`` and the record size limit bound them).
    """
    if len(command.ticks) > cmd.MAX_BACKFILL_TICKS:
        d.reject(command, RejectReason.INVALID_DEFINITION,
                 f"ticks: at most {cmd.MAX_BACKFILL_TICKS} ticks per backfill, "
                 f"got {len(command.ticks)}")
        return
    held = state.buffered.run_id if state.buffered is not None else None
    for tick in backfill_ticks(state, command.ticks, now):
        if command.reprocess is cmd.Reprocess.NONE:
            run_id = run_id_for_tick(d.job_id, tick, state.incarnation)
        else:
            run_id = run_id_for_backfill(d.job_id, tick, idem_key)
        if run_id == held or d.live().run(run_id) is not None:
            continue
        current = d.live()
        d.emit(ev.RunScheduled(run_id, tick, ev.RunTrigger.BACKFILL, current.spec.tasks,
                               current.next_fire_at, current.runs_remaining()))
        for task in current.spec.tasks:
            d.emit(ev.TaskReady(run_id, task, 1, tick))


def _tick(d: Decision, now: datetime) -> None:
    for run in d.live().runs:
        for ti in run.tasks:
            if (ti.state is TaskState.CLAIMED and ti.lease_expires_at is not None
                    and ti.lease_expires_at <= now):
                holder = ti.worker_id or ""
                d.emit(ev.LeaseExpired(run.run_id, ti.task, ti.attempt, ti.epoch, holder))
                _fail(d, run.run_id, ti, ev.TaskFailed(
                    run.run_id, ti.task, ti.attempt, ti.epoch, holder,
                    cmd.FailureKind.LEASE_EXPIRED, None, "", None, now), now)
            elif (ti.state is TaskState.CLAIMED and ti.deadline_at is not None
                  and ti.deadline_at <= now):
                # The holder still renews but is past timeout + grace + ttl: its own timeout
                # enforcement failed (or the task ignores signals). Take the attempt back;
                # its next renewal is refused and it kills the process group.
                _fail(d, run.run_id, ti, ev.TaskFailed(
                    run.run_id, ti.task, ti.attempt, ti.epoch, ti.worker_id or "",
                    cmd.FailureKind.TIMEOUT, None,
                    f"hard deadline {ti.deadline_at.isoformat()} passed (timeout + grace + "
                    "lease ttl after the claim); the attempt was taken back", None, now), now)
            elif (ti.state in WAITING_TASK_STATES and ti.retry_at is not None
                  and ti.retry_at <= now):
                d.emit(ev.TaskReady(run.run_id, ti.task, ti.attempt, run.scheduled_for))
    _release_buffered(d, now)
    _fire(d, now)


def _fire(d: Decision, now: datetime) -> None:
    state = d.live()
    if state.status is JobStatus.ACTIVE:
        for event in fire_due_ticks(state, now):
            d.emit(event)


def _release_buffered(d: Decision, now: datetime) -> None:
    """Start the buffered tick of a ``buffer_one`` job once no run of it is active.

    Temporal's BUFFER_ONE: "start the workflow again soon as the current one completes". The
    run keeps its nominal ``scheduled_for`` and run_id; a paused job releases it too (the
    tick came due while it was active).
    """
    state = d.live()
    held = state.buffered
    if held is None or state.status is JobStatus.DELETED or any(
            r.trigger not in ev.OFF_SCHEDULE_TRIGGERS for r in state.runs):
        return  # backfill runs do not hold the schedule back (docs/schedules.md, "Backfill")
    for event in start_run(state, held.run_id, held.scheduled_for, held.trigger, now,
                           next_fire_at=state.next_fire_at,
                           runs_remaining=state.runs_remaining()):
        d.emit(event)


def _cancel(d: Decision, state: JobState, command: cmd.CancelRun, now: datetime) -> None:
    """Cancel a whole active run (RunCancelled ``user``) or one task instance of it.

    The fold keeps only active runs: an unknown or finished run is refused
    (``unknown_task_instance``; the API tells 404 from 409 by its read model), and so is a
    task instance already terminal (``already_in_state``).
    """
    run = state.run(command.run_id)
    if run is None:
        d.reject(command, RejectReason.UNKNOWN_TASK_INSTANCE,
                 f"no active run {command.run_id}")
        return
    if command.task is None:
        d.emit(ev.RunCancelled(run.run_id, ev.CancelReason.USER))
        _release_buffered(d, now)
        return
    ti = run.task(command.task)
    if ti is None:
        d.reject(command, RejectReason.UNKNOWN_TASK_INSTANCE,
                 f"run {run.run_id} has no task {command.task!r}")
        return
    if ti.state in TERMINAL_TASK_STATES:
        d.reject(command, RejectReason.ALREADY_IN_STATE, f"task {ti.task!r} is {ti.state}")
        return
    holder = ti.worker_id if ti.state is TaskState.CLAIMED else None
    d.emit(ev.TaskCancelled(run.run_id, ti.task, ti.attempt, holder))
    _finish_run_if_done(d, run.run_id, now)


def _replay(d: Decision, state: JobState, command: cmd.ReplayTask, idem_key: str) -> None:
    """Start a new run (trigger ``replay``) holding only ``command.task``, attempt 1."""
    if command.task not in state.spec.tasks:
        d.reject(command, RejectReason.UNKNOWN_TASK_INSTANCE,
                 f"job {d.job_id!r} has no task {command.task!r}")
        return
    run_id = run_id_for_replay(d.job_id, command.run_id, command.task, idem_key)
    if state.run(run_id) is not None:
        return
    d.emit(ev.RunScheduled(run_id, command.scheduled_for, ev.RunTrigger.REPLAY, (command.task,),
                           state.next_fire_at, state.runs_remaining(),
                           replay_of=command.run_id))
    d.emit(ev.TaskReady(run_id, command.task, 1, command.scheduled_for))


def _lease_command(
    d: Decision,
    command: cmd.ClaimTask | cmd.RenewLease | cmd.CompleteTask | cmd.ReleaseTask,
    now: datetime,
) -> None:
    state = d.live()
    run = state.run(command.run_id)
    ti = run.task(command.task) if run else None
    if run is None or ti is None:
        d.reject(command, RejectReason.UNKNOWN_TASK_INSTANCE,
                 f"no active task instance {command.run_id}/{command.task}")
        return
    spec = state.spec
    lease_ttl = spec.lease_ttl
    if isinstance(command, cmd.ClaimTask):
        if ti.state is not TaskState.READY or ti.attempt != command.attempt:
            d.reject(command, RejectReason.NOT_READY,
                     f"task instance is {ti.state} at attempt {ti.attempt}")
            return
        d.emit(ev.TaskClaimed(run.run_id, ti.task, ti.attempt, ti.epoch + 1, command.worker_id,
                              now + lease_ttl, lease_ttl, run.scheduled_for,
                              spec.command, spec.timeout, spec.action(), spec.grace,
                              now + spec.timeout + spec.grace + lease_ttl))
        return
    if ti.state is not TaskState.CLAIMED or command.epoch != ti.epoch:
        d.reject(command, RejectReason.STALE_EPOCH,
                 f"epoch {command.epoch} is not the current lease (epoch {ti.epoch}, {ti.state})")
        return
    if command.worker_id != ti.worker_id:
        d.reject(command, RejectReason.NOT_HOLDER, f"lease is held by {ti.worker_id}")
        return
    if isinstance(command, cmd.RenewLease):
        d.emit(ev.LeaseRenewed(run.run_id, ti.task, ti.attempt, ti.epoch, command.worker_id,
                               now + lease_ttl))
    elif isinstance(command, cmd.ReleaseTask):
        d.emit(ev.TaskReleased(run.run_id, ti.task, ti.attempt, ti.epoch, command.worker_id,
                               command.reason))
        d.emit(ev.TaskReady(run.run_id, ti.task, ti.attempt, run.scheduled_for))
    elif command.succeeded:
        d.emit(ev.TaskSucceeded(run.run_id, ti.task, ti.attempt, ti.epoch, command.worker_id,
                                command.exit_code or 0, command.output_tail,
                                command.started_at, command.finished_at))
        _finish_run_if_done(d, run.run_id, now)
    else:
        kind = command.failure_kind or cmd.FailureKind.NONZERO_EXIT
        _fail(d, run.run_id, ti, ev.TaskFailed(
            run.run_id, ti.task, ti.attempt, ti.epoch, command.worker_id, kind, command.exit_code,
            command.output_tail, command.started_at, command.finished_at), now)


def _fail(d: Decision, run_id: str, ti: TaskInstance, failed: ev.TaskFailed,
          now: datetime) -> None:
    policy = d.live().spec.retry_policy
    d.emit(failed)
    retry_at = None
    if policy.retryable(failed.failure_kind, failed.exit_code):
        retry_at = next_attempt_at(policy, run_id, ti.task, ti.attempt, now)
    if retry_at is not None:
        d.emit(ev.RetryScheduled(run_id, ti.task, ti.attempt + 1, retry_at))
    else:
        d.emit(ev.TaskDeadLettered(run_id, ti.task, ti.attempt, failed.failure_kind,
                                   failed.exit_code, failed.output_tail))
        _finish_run_if_done(d, run_id, now)


def _finish_run_if_done(d: Decision, run_id: str, now: datetime) -> None:
    run = d.live().run(run_id)
    if run is None:
        return
    states = [t.state for t in run.tasks]
    if all(s is TaskState.SUCCEEDED for s in states):
        d.emit(ev.RunSucceeded(run_id))
    elif all(s in TERMINAL_TASK_STATES for s in states):
        d.emit(ev.RunFailed(run_id))  # a cancelled task counts as failed
    else:
        return
    _release_buffered(d, now)
