"""The attempt lifecycle: claims, renewals, completions, releases, expiry, retries, cancels,
and the run's end. Called by ``decide``; every function emits into a ``Decision``."""

from __future__ import annotations

from datetime import datetime

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.dag import RuleOutcome, Upstream, downstream_of, rule_outcome, wiring
from cronlog.decision import Decision
from cronlog.errors import InvariantViolation
from cronlog.firing import start_run
from cronlog.job import JobState, Run, TaskInstance
from cronlog.retry import next_attempt_at
from cronlog.vocabulary import (
    OFF_SCHEDULE_TRIGGERS,
    OK_TASK_STATES,
    TERMINAL_TASK_STATES,
    WAITING_TASK_STATES,
    CancelReason,
    FailureKind,
    JobStatus,
    RejectReason,
    RunTrigger,
    TaskState,
)

REMOVED = "removed"
"""TaskSkipped.trigger_rule of a task a redefinition dropped before it ever ran."""


def tick_attempts(d: Decision, now: datetime) -> None:
    """Expire lapsed leases, take back attempts past their hard deadline, release retries.

    Lease expiry fails the attempt as ``lease_expired``; the hard deadline (claim + timeout +
    grace + lease ttl, TaskClaimed.deadline_at) as ``timeout``; both then retry per policy.
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
                holder = ti.worker_id or ""
                d.emit(
                    ev.LeaseExpired(
                        run_id=run.run_id,
                        task=ti.task,
                        attempt=ti.attempt,
                        epoch=ti.epoch,
                        worker_id=holder,
                    )
                )
                fail(
                    d,
                    run.run_id,
                    ti,
                    ev.TaskFailed(
                        run_id=run.run_id,
                        task=ti.task,
                        attempt=ti.attempt,
                        epoch=ti.epoch,
                        worker_id=holder,
                        failure_kind=FailureKind.LEASE_EXPIRED,
                        exit_code=None,
                        output_tail="",
                        started_at=None,
                        finished_at=now,
                    ),
                    now,
                )
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


def time_out(d: Decision, run: Run, now: datetime) -> None:
    """Stop a run past its ``timeout_at``: RunTimedOut, TaskCancelled for every task not
    ended (holders are refused at their next renewal and kill the task), then RunFailed."""
    d.emit(ev.RunTimedOut(run_id=run.run_id, timeout_at=run.timeout_at or now))
    for ti in run.tasks:
        if ti.state not in TERMINAL_TASK_STATES:
            holder = ti.worker_id if ti.state is TaskState.CLAIMED else None
            d.emit(
                ev.TaskCancelled(
                    run_id=run.run_id, task=ti.task, attempt=ti.attempt, worker_id=holder
                )
            )
    finish_run_if_done(d, run.run_id, now)


def drop_removed_tasks(d: Decision, now: datetime) -> None:
    """After a redefinition, end the unfinished task instances of active runs whose task the
    new definition no longer has (a DAG task removed, a DAG turned into a one-task job or
    back): nothing may run a task the job does not define. One never claimed is skipped
    (TaskSkipped, rule ``removed``); one that ran or runs is cancelled (its holder is refused
    at its next renewal). Tasks kept run with their new definition. Each run then goes on by
    its trigger rules and may end."""
    names = set(d.live().spec.tasks)
    for run in d.live().runs:
        gone = [
            ti for ti in run.tasks if ti.task not in names and ti.state not in TERMINAL_TASK_STATES
        ]
        for ti in gone:
            if ti.epoch == 0 and ti.attempt == 1:  # never claimed: it just will not run
                d.emit(ev.TaskSkipped(run_id=run.run_id, task=ti.task, trigger_rule=REMOVED))
            else:  # ran (or runs): stopped, counted as failed like any cancel
                holder = ti.worker_id if ti.state is TaskState.CLAIMED else None
                d.emit(
                    ev.TaskCancelled(
                        run_id=run.run_id, task=ti.task, attempt=ti.attempt, worker_id=holder
                    )
                )
        if gone:
            advance_run(d, run.run_id, now)


def rerun(d: Decision, command: cmd.RerunTask, now: datetime) -> None:
    """Start a new attempt series for ``command.task`` (and, with ``downstream``, every task
    below it) in its run, reopening the run if it had ended (RunReopened from the command's
    snapshot). Refused (``already_in_state``) while any of those tasks is ready, running or
    waiting for a retry, or when the snapshot of an ended run is not terminal; refused
    (``unknown_task_instance``) for a task the run or the job's definition lacks.
    """
    state = d.live()
    run = state.run(command.run_id)
    names = [t.task for t in run.tasks] if run is not None else [t.task for t in command.tasks]
    if command.task not in names or command.task not in state.spec.tasks:
        d.reject(
            command,
            RejectReason.UNKNOWN_TASK_INSTANCE,
            f"run {command.run_id} has no task {command.task!r} the job still defines",
        )
        return
    targets = [command.task]
    if command.downstream:
        below = downstream_of(state.spec.task_specs, command.task)
        targets += [t for t in below if t in names]
    if run is None:
        unfinished = [t.task for t in command.tasks if t.state not in TERMINAL_NAMES]
        if unfinished:
            d.reject(
                command,
                RejectReason.ALREADY_IN_STATE,
                f"run {command.run_id} is not active here but its tasks "
                f"{', '.join(unfinished)} are not ended in the request",
            )
            return
        trigger = (
            RunTrigger(command.trigger) if command.trigger in set(RunTrigger) else RunTrigger.MANUAL
        )
        d.emit(
            ev.RunReopened(
                run_id=command.run_id,
                scheduled_for=command.scheduled_for,
                trigger=trigger,
                tasks=command.tasks,
            )
        )
    else:
        busy = [
            t
            for t in targets
            if (ti := run.task(t)) is not None
            and ti.state not in TERMINAL_TASK_STATES
            and (t == command.task or ti.state is not TaskState.PENDING)
        ]
        if busy:
            d.reject(
                command,
                RejectReason.ALREADY_IN_STATE,
                f"tasks {', '.join(busy)} of run {command.run_id} have not ended",
            )
            return
    live = d.live().run(command.run_id)
    if live is None:
        raise InvariantViolation(f"run {command.run_id} is neither active nor reopened")
    for name in targets:
        ti = live.task(name)
        if ti is None or ti.state is TaskState.PENDING:
            continue
        d.emit(
            ev.TaskReset(
                run_id=command.run_id, task=name, attempt=ti.attempt + 1 if ti.epoch else ti.attempt
            )
        )
    advance_run(d, command.run_id, now)


TERMINAL_NAMES = frozenset(s.value for s in TERMINAL_TASK_STATES)


def release_buffered(d: Decision, now: datetime) -> None:
    """Start the buffered tick of a ``buffer_one`` job once no run of it is active.

    Temporal's BUFFER_ONE: "start the workflow again soon as the current one completes". The
    run keeps its nominal ``scheduled_for`` and run_id; a paused job releases it too (the
    tick came due while it was active).
    """
    state = d.live()
    held = state.buffered
    if (
        held is None
        or state.status is JobStatus.DELETED
        or any(r.trigger not in OFF_SCHEDULE_TRIGGERS for r in state.runs)
    ):
        return  # backfill runs do not hold the schedule back (docs/schedules.md, "Backfill")
    for event in start_run(
        state,
        held.run_id,
        held.scheduled_for,
        held.trigger,
        now,
        next_fire_at=state.next_fire_at,
        runs_remaining=state.runs_remaining(),
    ):
        d.emit(event)


def cancel(d: Decision, state: JobState, command: cmd.CancelRun, now: datetime) -> None:
    """Cancel a whole active run (RunCancelled ``user``) or one task instance of it.

    The fold keeps only active runs: an unknown or finished run is refused
    (``unknown_task_instance``; the API tells 404 from 409 by its read model), and so is a
    task instance already terminal (``already_in_state``).
    """
    run = state.run(command.run_id)
    if run is None:
        d.reject(command, RejectReason.UNKNOWN_TASK_INSTANCE, f"no active run {command.run_id}")
        return
    if command.task is None:
        d.emit(
            ev.RunCancelled(
                run_id=run.run_id, reason=CancelReason.USER, scheduled_for=run.scheduled_for
            )
        )
        release_buffered(d, now)
        return
    ti = run.task(command.task)
    if ti is None:
        d.reject(
            command,
            RejectReason.UNKNOWN_TASK_INSTANCE,
            f"run {run.run_id} has no task {command.task!r}",
        )
        return
    if ti.state in TERMINAL_TASK_STATES:
        d.reject(command, RejectReason.ALREADY_IN_STATE, f"task {ti.task!r} is {ti.state}")
        return
    holder = ti.worker_id if ti.state is TaskState.CLAIMED else None
    d.emit(ev.TaskCancelled(run_id=run.run_id, task=ti.task, attempt=ti.attempt, worker_id=holder))
    advance_run(d, run.run_id, now)


def lease_command(
    d: Decision,
    command: cmd.ClaimTask | cmd.RenewLease | cmd.CompleteTask | cmd.ReleaseTask,
    now: datetime,
) -> None:
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
        timeout, grace = task.timeout or state.spec.timeout, state.spec.grace
        d.emit(
            ev.TaskClaimed(
                run_id=run.run_id,
                task=ti.task,
                attempt=ti.attempt,
                epoch=ti.epoch + 1,
                worker_id=command.worker_id,
                lease_expires_at=now + lease_ttl,
                lease_ttl=lease_ttl,
                scheduled_for=run.scheduled_for,
                command=task.command,
                timeout=timeout,
                action=task.action(),
                grace=grace,
                deadline_at=now + timeout + grace + lease_ttl,
            )
        )
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


def fail(d: Decision, run_id: str, ti: TaskInstance, failed: ev.TaskFailed, now: datetime) -> None:
    spec = d.live().spec
    policy = spec.task_spec(ti.task).retry_policy or spec.retry_policy
    d.emit(failed)
    retry_at = None
    if policy.retryable(failed.failure_kind, failed.exit_code):
        in_series = ti.attempt - ti.first_attempt + 1  # a rerun starts a new series
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


_UPSTREAM = {
    TaskState.SUCCEEDED: Upstream.SUCCESS,
    TaskState.SKIPPED: Upstream.SKIPPED,
    TaskState.FAILED: Upstream.FAILED,
    TaskState.UPSTREAM_FAILED: Upstream.FAILED,
    TaskState.CANCELLED: Upstream.FAILED,
}
_ACTIVE = frozenset({TaskState.READY, TaskState.CLAIMED, TaskState.RETRY_WAIT, TaskState.DELAYED})


def advance_run(d: Decision, run_id: str, now: datetime) -> None:
    """Apply the trigger rules to a run's pending tasks after a task ended, then end the run
    if every task has.

    A pending task whose rule is met becomes ready (TaskReady, attempt 1) while the run has
    fewer than ``max_active_tasks`` ready or running; one whose rule says skip or
    upstream_failed ends so (TaskSkipped, TaskUpstreamFailed) and never executes. Repeats
    until nothing changes, so outcomes propagate down the whole DAG in one decision.
    """
    spec = d.live().spec
    changed = True
    while changed:
        changed = False
        run = d.live().run(run_id)
        if run is None:
            return
        states = {t.task: t.state for t in run.tasks}
        wired = wiring(spec, states)
        active = sum(1 for s in states.values() if s in _ACTIVE)
        for ti in run.tasks:
            if ti.state is not TaskState.PENDING:
                continue
            rule, upstream = wired[ti.task]
            ups = [_UPSTREAM.get(states[u], Upstream.RUNNING) for u in upstream]
            match rule_outcome(rule, ups):
                case RuleOutcome.RUN if active < spec.max_active_tasks:
                    d.emit(
                        ev.TaskReady(
                            run_id=run_id,
                            task=ti.task,
                            attempt=ti.attempt,
                            scheduled_for=run.scheduled_for,
                        )
                    )
                    active += 1
                case RuleOutcome.SKIP:
                    d.emit(ev.TaskSkipped(run_id=run_id, task=ti.task, trigger_rule=rule.value))
                    changed = True
                case RuleOutcome.UPSTREAM_FAILED:
                    d.emit(
                        ev.TaskUpstreamFailed(run_id=run_id, task=ti.task, trigger_rule=rule.value)
                    )
                    changed = True
                case _:
                    pass
    finish_run_if_done(d, run_id, now)


def finish_run_if_done(d: Decision, run_id: str, now: datetime) -> None:
    """End the run (RunSucceeded: every task succeeded or skipped; RunFailed otherwise) once
    every task instance is terminal, and release a buffered tick."""
    run = d.live().run(run_id)
    if run is None:
        return
    states = [t.state for t in run.tasks]
    if not all(s in TERMINAL_TASK_STATES for s in states):
        return
    if all(s in OK_TASK_STATES for s in states):
        d.emit(ev.RunSucceeded(run_id=run_id, scheduled_for=run.scheduled_for))
    else:
        d.emit(
            ev.RunFailed(run_id=run_id, scheduled_for=run.scheduled_for)
        )  # cancelled/upstream_failed: failed
    release_buffered(d, now)
