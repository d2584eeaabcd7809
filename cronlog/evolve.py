"""``evolve``: applying one event to a job's state, without checks (the fold's only writer).

One ``match`` over the event union, as eventsourcing's functional aggregates do: each case
reads only the event and the state before it, in one line or one small named function; the
task instance updates share ``_update_task``.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import TypedDict, Unpack, assert_never

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


class TaskChanges(TypedDict, total=False):
    """The fields of a ``TaskInstance`` an event may change (``_update_task``)."""

    state: TaskState
    attempt: int
    epoch: int
    worker_id: str | None
    lease_expires_at: datetime | None
    retry_at: datetime | None
    deadline_at: datetime | None
    first_attempt: int
    lease_expiries: int
    lease_token_digest: str


def evolve(state: JobState | None, job_id: str, event: ev.Event) -> JobState | None:
    """Apply one event to a job's state.

    Args:
        state: the state before, None for a job never registered.
        job_id: the job the event belongs to.
        event: an event ``decide`` emitted.

    Returns:
        The state after; None while the job has no record (only JobRegistered makes one).
        Never raises for an event ``decide`` can emit.

    Determinism: a pure function of its arguments.
    """
    if state is None:
        if isinstance(event, ev.JobRegistered):
            return JobState(job_id, event.spec, JobStatus.ACTIVE, EPOCH, event.next_fire_at)
        return None
    match event:  # the frequent events first: a case is an isinstance check
        case ev.TaskClaimed():
            return _claimed(state, event)
        case ev.LeaseRenewed(run_id=run_id, task=task, lease_expires_at=until):
            return _update_task(state, run_id, task, lease_expires_at=until)
        case ev.TaskReady(attempt=attempt):  # a start, a retry released, a lease given back
            return _let_go(state, event, TaskState.READY, attempt=attempt, retry_at=None)
        case ev.TaskSucceeded():
            return _succeeded(state, event)
        case ev.RunSucceeded(run_id=run_id) | ev.RunFailed(run_id=run_id):
            return replace(state, runs=tuple(r for r in state.runs if r.run_id != run_id))
        case ev.RunScheduled():
            return _run_scheduled(state, event)
        case ev.CommandRejected() | ev.PollAnswered():
            return state  # a refusal, a reply to a worker: no fact of the job
        case ev.TaskFailed():
            return _failed(state, event)
        case ev.RetryScheduled():
            return _retry_wait(state, event)
        case ev.LeaseExpired(run_id=run_id, task=task):
            return _lease_expired(state, run_id, task)
        case ev.TaskReleased():  # given back unfinished: ready again, same attempt
            return _let_go(state, event, TaskState.READY, deadline_at=None)
        case ev.TaskDeadLettered() | ev.RunTimedOut():
            return state  # the events before (TaskFailed) or after (TaskCancelled) say it
        case ev.JobRegistered():
            return _reregistered(state, event)
        case ev.JobRedefined(spec=spec, next_fire_at=nxt):
            return replace(state, spec=spec, next_fire_at=nxt)
        case ev.JobPaused():
            return replace(state, status=JobStatus.PAUSED)
        case ev.JobResumed(next_fire_at=nxt):
            return replace(state, status=JobStatus.ACTIVE, next_fire_at=nxt)
        case ev.JobDeleted():
            return replace(state, status=JobStatus.DELETED, next_fire_at=None, buffered=None)
        case ev.TickSkipped(next_fire_at=nxt):
            return replace(state, next_fire_at=nxt)
        case ev.RunBuffered():
            return _run_buffered(state, event)
        case ev.RunQueued():
            return _run_queued(state, event)
        case ev.RunCancelled(run_id=run_id):
            return _run_cancelled(state, run_id)
        case ev.RunReopened():
            return _run_reopened(state, event)
        case ev.TaskReset(run_id=run_id, task=task, attempt=attempt):
            return _reset(state, run_id, task, attempt)
        case ev.TaskCancelled():  # a user, a run timeout: terminal, no retry
            return _let_go(state, event, TaskState.CANCELLED, retry_at=None)
        case ev.TaskSkipped(run_id=run_id, task=task):
            return _update_task(state, run_id, task, state=TaskState.SKIPPED)
        case ev.TaskUpstreamFailed(run_id=run_id, task=task):
            return _update_task(state, run_id, task, state=TaskState.UPSTREAM_FAILED)
        case ev.JobSuspended(resume_at=resume_at):
            return replace(state, suspended_until=resume_at, failures=(), probe_run=None)
        case ev.JobProbing(run_id=run_id):
            return replace(state, probe_run=run_id)
        case ev.JobUnsuspended():
            return replace(state, suspended_until=None, probe_run=None, failures=())
        case ev.TenantSlotsAsked(count=count):
            return replace(state, slots_asked=state.slots_asked + count)
        case ev.TenantSlotsReturned():
            return _slots_returned(state, event)
        case ev.TenantSlotsReceived():
            return _slots_received(state, event)
        case _:
            assert_never(event)


def _update_task(
    job: JobState, run_id: str, task: str, /, **changes: Unpack[TaskChanges]
) -> JobState:
    """Return ``job`` with task instance ``(run_id, task)`` changed as ``changes`` says.

    An unknown run or task leaves the job as it is: decide emits no such event, and old logs
    must still fold.
    """
    runs = job.runs
    for i, run in enumerate(runs):
        if run.run_id == run_id:
            tasks = run.tasks
            for j, ti in enumerate(tasks):
                if ti.task == task:
                    ti = replace(ti, **changes)
                    run = replace(run, tasks=(*tasks[:j], ti, *tasks[j + 1 :]))
                    return replace(job, runs=(*runs[:i], run, *runs[i + 1 :]))
            return job
    return job


def _let_go(
    job: JobState,
    event: ev.TaskReady | ev.TaskReleased | ev.TaskCancelled,
    new: TaskState,
    /,
    **changes: Unpack[TaskChanges],
) -> JobState:
    """Return ``job`` with the event's task instance in state ``new``, held by no one.

    No worker and no lease (``changes`` says what else the event resets): the one update of
    TaskReady, TaskReleased and TaskCancelled.
    """
    let_go: TaskChanges = {"state": new, "worker_id": None, "lease_expires_at": None}
    return _update_task(job, event.run_id, event.task, **(let_go | changes))


def _claimed(job: JobState, event: ev.TaskClaimed) -> JobState:
    return _update_task(
        job,
        event.run_id,
        event.task,
        state=TaskState.CLAIMED,
        epoch=event.epoch,
        worker_id=event.worker_id,
        lease_expires_at=event.lease_expires_at,
        deadline_at=event.deadline_at,
        lease_token_digest=event.lease_token_digest,
    )


def _succeeded(job: JobState, event: ev.TaskSucceeded) -> JobState:
    """The attempt succeeded: the breaker's count of failures starts again."""
    job = replace(job, failures=()) if job.failures else job
    return _update_task(
        job, event.run_id, event.task, state=TaskState.SUCCEEDED, lease_expires_at=None
    )


def _failed(job: JobState, event: ev.TaskFailed) -> JobState:
    """The attempt failed (a RetryScheduled or TaskDeadLettered follows); the breaker counts it."""
    job = _with_failure(job, event.finished_at)
    return _update_task(
        job, event.run_id, event.task, state=TaskState.FAILED, lease_expires_at=None
    )


def _with_failure(job: JobState, finished_at: datetime) -> JobState:
    """Return ``job`` with a failed attempt counted for its breaker (``cronlog.breaker``)."""
    most = job.spec.breaker_failures
    if most <= 0:
        return job
    return replace(job, failures=(*job.failures, finished_at)[-most:])


def _lease_expired(job: JobState, run_id: str, task: str) -> JobState:
    """Count the lapse; the TaskReady (given back) or TaskFailed (bound reached) follows."""
    run = job.run(run_id)
    ti = run.task(task) if run is not None else None
    if ti is None:
        return job
    return _update_task(job, run_id, task, lease_expiries=ti.lease_expiries + 1)


def _retry_wait(job: JobState, event: ev.RetryScheduled) -> JobState:
    """The attempt failed; the next one waits for ``retry_at`` (a Tick releases it)."""
    return _update_task(
        job,
        event.run_id,
        event.task,
        state=TaskState.RETRY_WAIT,
        attempt=event.attempt,
        retry_at=event.retry_at,
        worker_id=None,
    )


def _reset(job: JobState, run_id: str, task: str, attempt: int) -> JobState:
    """A new attempt series from ``attempt`` (RerunTask): pending, keeping only the epoch."""
    return _update_task(
        job,
        run_id,
        task,
        state=TaskState.PENDING,
        attempt=attempt,
        worker_id=None,
        lease_expires_at=None,
        retry_at=None,
        deadline_at=None,
        first_attempt=attempt,
        lease_expiries=0,
        lease_token_digest="",
    )


def _reregistered(job: JobState, event: ev.JobRegistered) -> JobState:
    """A deleted job registered again: a new incarnation, its runs left to end."""
    return replace(
        job,
        spec=event.spec,
        status=JobStatus.ACTIVE,
        next_fire_at=event.next_fire_at,
        runs_fired=0,
        buffered=None,
        queue=(),
        incarnation=job.incarnation + 1,
        failures=(),
        suspended_until=None,
        probe_run=None,
    )


def _run_scheduled(job: JobState, event: ev.RunScheduled) -> JobState:
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
    job = replace(job, runs=(*job.runs, run))
    if event.trigger is RunTrigger.MANUAL or event.trigger in OFF_SCHEDULE_TRIGGERS:
        return job  # neither moves the cursor nor counts toward max_runs
    if job.buffered is not None and job.buffered.run_id == event.run_id:
        return replace(job, buffered=None)  # counted when it was buffered
    if any(q.run_id == event.run_id for q in job.queue):  # counted when it was queued
        return replace(job, queue=tuple(q for q in job.queue if q.run_id != event.run_id))
    return replace(job, next_fire_at=event.next_fire_at, runs_fired=job.runs_fired + 1)


def _run_buffered(job: JobState, event: ev.RunBuffered) -> JobState:
    """Keep the tick (counted now toward max_runs) until the active runs have ended."""
    return replace(
        job,
        buffered=Buffered(event.run_id, event.scheduled_for, event.trigger),
        runs_fired=job.runs_fired + 1,
        next_fire_at=event.next_fire_at,
    )


def _run_queued(job: JobState, event: ev.RunQueued) -> JobState:
    """Append the run to the queue (counted now toward max_runs)."""
    queued = Queued(
        event.run_id,
        event.scheduled_for,
        event.trigger,
        event.upstream_job_id,
        event.upstream_run_id,
    )
    return replace(
        job,
        queue=(*job.queue, queued),
        runs_fired=job.runs_fired + 1,
        next_fire_at=event.next_fire_at,
    )


def _run_cancelled(job: JobState, run_id: str) -> JobState:
    """Drop the run, active or queued."""
    return replace(
        job,
        runs=tuple(r for r in job.runs if r.run_id != run_id),
        queue=tuple(q for q in job.queue if q.run_id != run_id),
    )


def _run_reopened(job: JobState, event: ev.RunReopened) -> JobState:
    """Bring an ended run back, its tasks as the snapshot says (a rerun resets some after)."""
    if job.run(event.run_id) is not None:
        return job
    tasks = tuple(TaskInstance(t.task, _terminal(t.state), t.attempt, t.epoch) for t in event.tasks)
    return replace(
        job, runs=(*job.runs, Run(event.run_id, event.scheduled_for, event.trigger, tasks))
    )


def _terminal(state: str) -> TaskState:
    """A snapshot's state; anything not terminal (decide refuses those) reads as failed."""
    try:
        parsed = TaskState(state)
    except ValueError:
        return TaskState.FAILED
    return parsed if parsed in TERMINAL_TASK_STATES else TaskState.FAILED


def _slots_returned(job: JobState, event: ev.TenantSlotsReturned) -> JobState:
    """Fewer tenant slots held; a grant for another tenant was never held."""
    if event.tenant != job.spec.tenant:
        return job
    return replace(job, slots_held=max(0, job.slots_held - event.count))


def _slots_received(job: JobState, event: ev.TenantSlotsReceived) -> JobState:
    """More tenant slots held; those received or refused are no longer asked for."""
    return replace(
        job,
        slots_asked=max(0, job.slots_asked - event.count - event.refused),
        slots_held=job.slots_held + event.count,
    )
