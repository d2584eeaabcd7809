"""Leases and attempts: what workers ask, what Ticks expire, what failures lead to.

Claims, renewals, completions and releases by workers; lease expiry and the hard deadline on
a Tick; a failed attempt's retry after its backoff, or its dead letter.

Fencing (DESIGN.md, invariant 3): every claim bumps the epoch; a renewal, completion or
release with another epoch, or from a worker that is not the holder, is refused and the
refusal is an event. Called by ``decide``; every function emits into a ``Decision``.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from functools import lru_cache

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.decision import Decision
from cronlog.job import Run, TaskInstance
from cronlog.priority import rank
from cronlog.progress import advance_run, time_out
from cronlog.retry import next_attempt_at
from cronlog.slots import free_slots
from cronlog.vocabulary import WAITING_TASK_STATES, FailureKind, RejectReason, TaskState


def tick_attempts(d: Decision, now: datetime) -> None:
    """Decide what a Tick does to a job's runs: timeouts, lease expiry, retries.

    Stops runs past their timeout, expires lapsed leases, takes back attempts past their hard
    deadline, and releases retries and jittered starts whose time has come.

    Emits:
        ``time_out``'s events for a run past ``timeout_at``; for a lease past
        ``lease_expires_at``, LeaseExpired then TaskReady for the next attempt (a crash is not
        a failure: it spends no retry), or, once the task's lease expiries exceed the job's
        ``max_lease_expiries``, TaskFailed (kind ``lease_expired``) and TaskDeadLettered; ``fail``'s
        events (kind ``timeout``) for a claim past its hard deadline (claim + timeout +
        grace + lease ttl, TaskClaimed.deadline_at); TaskReady for a retry or a delayed start
        whose ``retry_at`` has passed.
    Refusals: none (time passing is a fact).
    """
    for run in d.live().runs:
        if run.timeout_at is not None and run.timeout_at <= now:
            time_out(d, run, now)
            continue
        for ti in run.tasks:
            if (
                ti.state is TaskState.CLAIMED
                and ti.lease_expires_at is not None
                and ti.lease_expires_at <= now
            ):
                expire_lease(d, run, ti, now)
            elif (
                ti.state is TaskState.CLAIMED
                and ti.deadline_at is not None
                and ti.deadline_at <= now
            ):
                # The holder still renews but is past timeout + grace + ttl: its own timeout
                # enforcement failed (or the task ignores signals). Take the attempt back;
                # its next renewal is refused and it kills the process group.
                fail(
                    d,
                    run.run_id,
                    ti,
                    ev.TaskFailed(
                        run_id=run.run_id,
                        task=ti.task,
                        attempt=ti.attempt,
                        epoch=ti.epoch,
                        worker_id=ti.worker_id or "",
                        failure_kind=FailureKind.TIMEOUT,
                        exit_code=None,
                        output_tail=(
                            f"hard deadline {ti.deadline_at.isoformat()} passed (timeout + "
                            "grace + lease ttl after the claim); the attempt was taken back"
                        ),
                        started_at=None,
                        finished_at=now,
                    ),
                    now,
                )
            elif ti.state in WAITING_TASK_STATES and ti.retry_at is not None and ti.retry_at <= now:
                d.emit(
                    ev.TaskReady(
                        run_id=run.run_id,
                        task=ti.task,
                        attempt=ti.attempt,
                        scheduled_for=run.scheduled_for,
                    )
                )


def lease_command(
    d: Decision,
    command: cmd.ClaimTask | cmd.RenewLease | cmd.CompleteTask | cmd.ReleaseTask,
    now: datetime,
) -> None:
    """Decide a worker's command on one attempt's lease.

    Emits:
        ClaimTask: TaskClaimed (epoch + 1, lease until now + lease ttl, what to run, the hard
        deadline). RenewLease: LeaseRenewed (lease until now + lease ttl). ReleaseTask:
        TaskReleased, then TaskReady for the same attempt (not a failure). CompleteTask:
        TaskSucceeded then ``advance_run``'s events, or ``fail``'s events.
    Refusals:
        ``unknown_task_instance``: no such active run or task instance (it may have ended).
        ``not_ready``: a claim of an attempt that is not ready (already claimed, or another
        attempt), or of a ledger tenant's job with no free tenant slot. ``stale_epoch``: a
        renewal, completion or release whose epoch is not the current lease's, or of an
        attempt no longer claimed. ``not_holder``: from a worker
        that does not hold the lease.
    """
    state = d.live()
    run = state.run(command.run_id)
    ti = run.task(command.task) if run else None
    if run is None or ti is None:
        d.reject(
            command,
            RejectReason.UNKNOWN_TASK_INSTANCE,
            f"no active task instance {command.run_id}/{command.task}",
        )
        return
    task = state.spec.task_spec(ti.task)
    lease_ttl = task.lease_ttl or state.spec.lease_ttl
    if isinstance(command, cmd.ClaimTask):
        if ti.state is not TaskState.READY or ti.attempt != command.attempt:
            d.reject(
                command,
                RejectReason.NOT_READY,
                f"task instance is {ti.state} at attempt {ti.attempt}",
            )
            return
        if free_slots(state) == 0:  # a ledger tenant's job: only under a tenant slot
            d.reject(
                command,
                RejectReason.NOT_READY,
                "task instance waits for a tenant slot (docs/tenants.md, the tenant ledger)",
            )
            return
        grant(d, run, ti, command.worker_id, now, lease_digest(command.lease_token))
        return
    if ti.state is not TaskState.CLAIMED or command.epoch != ti.epoch:
        d.reject(
            command,
            RejectReason.STALE_EPOCH,
            f"epoch {command.epoch} is not the current lease (epoch {ti.epoch}, {ti.state})",
        )
        return
    if command.worker_id != ti.worker_id:
        d.reject(command, RejectReason.NOT_HOLDER, f"lease is held by {ti.worker_id}")
        return
    if ti.lease_token_digest and lease_digest(command.lease_token) != ti.lease_token_digest:
        d.reject(
            command,
            RejectReason.NOT_HOLDER,
            "the lease token is not the grant's (a command not from the holding worker)",
        )
        return
    if isinstance(command, cmd.RenewLease):
        d.emit(
            ev.LeaseRenewed(
                run_id=run.run_id,
                task=ti.task,
                attempt=ti.attempt,
                epoch=ti.epoch,
                worker_id=command.worker_id,
                lease_expires_at=now + lease_ttl,
            )
        )
    elif isinstance(command, cmd.ReleaseTask):
        d.emit(
            ev.TaskReleased(
                run_id=run.run_id,
                task=ti.task,
                attempt=ti.attempt,
                epoch=ti.epoch,
                worker_id=command.worker_id,
                reason=command.reason,
            )
        )
        d.emit(
            ev.TaskReady(
                run_id=run.run_id, task=ti.task, attempt=ti.attempt, scheduled_for=run.scheduled_for
            )
        )
    elif command.succeeded:
        mark = len(d.events)
        d.emit(
            ev.TaskSucceeded(
                run_id=run.run_id,
                task=ti.task,
                attempt=ti.attempt,
                epoch=ti.epoch,
                worker_id=command.worker_id,
                exit_code=command.exit_code or 0,
                output_tail=command.output_tail,
                started_at=command.started_at,
                finished_at=command.finished_at,
            )
        )
        advance_run(d, run.run_id, now)
        if command.claim_next > 0:
            _grant_next(
                d,
                run.run_id,
                command.worker_id,
                command.claim_next,
                mark,
                now,
                lease_digest(command.lease_token),
            )
    else:
        kind = command.failure_kind or FailureKind.NONZERO_EXIT
        fail(
            d,
            run.run_id,
            ti,
            ev.TaskFailed(
                run_id=run.run_id,
                task=ti.task,
                attempt=ti.attempt,
                epoch=ti.epoch,
                worker_id=command.worker_id,
                failure_kind=kind,
                exit_code=command.exit_code,
                output_tail=command.output_tail,
                started_at=command.started_at,
                finished_at=command.finished_at,
            ),
            now,
        )


@lru_cache(maxsize=1024)  # a worker's secret is the same on all its commands: hash it once
def lease_digest(token: str) -> str:
    """Return what a grant keeps of a worker's lease secret (32 hex digits of its SHA-256).

    "" for no secret: a worker from before lease tokens, whose commands are not checked.

    The secret travels only in worker commands (``cronlog.commands``, an internal topic);
    run-events and the API carry at most this digest, so who reads a run (its epoch and
    worker id are public) still cannot forge a completion.
    """
    return hashlib.sha256(token.encode()).hexdigest()[:32] if token else ""


def grant(
    d: Decision, run: Run, ti: TaskInstance, worker_id: str, now: datetime, token_digest: str = ""
) -> None:
    """Grant the lease on ``ti``'s current attempt to ``worker_id``.

    Emits:
        TaskClaimed: epoch + 1, lease until now + lease ttl, what to run and its limits, and
        the hard deadline (claim + timeout + grace + lease ttl).
    """
    spec = d.live().spec
    task = spec.task_spec(ti.task)
    lease_ttl = task.lease_ttl or spec.lease_ttl
    timeout, grace = task.timeout or spec.timeout, spec.grace
    d.emit(
        ev.TaskClaimed(
            run_id=run.run_id,
            task=ti.task,
            attempt=ti.attempt,
            epoch=ti.epoch + 1,
            worker_id=worker_id,
            lease_expires_at=now + lease_ttl,
            lease_ttl=lease_ttl,
            scheduled_for=run.scheduled_for,
            command=task.command,
            timeout=timeout,
            action=task.action(),
            grace=grace,
            deadline_at=now + timeout + grace + lease_ttl,
            lease_token_digest=token_digest,
        )
    )


def _grant_next(
    d: Decision,
    run_id: str,
    worker_id: str,
    most: int,
    mark: int,
    now: datetime,
    token_digest: str = "",
) -> None:
    """Grant the completing worker up to ``most`` of the tasks its completion readied.

    Tasks of the same run, in the order they were readied (eager dispatch: the adapter keeps
    a task granted in the same decision off the ready topic).

    Emits:
        TaskClaimed (``grant``) for each, after the completion's own events.
    """
    if free_slots(d.live()) is not None:
        return  # a ledger tenant's job: the ended lease's slot goes back (cronlog.slots)
    readied = [e for e in d.events[mark:] if isinstance(e, ev.TaskReady) and e.run_id == run_id]
    for ready in readied[:most]:
        run = d.live().run(run_id)
        ti = run.task(ready.task) if run is not None else None
        if run is not None and ti is not None and ti.state is TaskState.READY:
            grant(d, run, ti, worker_id, now, token_digest)


def grant_ready(
    d: Decision, worker_id: str, most: int, now: datetime, token_digest: str = ""
) -> int:
    """Grant ``worker_id`` up to ``most`` of the job's ready task instances (a poll).

    Smallest rank first (``cronlog.priority.rank``: the run's ``scheduled_for`` less the
    task's priority class times the job's aging), then run_id, then definition order within a
    run: the order the partition's ready index serves jobs in (docs/dispatch.md).

    Returns:
        How many were granted.

    Emits:
        TaskClaimed (``grant``) for each.
    Refusals: none (a job with nothing ready grants nothing).
    """
    state = d.live()
    ready = sorted(
        (
            (rank(state.spec, run.waiting_since, ti.task), run.run_id, i, run, ti)
            for run in state.runs
            for i, ti in enumerate(run.tasks)
            if ti.state is TaskState.READY
        ),
        key=lambda item: item[:3],
    )
    free = free_slots(state)  # a job of a ledger tenant: only under its tenant slots
    most = most if free is None else min(most, free)
    for _, _, _, run, ti in ready[:most]:
        grant(d, run, ti, worker_id, now, token_digest)
    return min(most, len(ready))


def expire_lease(d: Decision, run: Run, ti: TaskInstance, now: datetime) -> None:
    """A lease lapsed: give the task instance back, or end it once it has lapsed too often.

    DESIGN.md's state machine: "claimed → scheduled: lease expired — reclaim". The holder
    crashed or hung; that is not a failure of the task, so the next attempt is ready at once
    (its claim bumps the epoch; the holder, if alive, is refused at its next renewal) and the
    retry budget is untouched. A task that kills every worker it lands on is stopped by a
    bound of its own: past ``max_lease_expiries`` lapses in the series it is dead-lettered
    (kind ``lease_expired``) whatever its retry policy.

    Emits:
        LeaseExpired, then TaskReady (attempt + 1), or TaskFailed (``lease_expired``),
        TaskDeadLettered and ``advance_run``'s events.
    """
    holder = ti.worker_id or ""
    d.emit(
        ev.LeaseExpired(
            run_id=run.run_id, task=ti.task, attempt=ti.attempt, epoch=ti.epoch, worker_id=holder
        )
    )
    if ti.lease_expiries + 1 <= d.live().spec.max_lease_expiries:
        d.emit(
            ev.TaskReady(
                run_id=run.run_id,
                task=ti.task,
                attempt=ti.attempt + 1,
                scheduled_for=run.scheduled_for,
            )
        )
        return
    failed = ev.TaskFailed(
        run_id=run.run_id,
        task=ti.task,
        attempt=ti.attempt,
        epoch=ti.epoch,
        worker_id=holder,
        failure_kind=FailureKind.LEASE_EXPIRED,
        exit_code=None,
        output_tail=f"the lease lapsed {ti.lease_expiries + 1} times (max_lease_expiries "
        f"{d.live().spec.max_lease_expiries}): the task is not given back again",
        started_at=None,
        finished_at=now,
    )
    d.emit(failed)
    d.emit(
        ev.TaskDeadLettered(
            run_id=run.run_id,
            task=ti.task,
            attempt=ti.attempt,
            failure_kind=FailureKind.LEASE_EXPIRED,
            exit_code=None,
            output_tail=failed.output_tail,
        )
    )
    advance_run(d, run.run_id, now)


def fail(d: Decision, run_id: str, ti: TaskInstance, failed: ev.TaskFailed, now: datetime) -> None:
    """Record a failed attempt, then retry it or dead-letter the task instance.

    The attempt counts toward ``max_attempts`` within its series (a RerunTask starts a new
    one); a failure kind outside ``retry_on`` or a non-retryable exit code is final at once.

    Emits:
        ``failed`` (TaskFailed); then RetryScheduled (attempt + 1, at its backoff, released
        by a later Tick) or TaskDeadLettered followed by ``advance_run``'s events.
    Refusals: none.
    """
    spec = d.live().spec
    policy = spec.task_spec(ti.task).retry_policy or spec.retry_policy
    d.emit(failed)
    retry_at = None
    if policy.retryable(failed.failure_kind, failed.exit_code):
        # a rerun starts a new series; attempts given back after a lapsed lease do not count
        in_series = ti.attempt - ti.first_attempt + 1 - ti.lease_expiries
        retry_at = next_attempt_at(policy, run_id, ti.task, in_series, now)
    if retry_at is not None:
        d.emit(
            ev.RetryScheduled(
                run_id=run_id, task=ti.task, attempt=ti.attempt + 1, retry_at=retry_at
            )
        )
    else:
        d.emit(
            ev.TaskDeadLettered(
                run_id=run_id,
                task=ti.task,
                attempt=ti.attempt,
                failure_kind=failed.failure_kind,
                exit_code=failed.exit_code,
                output_tail=failed.output_tail,
            )
        )
        advance_run(d, run_id, now)
