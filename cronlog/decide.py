"""``decide`` for the job aggregate, and ``handle``: dedupe + decide + evolve for one command."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import assert_never

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.after import upstream_run_ended
from cronlog.backfill import backfill
from cronlog.breaker import check_breaker
from cronlog.decision import Decision
from cronlog.dedupe import (
    WORKER_COMMANDS,
    by_horizon,
    marker_key,
    refuse_reuse,
    sender_key,
    worker_sender,
)
from cronlog.dispatch import grant_ready
from cronlog.errors import InvalidDefinition, InvariantViolation
from cronlog.firing import (
    fire_due_ticks,
    first_tick,
    rescheduled_tick,
    resume_tick,
)
from cronlog.idem import MarkerBook, new_marker
from cronlog.ids import (
    command_digest,
    run_id_for_replay,
    run_id_for_trigger,
)
from cronlog.interventions import cancel, drop_removed_tasks, rerun
from cronlog.job import JobState
from cronlog.leases import claim, complete, lease_digest, release, renew, tick_attempts
from cronlog.progress import release_waiting
from cronlog.runs import start_run
from cronlog.slots import receive, settle_slots
from cronlog.tenants import tenant_mismatch
from cronlog.validation import validate_spec
from cronlog.vocabulary import (
    CancelReason,
    JobStatus,
    RejectReason,
    RunTrigger,
    UnsuspendReason,
)

REPLY_COMMANDS = (*WORKER_COMMANDS, cmd.PollJob)
"""Commands whose events are copied to the sending worker's partition of ``cronlog.replies``."""
PLATFORM_MARKED = (*WORKER_COMMANDS, cmd.GrantSlots)
"""Commands whose dedupe markers live in the platform window (``JobState.renewals``): the
worker commands and the tenant ledger's grants."""
LEDGER_COMMANDS = (cmd.AskSlots, cmd.ReturnSlots, cmd.SetTenantLimits)
"""Commands addressed to the tenant ledger (``cronlog.ledger``), never to a job."""
AFTER_DELETE = (cmd.Tick, cmd.PollJob, *WORKER_COMMANDS, cmd.CancelRun)
"""Commands a deleted job still decides: its started runs go on to their end."""
UNMARKED_COMMANDS = (cmd.Tick, cmd.PollJob)
"""Commands that leave no dedupe marker: a Tick is idempotent by the schedule cursor and the
deterministic run_id, a poll by the task instances' state (a granted instance is no longer
ready) and their epochs."""


def handle(
    state: JobState | None,
    envelope: cmd.Addressed,
    record_time: datetime,
    book: MarkerBook | None = None,
) -> tuple[JobState | None, list[ev.Event]]:
    """Apply one command to a job: dedupe by idem_key, decide, evolve, advance the clock.

    Args:
        state: the job's record, None if it has none.
        envelope: the command with its idem_key and job_id.
        record_time: the Kafka record's timestamp (LogAppendTime), aware UTC.
        book: the markers of external commands kept for the dedupe horizon
            (``cronlog.idem``; the fold's marker store). None: only the record's own window.

    Returns:
        ``(state after, events)``. A command whose idem_key is already applied returns the
        state unchanged and no events, unless it is another command re-using the key: that
        one is refused (``_refuse_reuse``).

    Idempotency: every applied command leaves its idem_key in the record's recent markers,
    except Ticks and polls (``UNMARKED_COMMANDS``).
    A user command's marker carries its ``command_digest``, so a re-delivery (same digest) is
    told from a re-use of the key by another command (another digest: refused with
    ``idempotency_conflict``). The keys of worker commands (ClaimTask, RenewLease,
    CompleteTask, ReleaseTask: several per run; ``marker_key``: with the lease token's
    digest, so a forged command cannot take the holder's key) and of the tenant ledger's
    GrantSlots (``PLATFORM_MARKED``) go to a window of their own, without digests, so that
    they never push out the markers of the rare user commands (register, pause, trigger, …);
    a worker command older than its window is still fenced by the task instance's state and
    epoch.
    With a ``book``, a user command is first judged by the horizon (``by_horizon``): past it
    (by its ``issued_at``) it is refused, within it its marker in the book makes it a
    duplicate (or a conflict) whatever number of commands came between; applied, it leaves
    a marker there as well as in the record's window.
    Determinism: now = max(state.clock, record_time); the same log gives the same result.
    """
    user = not isinstance(envelope.command, (*PLATFORM_MARKED, *UNMARKED_COMMANDS))
    sender = worker_sender(envelope.command)
    digest = command_digest(envelope.command) if user else ""
    marker = marker_key(envelope)
    now = max(state.clock, record_time) if state is not None else record_time
    if user and book is not None:
        judged = by_horizon(state, envelope, digest, now, book)
        if judged is not None:
            return judged
    if state is not None and state.has_applied(marker):
        if sender is not None:  # a worker command: its sender is marked beside its key
            if state.has_applied(sender_key(marker, sender)):
                return state, []  # a re-delivery
            conflicting = command_digest(envelope.command)  # rare: computed only here
            return refuse_reuse(state, envelope, None, conflicting, record_time)
        first = state.applied_digest(envelope.idem_key) if user else None
        if first is None or first == digest:  # a re-delivery (or a marker without digest)
            return state, []
        return refuse_reuse(state, envelope, first, digest, record_time, book)
    decision = Decision(state, envelope.job_id)
    decide(decision, envelope, now)
    check_breaker(decision, now)
    settle_slots(decision, state)
    new = decision.state
    if new is not None:
        new = replace(new, clock=now)
        if isinstance(envelope.command, PLATFORM_MARKED):
            new = new.with_renewal(marker)
            if sender is not None:
                new = new.with_renewal(sender_key(marker, sender))
        elif user:
            new = new.with_applied(envelope.idem_key, digest)
            if book is not None:
                mark = new_marker(digest, envelope.issued_at, now, book.rules)
                book.put(envelope.job_id, envelope.idem_key, mark)
    return new, decision.events


def decide(d: Decision, envelope: cmd.Addressed, now: datetime) -> None:
    """Decide the events of one command, emitting them into ``d``.

    Business refusals become CommandRejected events (``_refusal`` first, then each rule's
    own); nothing here raises for bad input.
    """
    command = envelope.command
    refusal = _refusal(d.state, envelope)
    if refusal is not None:
        d.reject(command, *refusal)
        return
    match command:
        case cmd.RegisterJob():
            _register(d, command, now)
        case cmd.GrantSlots():  # a job with no record gives them back
            receive(d, command)
        case cmd.UpdateJob():
            _update(d, command, now)
        case cmd.PauseJob():
            _pause(d, command, now)
        case cmd.ResumeJob():
            _resume(d, command, now)
        case cmd.DeleteJob():
            _delete(d)
        case cmd.TriggerJob():
            _trigger(d, envelope.idem_key, now)
        case cmd.BackfillJob():
            backfill(d, d.live(), command, envelope.idem_key, now)
        case cmd.Tick():
            _tick(d, now)
        case cmd.ClaimTask():
            claim(d, command, now)
        case cmd.RenewLease():
            renew(d, command, now)
        case cmd.CompleteTask():
            complete(d, command, now)
        case cmd.ReleaseTask():
            release(d, command)
        case cmd.PollJob():
            grant_ready(d, command, now, lease_digest(command.lease_token))
        case cmd.CancelRun():
            cancel(d, d.live(), command, now)
        case cmd.RerunTask():
            rerun(d, command, now)
        case cmd.ReplayTask():
            _replay(d, d.live(), command, envelope.idem_key, now)
        case cmd.UpstreamRunEnded():
            upstream_run_ended(d, d.live(), command, now)
        case cmd.AskSlots() | cmd.ReturnSlots() | cmd.SetTenantLimits():
            raise AssertionError("refused by _refusal")
        case cmd.PollTasks():  # the adapter answers it per partition, job by job
            raise InvariantViolation("a PollTasks is decided as a PollJob for each job")
        case _:
            assert_never(command)


def _refusal(state: JobState | None, envelope: cmd.Addressed) -> tuple[RejectReason, str] | None:
    """Return why ``envelope``'s command may not reach the job at all, or None.

    In order: another tenant's command (``wrong_tenant``; a deleted job's id stays its
    tenant's: no take-over by re-register); a tenant ledger command or any but RegisterJob
    and GrantSlots for a job with no record (``unknown_job``); a command that would start
    something new on a deleted job (``job_deleted``: runs started before the delete go on to
    their end, a DAG's later tasks included, and can still be cancelled).
    """
    command = envelope.command
    wrong = tenant_mismatch(state.spec.tenant if state is not None else None, envelope)
    if wrong is not None:
        return RejectReason.WRONG_TENANT, wrong
    if isinstance(command, (cmd.RegisterJob, cmd.GrantSlots)):
        return None  # decided with or without a record
    if isinstance(command, LEDGER_COMMANDS):
        detail = f"a {type(command).__name__} is addressed to the tenant ledger, not a job"
        return RejectReason.UNKNOWN_JOB, detail
    if state is None:
        return RejectReason.UNKNOWN_JOB, f"job {envelope.job_id!r} is not registered"
    if state.status is JobStatus.DELETED and not isinstance(command, AFTER_DELETE):
        return RejectReason.JOB_DELETED, f"job {envelope.job_id!r} was deleted"
    return None


def _pause(d: Decision, command: cmd.PauseJob, now: datetime) -> None:
    """Pause the job, after deciding the ticks that came due before ``now`` (``_fire``)."""
    if d.live().status is JobStatus.PAUSED:
        d.reject(command, RejectReason.ALREADY_IN_STATE, "job is already paused")
    else:
        _fire(d, now, before_now=True)
        d.emit(ev.JobPaused())


def _resume(d: Decision, command: cmd.ResumeJob, now: datetime) -> None:
    """Close an open circuit (an operator's resume; a paused job stays paused), or resume."""
    state = d.live()
    if state.suspended_until is not None:  # cronlog.breaker
        d.emit(ev.JobUnsuspended(reason=UnsuspendReason.OPERATOR))
        release_waiting(d, now)
    elif state.status is JobStatus.ACTIVE:
        d.reject(command, RejectReason.ALREADY_IN_STATE, "job is not paused")
    else:
        schedule, catchup = state.spec.schedule, command.catchup
        nxt = resume_tick(schedule, state.next_fire_at, now, d.job_id, catchup=catchup)
        d.emit(ev.JobResumed(next_fire_at=nxt, catchup=catchup))
        if catchup:  # the owed ticks are decided now, not on the next Tick
            _fire(d, now)


def _delete(d: Decision) -> None:
    """Delete the job; its queued runs, never started, are cancelled with it."""
    state = d.live()
    for queued in state.queue:
        d.emit(
            ev.RunCancelled(
                run_id=queued.run_id,
                reason=CancelReason.JOB_DELETED,
                scheduled_for=queued.scheduled_for,
                tenant=state.spec.tenant,
            )
        )
    d.emit(ev.JobDeleted())


def _trigger(d: Decision, idem_key: str, now: datetime) -> None:
    """Start a manual run now, its run_id from the command's idem_key."""
    state = d.live()
    run_id = run_id_for_trigger(d.job_id, idem_key)
    if state.run(run_id) is not None:
        return  # a re-delivered trigger whose run is still active: nothing new
    d.emit_all(
        start_run(
            state,
            run_id=run_id,
            scheduled_for=now,
            trigger=RunTrigger.MANUAL,
            now=now,
            next_fire_at=state.next_fire_at,
            runs_remaining=None,
        )
    )


def _register(d: Decision, command: cmd.RegisterJob, now: datetime) -> None:
    if d.state is not None and d.state.status is not JobStatus.DELETED:
        d.reject(command, RejectReason.JOB_EXISTS, f"job {d.job_id!r} is already registered")
        return
    try:
        validate_spec(command.spec, job_id=d.job_id)
    except InvalidDefinition as exc:
        d.reject(command, RejectReason.INVALID_DEFINITION, str(exc))
        return
    d.emit(
        ev.JobRegistered(
            spec=command.spec,
            next_fire_at=first_tick(command.spec.schedule, now, d.job_id),
            runs_remaining=command.spec.schedule.max_runs,
        )
    )


def _update(d: Decision, command: cmd.UpdateJob, now: datetime) -> None:
    """Redefine the job; a new schedule first decides the old one's ticks due by ``now``."""
    try:
        validate_spec(command.spec, job_id=d.job_id)
    except InvalidDefinition as exc:
        d.reject(command, RejectReason.INVALID_DEFINITION, str(exc))
        return
    if command.spec.schedule != d.live().spec.schedule:
        _fire(d, now, before_now=True)
    state = d.live()
    nxt = rescheduled_tick(
        state.spec.schedule, command.spec.schedule, state.next_fire_at, now, d.job_id
    )
    limit = command.spec.schedule.max_runs
    d.emit(
        ev.JobRedefined(
            spec=command.spec,
            next_fire_at=nxt,
            runs_remaining=None if limit is None else max(0, limit - state.runs_fired),
        )
    )
    drop_removed_tasks(d, now)


def _tick(d: Decision, now: datetime) -> None:
    tick_attempts(d, now)
    release_waiting(d, now)
    _fire(d, now)


def _fire(d: Decision, now: datetime, *, before_now: bool = False) -> None:
    """Decide every tick of an active job due by ``now`` (``fire_due_ticks``).

    A Tick does it; so do a PauseJob and a schedule change (``before_now``: the ticks strictly
    before their instant), before they stop or move the cursor: the fold may be behind (its
    owner dead or stalled, no Tick appended meanwhile), and a tick that came due while the job
    was active is owed (DESIGN.md invariant 1) whether or not a Tick deciding it came first.
    """
    state = d.live()
    if state.status is JobStatus.ACTIVE:
        for event in fire_due_ticks(state, now, before_now=before_now):
            d.emit(event)


def _replay(
    d: Decision, state: JobState, command: cmd.ReplayTask, idem_key: str, now: datetime
) -> None:
    """Start a new run (trigger ``replay``) holding only ``command.task``, attempt 1."""
    if command.task not in state.spec.tasks:
        d.reject(
            command,
            RejectReason.UNKNOWN_TASK_INSTANCE,
            f"job {d.job_id!r} has no task {command.task!r}",
        )
        return
    run_id = run_id_for_replay(d.job_id, command.run_id, command.task, idem_key)
    if state.run(run_id) is not None:
        return
    d.emit_all(
        start_run(
            state,
            run_id=run_id,
            scheduled_for=command.scheduled_for,
            trigger=RunTrigger.REPLAY,
            now=now,
            next_fire_at=state.next_fire_at,
            runs_remaining=state.runs_remaining(),
            tasks=(command.task,),
            replay_of=command.run_id,
        )
    )
