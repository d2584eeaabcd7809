"""A user's interventions on runs: cancel, rerun, and the tasks a redefinition dropped.

Cancel a run or one task of it, rerun a task (Airflow's "clear"), and end the task instances
whose task a redefinition removed.

Called by ``decide``; every function emits into a ``Decision``, refusals as CommandRejected.
"""

from __future__ import annotations

from datetime import datetime

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.dag import downstream_of
from cronlog.decision import Decision
from cronlog.errors import InvariantViolation
from cronlog.job import JobState
from cronlog.progress import advance_run, release_waiting
from cronlog.vocabulary import (
    TERMINAL_TASK_STATES,
    CancelReason,
    RejectReason,
    RunTrigger,
    TaskState,
)

REMOVED = "removed"
"""TaskSkipped.trigger_rule of a task a redefinition dropped before it ever ran."""
TERMINAL_NAMES = frozenset(s.value for s in TERMINAL_TASK_STATES)
"""The terminal task states' names (a RerunTask snapshot carries states as strings)."""


def cancel(d: Decision, state: JobState, command: cmd.CancelRun, now: datetime) -> None:
    """Cancel a whole active run, or one task instance of it (a user's CancelRun).

    Emits:
        Whole run: RunCancelled (reason ``user``), then what ``release_waiting`` emits. One
        task: TaskCancelled (a holder is refused at its next renewal), then what
        ``advance_run`` emits (the run may end; a cancelled task counts as failed).
    Refusals:
        ``unknown_task_instance``: no such active run (the fold keeps only active runs; the
        API tells 404 from 409 by its read model), or the run has no such task.
        ``already_in_state``: the task instance has already ended.
    """
    run = state.run(command.run_id)
    if run is None and command.task is None and state.is_queued(command.run_id):
        queued = next(q for q in state.queue if q.run_id == command.run_id)
        d.emit(
            ev.RunCancelled(
                run_id=queued.run_id,
                reason=CancelReason.USER,
                scheduled_for=queued.scheduled_for,
                tenant=state.spec.tenant,
            )
        )  # a queued run never started: nothing else to stop
        return
    if run is None:
        d.reject(command, RejectReason.UNKNOWN_TASK_INSTANCE, f"no active run {command.run_id}")
        return
    if command.task is None:
        d.emit(
            ev.RunCancelled(
                run_id=run.run_id,
                reason=CancelReason.USER,
                scheduled_for=run.scheduled_for,
                tenant=state.spec.tenant,
            )
        )
        release_waiting(d, now)
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


def rerun(d: Decision, command: cmd.RerunTask, now: datetime) -> None:
    """Start a new attempt series for a task (and those below it), reopening its run.

    With ``downstream``, every task below ``command.task`` is reset too; a run that had ended
    is reopened.

    Emits:
        RunReopened (an ended run, from the command's snapshot), TaskReset for each target
        that had ended, then what ``advance_run`` emits (the trigger rules decide when each
        runs).
    Refusals:
        ``unknown_task_instance``: the run or the job's current definition lacks the task.
        ``already_in_state``: one of the targets is ready, running or waiting for a retry,
        or the snapshot of an ended run holds a task that has not ended.

    Raises:
        InvariantViolation: the run is neither active nor reopened after the checks (a bug).
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


def drop_removed_tasks(d: Decision, now: datetime) -> None:
    """End the unfinished task instances whose task a redefinition removed.

    Nothing may run a task the job no longer defines (a DAG task removed, a DAG turned into a
    one-task job or back). Tasks kept run with their new definition.

    Emits:
        TaskSkipped (rule ``removed``) for one never claimed; TaskCancelled for one that ran
        or runs (its holder is refused at its next renewal); then, per run touched, what
        ``advance_run`` emits.
    Refusals: none.
    """
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
