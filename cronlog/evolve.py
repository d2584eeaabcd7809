"""``evolve``: applying one event to a job's state, without checks (the fold's only writer)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import assert_never

from cronlog import events as ev
from cronlog.job import Buffered, JobState, Queued, Run, TaskInstance
from cronlog.time import EPOCH
from cronlog.vocabulary import (
    OFF_SCHEDULE_TRIGGERS,
    TERMINAL_TASK_STATES,
    JobStatus,
    RunTrigger,
    TaskState,
)


def _with_failure(state: JobState, finished_at: datetime) -> JobState:
    """Return ``state`` with a failed attempt counted for its breaker (``cronlog.breaker``)."""
    most = state.spec.breaker_failures
    if most <= 0:
        return state
    return replace(state, failures=(*state.failures, finished_at)[-most:])


def _with_task(state: JobState, run_id: str, ti: TaskInstance) -> JobState:
    runs = tuple(
        replace(r, tasks=tuple(ti if t.task == ti.task else t for t in r.tasks))
        if r.run_id == run_id
        else r
        for r in state.runs
    )
    return replace(state, runs=runs)


def _task(state: JobState, run_id: str, task: str) -> TaskInstance:
    run = state.run(run_id)
    ti = run.task(task) if run else None
    if ti is None:  # decide never emits such an event; keep evolve total for old logs
        return TaskInstance(task=task, state=TaskState.FAILED)
    return ti


def _run_scheduled(state: JobState, event: ev.RunScheduled) -> JobState:
    """Add the run as the event says, recomputing nothing.

    Its ``ready`` tasks are ready (delayed until ``release_at`` under jitter), the others
    pending: a change of DAG rules never changes how an old RunScheduled folds.
    """
    first = TaskState.READY if event.release_at is None else TaskState.DELAYED
    ready = set(event.ready)
    run = Run(
        event.run_id,
        event.scheduled_for,
        event.trigger,
        tuple(
            TaskInstance(t, first, retry_at=event.release_at)
            if t in ready
            else TaskInstance(t, TaskState.PENDING)
            for t in event.tasks
        ),
        event.timeout_at,
        event.created_at,
    )
    state = replace(state, runs=(*state.runs, run))
    if event.trigger is RunTrigger.MANUAL or event.trigger in OFF_SCHEDULE_TRIGGERS:
        return state  # neither moves the cursor nor counts toward max_runs
    if state.buffered is not None and state.buffered.run_id == event.run_id:
        return replace(state, buffered=None)  # counted when it was buffered
    if any(q.run_id == event.run_id for q in state.queue):  # counted when it was queued
        return replace(state, queue=tuple(q for q in state.queue if q.run_id != event.run_id))
    return replace(state, next_fire_at=event.next_fire_at, runs_fired=state.runs_fired + 1)


def _run_reopened(state: JobState, event: ev.RunReopened) -> JobState:
    if state.run(event.run_id) is not None:
        return state
    tasks = tuple(TaskInstance(t.task, _terminal(t.state), t.attempt, t.epoch) for t in event.tasks)
    return replace(
        state, runs=(*state.runs, Run(event.run_id, event.scheduled_for, event.trigger, tasks))
    )


def _terminal(state: str) -> TaskState:
    """A snapshot's state; anything not terminal (decide refuses those) reads as failed."""
    try:
        parsed = TaskState(state)
    except ValueError:
        return TaskState.FAILED
    return parsed if parsed in TERMINAL_TASK_STATES else TaskState.FAILED


def evolve(state: JobState | None, job_id: str, event: ev.Event) -> JobState | None:
    """Apply one event to a job's state.

    Args:
        state: the state before, None for a job never registered.
        job_id: the job the event belongs to.
        event: an event ``decide`` emitted.

    Returns:
        The state after. Never raises for an event ``decide`` can emit.

    Determinism: a pure function of its arguments.
    """
    match event:
        case ev.JobRegistered(spec=spec, next_fire_at=nxt):
            if state is None:
                return JobState(job_id, spec, JobStatus.ACTIVE, EPOCH, nxt)
            return replace(
                state,
                spec=spec,
                status=JobStatus.ACTIVE,
                next_fire_at=nxt,
                runs_fired=0,
                buffered=None,
                queue=(),
                incarnation=state.incarnation + 1,
                failures=(),
                suspended_until=None,
                probe_run=None,
            )
        case ev.CommandRejected():
            return state
    if state is None:
        return None
    if isinstance(event, ev.RunScheduled):  # the run's start: copied from the event
        return _run_scheduled(state, event)
    match event:
        case ev.JobRedefined(spec=spec, next_fire_at=nxt):
            return replace(state, spec=spec, next_fire_at=nxt)
        case ev.JobPaused():
            return replace(state, status=JobStatus.PAUSED)
        case ev.JobResumed(next_fire_at=nxt):
            return replace(state, status=JobStatus.ACTIVE, next_fire_at=nxt)
        case ev.JobDeleted():
            return replace(state, status=JobStatus.DELETED, next_fire_at=None, buffered=None)
        case ev.RunBuffered(run_id=run_id, scheduled_for=at, trigger=trigger):
            return replace(
                state,
                buffered=Buffered(run_id, at, trigger),
                runs_fired=state.runs_fired + 1,
                next_fire_at=event.next_fire_at,
            )
        case ev.RunCancelled(run_id=run_id):
            return replace(
                state,
                runs=tuple(r for r in state.runs if r.run_id != run_id),
                queue=tuple(q for q in state.queue if q.run_id != run_id),
            )
        case ev.RunQueued():
            queued = Queued(
                event.run_id,
                event.scheduled_for,
                event.trigger,
                event.upstream_job_id,
                event.upstream_run_id,
            )
            return replace(
                state,
                queue=(*state.queue, queued),
                runs_fired=state.runs_fired + 1,
                next_fire_at=event.next_fire_at,
            )
        case ev.TickSkipped(next_fire_at=nxt):
            return replace(state, next_fire_at=nxt)
        case ev.TaskReady(run_id=run_id, task=task, attempt=attempt):
            ti = _task(state, run_id, task)
            return _with_task(
                state,
                run_id,
                replace(
                    ti,
                    state=TaskState.READY,
                    attempt=attempt,
                    worker_id=None,
                    lease_expires_at=None,
                    retry_at=None,
                ),
            )
        case ev.TaskClaimed(run_id=run_id, task=task, epoch=epoch, worker_id=worker):
            ti = _task(state, run_id, task)
            return _with_task(
                state,
                run_id,
                replace(
                    ti,
                    state=TaskState.CLAIMED,
                    epoch=epoch,
                    worker_id=worker,
                    lease_expires_at=event.lease_expires_at,
                    deadline_at=event.deadline_at,
                    lease_token_digest=event.lease_token_digest,
                ),
            )
        case ev.LeaseRenewed(run_id=run_id, task=task, lease_expires_at=until):
            ti = _task(state, run_id, task)
            return _with_task(state, run_id, replace(ti, lease_expires_at=until))
        case ev.LeaseExpired(run_id=run_id, task=task):
            # counted; the TaskReady (given back) or TaskFailed (bound reached) that follows
            # moves the task on
            ti = _task(state, run_id, task)
            return _with_task(state, run_id, replace(ti, lease_expiries=ti.lease_expiries + 1))
        case ev.TaskSucceeded(run_id=run_id, task=task):
            ti = _task(state, run_id, task)
            state = replace(state, failures=()) if state.failures else state
            return _with_task(
                state, run_id, replace(ti, state=TaskState.SUCCEEDED, lease_expires_at=None)
            )
        case ev.TaskFailed(run_id=run_id, task=task):
            ti = _task(state, run_id, task)
            state = _with_failure(state, event.finished_at)
            return _with_task(
                state, run_id, replace(ti, state=TaskState.FAILED, lease_expires_at=None)
            )
        case ev.JobSuspended(resume_at=resume_at):
            return replace(state, suspended_until=resume_at, failures=(), probe_run=None)
        case ev.JobProbing(run_id=run_id):
            return replace(state, probe_run=run_id)
        case ev.JobUnsuspended():
            return replace(state, suspended_until=None, probe_run=None, failures=())
        case ev.TaskCancelled(run_id=run_id, task=task):
            ti = _task(state, run_id, task)
            return _with_task(
                state,
                run_id,
                replace(
                    ti,
                    state=TaskState.CANCELLED,
                    worker_id=None,
                    lease_expires_at=None,
                    retry_at=None,
                ),
            )
        case ev.TaskReleased(run_id=run_id, task=task):
            ti = _task(state, run_id, task)
            return _with_task(
                state,
                run_id,
                replace(
                    ti,
                    state=TaskState.READY,
                    worker_id=None,
                    lease_expires_at=None,
                    deadline_at=None,
                ),
            )
        case ev.RunReopened():
            return _run_reopened(state, event)
        case ev.TaskReset(run_id=run_id, task=task, attempt=attempt):
            ti = _task(state, run_id, task)
            return _with_task(
                state,
                run_id,
                TaskInstance(task, TaskState.PENDING, attempt, ti.epoch, first_attempt=attempt),
            )
        case ev.RunTimedOut():
            return state  # the TaskCancelled events that follow end the tasks
        case ev.TaskSkipped(run_id=run_id, task=task):
            ti = _task(state, run_id, task)
            return _with_task(state, run_id, replace(ti, state=TaskState.SKIPPED))
        case ev.TaskUpstreamFailed(run_id=run_id, task=task):
            ti = _task(state, run_id, task)
            return _with_task(state, run_id, replace(ti, state=TaskState.UPSTREAM_FAILED))
        case ev.TaskDeadLettered():
            return state  # the run's end (RunFailed) follows from the TaskFailed before it
        case ev.RetryScheduled(run_id=run_id, task=task, attempt=attempt, retry_at=at):
            ti = _task(state, run_id, task)
            return _with_task(
                state,
                run_id,
                replace(
                    ti, state=TaskState.RETRY_WAIT, attempt=attempt, retry_at=at, worker_id=None
                ),
            )
        case ev.RunSucceeded(run_id=run_id) | ev.RunFailed(run_id=run_id):
            return replace(state, runs=tuple(r for r in state.runs if r.run_id != run_id))
        case ev.JobRegistered() | ev.CommandRejected():
            return state
        case ev.PollAnswered():
            return state  # a reply to a worker, not a fact of the job
        case ev.TenantSlotsAsked(count=count):
            return replace(state, slots_asked=state.slots_asked + count)
        case ev.TenantSlotsReturned(count=count, tenant=tenant):
            if tenant != state.spec.tenant:  # a grant it could not take: never held
                return state
            return replace(state, slots_held=max(0, state.slots_held - count))
        case ev.TenantSlotsReceived(count=count, refused=refused):
            return replace(
                state,
                slots_asked=max(0, state.slots_asked - count - refused),
                slots_held=state.slots_held + count,
            )
        case _:
            assert_never(event)
