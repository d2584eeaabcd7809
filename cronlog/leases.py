"""Leases and attempts: what workers ask, what Ticks expire, what failures lead to.

The lease rules: a worker's ``claim``, ``renew``, ``complete`` and ``release`` of one attempt;
lease expiry and the hard deadline on a Tick (``tick_attempts``); a failed attempt's retry
after its backoff, or its dead letter (``fail``). Grants themselves: ``cronlog.dispatch``.

Fencing (DESIGN.md, invariant 3): every claim bumps the epoch; a renewal, completion or
release with another epoch, from a worker that is not the holder, or without the grant's
lease token is refused (``fence``), and the refusal is an event. Called by ``decide``; every
function emits into a ``Decision``.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from functools import lru_cache
from typing import TypedDict

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.decision import Decision
from cronlog.dispatch import grant, take_next, terms
from cronlog.job import Run, TaskInstance
from cronlog.progress import advance_run, time_out
from cronlog.retry import next_attempt_at
from cronlog.slots import free_slots
from cronlog.vocabulary import WAITING_TASK_STATES, FailureKind, RejectReason, TaskState

Fenced = cmd.RenewLease | cmd.CompleteTask | cmd.ReleaseTask
"""The worker commands on a lease already granted: each must pass ``fence``."""


@lru_cache(maxsize=1024)  # a worker's secret is the same on all its commands: hash it once
def lease_digest(token: str) -> str:
    """Return what a grant keeps of a worker's lease secret (32 hex digits of its SHA-256).

    "" for no secret: a worker from before lease tokens, whose commands are not checked.

    The secret travels only in worker commands (``cronlog.commands``, an internal topic);
    run-events and the API carry at most this digest, so who reads a run (its epoch and
    worker id are public) still cannot forge a completion.
    """
    return hashlib.sha256(token.encode()).hexdigest()[:32] if token else ""


def fence(ti: TaskInstance, command: Fenced) -> tuple[RejectReason, str] | None:
    """Return why ``command`` does not hold ``ti``'s lease, or None when it does.

    Returns:
        ``(stale_epoch, detail)`` when the attempt is not claimed under the command's epoch;
        ``(not_holder, detail)`` when another worker holds it, or the command lacks the
        grant's lease token (not checked for a grant without one); None otherwise.
    """
    if ti.state is not TaskState.CLAIMED or command.epoch != ti.epoch:
        detail = f"epoch {command.epoch} is not the current lease (epoch {ti.epoch}, {ti.state})"
        return RejectReason.STALE_EPOCH, detail
    if command.worker_id != ti.worker_id:
        return RejectReason.NOT_HOLDER, f"lease is held by {ti.worker_id}"
    if ti.lease_token_digest and lease_digest(command.lease_token) != ti.lease_token_digest:
        detail = "the lease token is not the grant's (a command not from the holding worker)"
        return RejectReason.NOT_HOLDER, detail
    return None


def _instance(d: Decision, command: cmd.ClaimTask | Fenced) -> tuple[Run, TaskInstance] | None:
    """Return the active run and task instance ``command`` names; None, refused, if none.

    Refusal: ``unknown_task_instance`` (no such active run or task; it may have ended).
    """
    run = d.live().run(command.run_id)
    ti = run.task(command.task) if run is not None else None
    if run is None or ti is None:
        detail = f"no active task instance {command.run_id}/{command.task}"
        d.reject(command, RejectReason.UNKNOWN_TASK_INSTANCE, detail)
        return None
    return run, ti


class _Attempt(TypedDict):
    """The fields naming the attempt a lease holder acts on, as its events carry them."""

    run_id: str
    task: str
    attempt: int
    epoch: int
    worker_id: str


def _attempt(run_id: str, ti: TaskInstance, command: Fenced) -> _Attempt:
    """Return the attempt fields of an event answering ``command`` on ``ti`` (run ``run_id``)."""
    return _Attempt(
        run_id=run_id, task=ti.task, attempt=ti.attempt, epoch=ti.epoch, worker_id=command.worker_id
    )


def _held(d: Decision, command: Fenced) -> tuple[Run, TaskInstance] | None:
    """Return the run and task instance whose lease ``command`` holds; None, refused, if not.

    Refusals: ``unknown_task_instance`` (``_instance``), then ``fence``'s.
    """
    found = _instance(d, command)
    refusal = fence(found[1], command) if found is not None else None
    if refusal is not None:
        d.reject(command, *refusal)
        return None
    return found


def claim(d: Decision, command: cmd.ClaimTask, now: datetime) -> None:
    """Decide a ClaimTask: grant the lease on one ready attempt.

    Emits:
        TaskClaimed (``cronlog.dispatch.grant``: epoch + 1, lease until now + lease ttl,
        what to run, the hard deadline).
    Refusals:
        ``unknown_task_instance``; ``not_ready``: the attempt is not ready (already claimed,
        or another attempt), or the job is a ledger tenant's with no free tenant slot.
    """
    found = _instance(d, command)
    if found is None:
        return
    run, ti = found
    if ti.state is not TaskState.READY or ti.attempt != command.attempt:
        detail = f"task instance is {ti.state} at attempt {ti.attempt}"
        d.reject(command, RejectReason.NOT_READY, detail)
    elif free_slots(d.live()) == 0:  # a ledger tenant's job: only under a tenant slot
        detail = "task instance waits for a tenant slot (docs/tenants.md, the tenant ledger)"
        d.reject(command, RejectReason.NOT_READY, detail)
    else:
        grant(d, run, ti, command.worker_id, now, lease_digest(command.lease_token))


def renew(d: Decision, command: cmd.RenewLease, now: datetime) -> None:
    """Decide a RenewLease: the holder's lease runs until now + the task's lease ttl.

    Emits:
        LeaseRenewed.
    Refusals:
        ``unknown_task_instance``; ``stale_epoch``, ``not_holder`` (``fence``).
    """
    found = _held(d, command)
    if found is None:
        return
    run, ti = found
    lease_ttl = terms(d.live().spec, ti.task).lease_ttl
    d.emit(
        ev.LeaseRenewed(
            **_attempt(run.run_id, ti, command),
            lease_expires_at=now + lease_ttl,
        )
    )


def complete(d: Decision, command: cmd.CompleteTask, now: datetime) -> None:
    """Decide a CompleteTask: the holder reports its attempt's end.

    Emits:
        Success: TaskSucceeded, ``advance_run``'s events, then ``take_next``'s grants of the
        tasks it readied (``claim_next``). Failure: ``fail``'s events.
    Refusals:
        ``unknown_task_instance``; ``stale_epoch``, ``not_holder`` (``fence``).
    """
    found = _held(d, command)
    if found is None:
        return
    run, ti = found
    if not command.succeeded:
        fail(d, run.run_id, ti, _failure(command, ti), now)
        return
    mark = len(d.events)
    d.emit(
        ev.TaskSucceeded(
            **_attempt(run.run_id, ti, command),
            exit_code=command.exit_code or 0,
            output_tail=command.output_tail,
            started_at=command.started_at,
            finished_at=command.finished_at,
        )
    )
    advance_run(d, run.run_id, now)
    take_next(d, command, mark, now, lease_digest(command.lease_token))


def _failure(command: cmd.CompleteTask, ti: TaskInstance) -> ev.TaskFailed:
    """Return the TaskFailed of a failed completion of ``ti``'s attempt (default kind: exit)."""
    return ev.TaskFailed(
        **_attempt(command.run_id, ti, command),
        failure_kind=command.failure_kind or FailureKind.NONZERO_EXIT,
        exit_code=command.exit_code,
        output_tail=command.output_tail,
        started_at=command.started_at,
        finished_at=command.finished_at,
    )


def release(d: Decision, command: cmd.ReleaseTask) -> None:
    """Decide a ReleaseTask: the holder gives its attempt back unfinished (not a failure).

    Emits:
        TaskReleased, then TaskReady for the same attempt.
    Refusals:
        ``unknown_task_instance``; ``stale_epoch``, ``not_holder`` (``fence``).
    """
    found = _held(d, command)
    if found is None:
        return
    run, ti = found
    d.emit(
        ev.TaskReleased(
            **_attempt(run.run_id, ti, command),
            reason=command.reason,
        )
    )
    d.emit(
        ev.TaskReady(
            run_id=run.run_id, task=ti.task, attempt=ti.attempt, scheduled_for=run.scheduled_for
        )
    )


def tick_attempts(d: Decision, now: datetime) -> None:
    """Decide what a Tick does to a job's runs: timeouts, lease expiry, retries.

    Stops runs past their timeout, expires lapsed leases, takes back attempts past their hard
    deadline, and releases retries and jittered starts whose time has come.

    Emits:
        ``time_out``'s events for a run past ``timeout_at``; ``expire_lease``'s for a lease
        past ``lease_expires_at``; ``take_back``'s for a claim past its hard deadline
        (TaskClaimed.deadline_at); TaskReady for a retry or a delayed start whose
        ``retry_at`` has passed.
    Refusals: none (time passing is a fact).
    """
    for run in d.live().runs:
        if run.timeout_at is not None and run.timeout_at <= now:
            time_out(d, run, now)
            continue
        for ti in run.tasks:
            if ti.state is TaskState.CLAIMED:
                if ti.lease_expires_at is not None and ti.lease_expires_at <= now:
                    expire_lease(d, run, ti, now)
                elif ti.deadline_at is not None and ti.deadline_at <= now:
                    take_back(d, run, ti, ti.deadline_at, now)
            elif ti.state in WAITING_TASK_STATES and ti.retry_at is not None and ti.retry_at <= now:
                d.emit(
                    ev.TaskReady(
                        run_id=run.run_id,
                        task=ti.task,
                        attempt=ti.attempt,
                        scheduled_for=run.scheduled_for,
                    )
                )


def take_back(d: Decision, run: Run, ti: TaskInstance, deadline: datetime, now: datetime) -> None:
    """Fail a claimed attempt past its hard deadline (claim + timeout + grace + lease ttl).

    The holder still renews but its own timeout enforcement failed (or the task ignores
    signals): the attempt is taken back; its next renewal is refused and it kills the
    process group.

    Emits:
        ``fail``'s events, kind ``timeout``.
    """
    failed = ev.TaskFailed(
        run_id=run.run_id,
        task=ti.task,
        attempt=ti.attempt,
        epoch=ti.epoch,
        worker_id=ti.worker_id or "",
        failure_kind=FailureKind.TIMEOUT,
        exit_code=None,
        output_tail=(
            f"hard deadline {deadline.isoformat()} passed (timeout + grace + lease ttl after the "
            "claim); the attempt was taken back"
        ),
        started_at=None,
        finished_at=now,
    )
    fail(d, run.run_id, ti, failed, now)


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
    most = d.live().spec.max_lease_expiries
    if ti.lease_expiries + 1 <= most:
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
        f"{most}): the task is not given back again",
        started_at=None,
        finished_at=now,
    )
    d.emit(failed)
    _dead_letter(d, run.run_id, ti, failed, now)


def fail(d: Decision, run_id: str, ti: TaskInstance, failed: ev.TaskFailed, now: datetime) -> None:
    """Record a failed attempt, then retry it or dead-letter the task instance.

    The attempt counts toward ``max_attempts`` within its series (a RerunTask starts a new
    one); a failure kind outside ``retry_on`` or a non-retryable exit code is final at once.

    Emits:
        ``failed`` (TaskFailed); then RetryScheduled (attempt + 1, at its backoff, released
        by a later Tick) or TaskDeadLettered followed by ``advance_run``'s events.
    Refusals: none.
    """
    policy = terms(d.live().spec, ti.task).retry_policy
    d.emit(failed)
    retry_at = None
    if policy.retryable(failed.failure_kind, failed.exit_code):
        # a rerun starts a new series; attempts given back after a lapsed lease do not count
        in_series = ti.attempt - ti.first_attempt + 1 - ti.lease_expiries
        retry_at = next_attempt_at(policy, run_id, ti.task, in_series, now)
    if retry_at is None:
        _dead_letter(d, run_id, ti, failed, now)
        return
    d.emit(
        ev.RetryScheduled(run_id=run_id, task=ti.task, attempt=ti.attempt + 1, retry_at=retry_at)
    )


def _dead_letter(
    d: Decision, run_id: str, ti: TaskInstance, failed: ev.TaskFailed, now: datetime
) -> None:
    """End the task instance for good after ``failed``, then move its run on."""
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
