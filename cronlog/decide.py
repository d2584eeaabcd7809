"""``decide`` for the job aggregate, and ``handle``: dedupe + decide + evolve for one command."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import assert_never

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.after import upstream_run_ended
from cronlog.breaker import check_breaker
from cronlog.decision import Decision
from cronlog.dispatch import grant_ready
from cronlog.errors import InvalidDefinition, InvariantViolation
from cronlog.firing import (
    fire_due_ticks,
    first_tick,
    rescheduled_tick,
    resume_tick,
)
from cronlog.ids import (
    command_digest,
    conflict_key,
    run_id_for_backfill,
    run_id_for_replay,
    run_id_for_tick,
    run_id_for_trigger,
)
from cronlog.interventions import cancel, drop_removed_tasks, rerun
from cronlog.job import JobState
from cronlog.leases import claim, complete, lease_digest, release, renew, tick_attempts
from cronlog.limits import MAX_BACKFILL_TASK_INSTANCES
from cronlog.progress import release_waiting
from cronlog.runs import start_run
from cronlog.slots import receive, settle_slots
from cronlog.tenants import tenant_mismatch
from cronlog.validation import validate_spec
from cronlog.vocabulary import (
    CancelReason,
    JobStatus,
    RejectReason,
    Reprocess,
    RunTrigger,
    UnsuspendReason,
)

WORKER_COMMANDS = (cmd.ClaimTask, cmd.RenewLease, cmd.CompleteTask, cmd.ReleaseTask)
"""Commands whose dedupe markers live in the worker window (``JobState.renewals``)."""
REPLY_COMMANDS = (*WORKER_COMMANDS, cmd.PollJob)
"""Commands whose events are copied to the sending worker's partition of ``cronlog.replies``."""
PLATFORM_MARKED = (*WORKER_COMMANDS, cmd.GrantSlots)
"""Commands whose dedupe markers live in the platform window (``JobState.renewals``): the
worker commands and the tenant ledger's grants."""
LEDGER_COMMANDS = (cmd.AskSlots, cmd.ReturnSlots, cmd.SetTenantLimits)
"""Commands addressed to the tenant ledger (``cronlog.ledger``), never to a job."""
UNMARKED_COMMANDS = (cmd.Tick, cmd.PollJob)
"""Commands that leave no dedupe marker: a Tick is idempotent by the schedule cursor and the
deterministic run_id, a poll by the task instances' state (a granted instance is no longer
ready) and their epochs."""


def handle(
    state: JobState | None, envelope: cmd.Addressed, record_time: datetime
) -> tuple[JobState | None, list[ev.Event]]:
    """Apply one command to a job: dedupe by idem_key, decide, evolve, advance the clock.

    Args:
        state: the job's record, None if it has none.
        envelope: the command with its idem_key and job_id.
        record_time: the Kafka record's timestamp (LogAppendTime), aware UTC.

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
    digest, so a forged command cannot take the holder's key) go to a window of their own,
    without digests,
    so that they never push out the markers of the rare user commands (register, pause,
    trigger, …); a worker command older than its window is still fenced by the task
    instance's state and epoch.
    Determinism: now = max(state.clock, record_time); the same log gives the same result.
    """
    user = not isinstance(envelope.command, (*PLATFORM_MARKED, *UNMARKED_COMMANDS))
    digest = command_digest(envelope.command) if user else ""
    marker = marker_key(envelope)
    if state is not None and state.has_applied(marker):
        first = state.applied_digest(envelope.idem_key) if user else None
        if first is None or first == digest:  # a re-delivery (or a marker without digest)
            return state, []
        return _refuse_reuse(state, envelope, first, digest, record_time)
    now = max(state.clock, record_time) if state is not None else record_time
    decision = Decision(state, envelope.job_id)
    decide(decision, envelope, now)
    check_breaker(decision, now)
    settle_slots(decision, state)
    new = decision.state
    if new is not None:
        new = replace(new, clock=now)
        if isinstance(envelope.command, PLATFORM_MARKED):
            new = new.with_renewal(marker)
        elif user:
            new = new.with_applied(envelope.idem_key, digest)
    return new, decision.events


def _refuse_reuse(
    state: JobState, envelope: cmd.Addressed, first: str, digest: str, record_time: datetime
) -> tuple[JobState, list[ev.Event]]:
    """Refuse a command that re-uses an applied idem_key with other content, once.

    The refusal is marked applied under ``conflict_key(idem_key, digest)`` (with ``digest``),
    so a re-delivery of the same conflicting command is a no-op; its events take their
    event_ids from that key (``event_key``).
    """
    key = conflict_key(envelope.idem_key, digest)
    if state.has_applied(key):
        return state, []
    d = Decision(state, envelope.job_id)
    d.reject(
        envelope.command,
        RejectReason.IDEMPOTENCY_CONFLICT,
        f"idem_key {envelope.idem_key!r} was already used on job {envelope.job_id!r} by "
        f"another command (digest {first}; this {type(envelope.command).__name__}: {digest}); "
        "a key names one command, send a new key for a new one",
    )
    now = max(state.clock, record_time)
    return replace(state.with_applied(key, digest), clock=now), d.events


def marker_key(envelope: cmd.Addressed) -> str:
    """Return the key a command is deduplicated (and its events named) by.

    The idem_key; for a worker command carrying a lease token, the idem_key with the token's
    digest (``idem_key#digest``). Worker keys are predictable from public values (run, task,
    epoch): without the digest, a forged command sent first under the holder's key would be
    refused and yet take the key, and the holder's own command would then be dropped as a
    re-delivery (found by review: a completion lost, the task run again).
    """
    command = envelope.command
    if isinstance(command, WORKER_COMMANDS) and command.lease_token:
        return f"{envelope.idem_key}#{lease_digest(command.lease_token)}"
    return envelope.idem_key


def event_key(envelope: cmd.Addressed, event: ev.Event) -> str:
    """Return the key the adapter derives ``event``'s event_id from (with job_id and index).

    The command's ``marker_key``, except for the refusal of a re-used key
    (``idempotency_conflict``):
    ``conflict_key(idem_key, command_digest(command))``, since the first command's events own
    the ids of the idem_key (DESIGN.md invariant 6: one event_id, one content).
    """
    if isinstance(event, ev.CommandRejected) and (
        event.reason is RejectReason.IDEMPOTENCY_CONFLICT
    ):
        return conflict_key(envelope.idem_key, command_digest(envelope.command))
    return marker_key(envelope)


def decide(d: Decision, envelope: cmd.Addressed, now: datetime) -> None:
    """Decide the events of one command, emitting them into ``d``.

    Business refusals become CommandRejected events; nothing here raises for bad input.
    """
    state, command = d.state, envelope.command
    wrong = tenant_mismatch(state.spec.tenant if state is not None else None, envelope)
    if wrong is not None:  # a deleted job's id stays its tenant's: no take-over by re-register
        d.reject(command, RejectReason.WRONG_TENANT, wrong)
        return
    if isinstance(command, cmd.RegisterJob):
        _register(d, command, now)
        return
    if isinstance(command, cmd.GrantSlots):  # a job with no record gives them back
        receive(d, command)
        return
    if isinstance(command, LEDGER_COMMANDS):
        d.reject(
            command,
            RejectReason.UNKNOWN_JOB,
            f"a {type(command).__name__} is addressed to the tenant ledger, not a job",
        )
        return
    if state is None:
        d.reject(command, RejectReason.UNKNOWN_JOB, f"job {envelope.job_id!r} is not registered")
        return
    if state.status is JobStatus.DELETED and not isinstance(
        command,
        (cmd.Tick, cmd.PollJob, *WORKER_COMMANDS, cmd.CancelRun),
    ):
        # runs started before the delete go on to their end (a DAG's later tasks included)
        # and can still be cancelled; nothing new starts
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
        case cmd.ResumeJob() if state.suspended_until is not None:
            # an operator closes an open circuit (cronlog.breaker); a paused job stays paused
            d.emit(ev.JobUnsuspended(reason=UnsuspendReason.OPERATOR))
            release_waiting(d, now)
        case cmd.ResumeJob():
            if state.status is JobStatus.ACTIVE:
                d.reject(command, RejectReason.ALREADY_IN_STATE, "job is not paused")
            else:
                nxt = resume_tick(
                    state.spec.schedule, state.next_fire_at, now, d.job_id, catchup=command.catchup
                )
                d.emit(ev.JobResumed(next_fire_at=nxt, catchup=command.catchup))
                if command.catchup:  # the owed ticks are decided now, not on the next Tick
                    _fire(d, now)
        case cmd.DeleteJob():
            for queued in state.queue:  # never started: cancelled with the job
                d.emit(
                    ev.RunCancelled(
                        run_id=queued.run_id,
                        reason=CancelReason.JOB_DELETED,
                        scheduled_for=queued.scheduled_for,
                        tenant=state.spec.tenant,
                    )
                )
            d.emit(ev.JobDeleted())
        case cmd.TriggerJob():
            run_id = run_id_for_trigger(envelope.job_id, envelope.idem_key)
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
        case cmd.BackfillJob():
            _backfill(d, state, command, envelope.idem_key, now)
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
            cancel(d, state, command, now)
        case cmd.RerunTask():
            rerun(d, command, now)
        case cmd.ReplayTask():
            _replay(d, state, command, envelope.idem_key, now)
        case cmd.UpstreamRunEnded():
            upstream_run_ended(d, state, command, now)
        case cmd.RegisterJob() | cmd.GrantSlots() | cmd.AskSlots() | cmd.ReturnSlots():
            raise AssertionError("handled above")
        case cmd.SetTenantLimits():
            raise AssertionError("handled above")
        case cmd.PollTasks():  # the adapter answers it per partition, job by job
            raise InvariantViolation("a PollTasks is decided as a PollJob for each job")
        case _:
            assert_never(command)


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


def _update(d: Decision, state: JobState, command: cmd.UpdateJob, now: datetime) -> None:
    try:
        validate_spec(command.spec, job_id=d.job_id)
    except InvalidDefinition as exc:
        d.reject(command, RejectReason.INVALID_DEFINITION, str(exc))
        return
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


def backfill_ticks(state: JobState, ticks: tuple[datetime, ...], now: datetime) -> list[datetime]:
    """Return the ticks of a backfill that are the backfill's to run, ascending, once each.

    A tick after ``now`` or at/after the schedule's cursor (``next_fire_at``) is still the
    schedule's: it will be fired or skipped by a Tick with the tick's own run_id, so a
    backfill run for it could share that id. Those are dropped.
    """
    cursor = state.next_fire_at
    return sorted({t for t in ticks if t <= now and (cursor is None or t < cursor)})


def _backfill(
    d: Decision, state: JobState, command: cmd.BackfillJob, idem_key: str, now: datetime
) -> None:
    """Start a run (trigger ``backfill``) for each of the command's past ticks.

    ``reprocess=none``: the run_id is the tick's own, so a tick whose run is active (or held
    by ``buffer_one``) is left alone, and a re-delivered command creates nothing twice.
    Otherwise the run_id derives from the command's idem_key: a new run beside the old ones.
    Backfill runs are not jittered, never move the cursor, do not count toward ``max_runs``
    and are exempt from the overlap policy and ``max_active_runs`` (the user asked for each
    of them; the command's ``MAX_BACKFILL_TICKS`` and the record size limit bound them).

    A backfill that would start more than ``MAX_BACKFILL_TASK_INSTANCES`` task instances can
    never fit the job's record: it is refused (``record_too_large``) before any run is built.
    """
    if len(command.ticks) > cmd.MAX_BACKFILL_TICKS:
        d.reject(
            command,
            RejectReason.INVALID_DEFINITION,
            f"ticks: at most {cmd.MAX_BACKFILL_TICKS} ticks per backfill, got {len(command.ticks)}",
        )
        return
    starts = _backfill_runs(d.job_id, state, command, idem_key, now)
    tasks = len(state.spec.tasks)
    if len(starts) * tasks > MAX_BACKFILL_TASK_INSTANCES:
        d.reject(
            command,
            RejectReason.RECORD_TOO_LARGE,
            f"ticks: {len(starts)} new runs x {tasks} tasks = {len(starts) * tasks} task "
            f"instances; a backfill may start at most {MAX_BACKFILL_TASK_INSTANCES} (more never "
            "fit the job's record): send fewer ticks per backfill",
        )
        return
    for tick, run_id in starts:
        current = d.live()
        d.emit_all(
            start_run(
                current,
                run_id=run_id,
                scheduled_for=tick,
                trigger=RunTrigger.BACKFILL,
                now=now,
                next_fire_at=current.next_fire_at,
                runs_remaining=current.runs_remaining(),
            )
        )


def _backfill_runs(
    job_id: str, state: JobState, command: cmd.BackfillJob, idem_key: str, now: datetime
) -> list[tuple[datetime, str]]:
    """Return ``(tick, run_id)`` of each run a backfill starts, ascending by tick.

    The ticks of ``backfill_ticks``, less those whose run_id is active, held by
    ``buffer_one``, or an earlier tick's (two instants in the same millisecond).
    """
    taken = {r.run_id for r in state.runs}
    if state.buffered is not None:
        taken.add(state.buffered.run_id)
    starts: list[tuple[datetime, str]] = []
    for tick in backfill_ticks(state, command.ticks, now):
        if command.reprocess is Reprocess.NONE:
            run_id = run_id_for_tick(job_id, tick, state.incarnation)
        else:
            run_id = run_id_for_backfill(job_id, tick, idem_key)
        if run_id not in taken:
            taken.add(run_id)
            starts.append((tick, run_id))
    return starts


def _tick(d: Decision, now: datetime) -> None:
    tick_attempts(d, now)
    release_waiting(d, now)
    _fire(d, now)


def _fire(d: Decision, now: datetime) -> None:
    state = d.live()
    if state.status is JobStatus.ACTIVE:
        for event in fire_due_ticks(state, now):
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
