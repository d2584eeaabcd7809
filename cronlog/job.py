"""The job aggregate's state and ``evolve``: applying one event to the state, without checks."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import assert_never

from cronlog import events as ev
from cronlog.ids import idem_marker
from cronlog.model import JobSpec
from cronlog.time import EPOCH
from cronlog.vocabulary import (
    OFF_SCHEDULE_TRIGGERS,
    TERMINAL_TASK_STATES,
    WAITING_TASK_STATES,
    JobStatus,
    RunTrigger,
    TaskState,
)

MAX_APPLIED_MARKERS = 128
"""How many recent idem_keys of user commands (not Ticks, not worker commands) a job record
remembers (as ``idem_marker`` digests), each with its command's digest."""
MAX_RENEWAL_MARKERS = 64
"""How many recent idem_keys of worker commands (claim, renew, complete) a job record
remembers (as ``idem_marker`` digests; kept apart: they are frequent and would push out the
user commands' markers)."""


@dataclass(frozen=True, slots=True)
class TaskInstance:
    """One task of one active run.

    Attributes:
        task: task name.
        state: see TaskState.
        attempt: current attempt number, 1-based.
        epoch: fencing token; bumps on every (re)assignment; 0 before the first claim.
        worker_id: the lease holder while CLAIMED.
        lease_expires_at: aware UTC instant the lease lapses, while CLAIMED.
        retry_at: aware UTC instant the next attempt is released, while RETRY_WAIT or DELAYED.
        deadline_at: the hard deadline of the current claim (TaskClaimed.deadline_at), while
            CLAIMED; None for claims decided before deadlines existed.
        first_attempt: see below.
    """

    task: str
    state: TaskState
    attempt: int = 1
    epoch: int = 0
    worker_id: str | None = None
    lease_expires_at: datetime | None = None
    retry_at: datetime | None = None
    deadline_at: datetime | None = None
    first_attempt: int = 1
    """The first attempt of the current series (a RerunTask starts a new one); retries count
    from it toward max_attempts."""
    lease_expiries: int = 0
    """Attempts of the current series whose lease lapsed (a worker that crashed or hung): they
    were given back, not failed, and do not count toward max_attempts; past the job's
    ``max_lease_expiries`` the task is dead-lettered (kind ``lease_expired``)."""


@dataclass(frozen=True, slots=True)
class Run:
    """An active (not yet terminal) run; terminal runs leave the record."""

    run_id: str
    scheduled_for: datetime
    trigger: RunTrigger
    tasks: tuple[TaskInstance, ...]
    timeout_at: datetime | None = None
    """The run timeout as an instant (RunScheduled.timeout_at), or None."""

    def task(self, name: str) -> TaskInstance | None:
        """Return the task instance named ``name``, or None."""
        return next((t for t in self.tasks if t.task == name), None)


@dataclass(frozen=True, slots=True)
class Buffered:
    """The one tick a ``buffer_one`` job keeps while a run is active (from RunBuffered)."""

    run_id: str
    scheduled_for: datetime
    trigger: RunTrigger


@dataclass(frozen=True, slots=True)
class Queued:
    """A run waiting for a free slot under ``max_active_runs`` (from RunQueued).

    Compact: it becomes a Run when it starts.
    """

    run_id: str
    scheduled_for: datetime
    trigger: RunTrigger
    upstream_job_id: str | None = None
    upstream_run_id: str | None = None


@dataclass(frozen=True, slots=True)
class JobState:
    """Everything decisions about one job need; one table record keyed by job_id.

    Attributes:
        job_id: the job.
        spec: the current definition.
        status: active, paused or deleted.
        clock: the fold's now at the last command applied (aware UTC); never moves back.
        next_fire_at: the next tick to fire (aware UTC), None when the schedule has no more.
        runs: active runs, oldest first.
        applied: the markers (``cronlog.ids.idem_marker``: a fixed-size digest of the
            idem_key, so long keys cannot grow the record) of the most recent applied user
            commands (not Ticks, not worker commands), oldest first. Only ``with_applied``
            adds to it; ``has_applied`` and ``applied_digest`` take the idem_key itself.
        applied_digests: the ``command_digest`` of each of those commands (a re-use of the key
            by another command is refused), aligned with the *end* of ``applied``: shorter
            when the record was written before digests existed, whose older markers have
            none (no conflict check for them). Only ``with_applied`` adds to both.
        renewals: the markers of the most recent applied worker commands (ClaimTask,
            RenewLease, CompleteTask, ReleaseTask; ``with_renewal``), oldest first, without
            command digests (no
            conflict check): workers derive their keys from the lease they act on (run, task,
            epoch), and the epoch fences a stale command whatever its key.
        incarnation: registrations of this job_id after a delete (0 for the first); part of
            every schedule run_id so a re-registered job never reuses a deleted one's runs.
        runs_fired: runs the schedule fired (or buffered) since registration; manual runs
            do not count. ``max_runs`` bounds it.
        buffered: the tick a ``buffer_one`` job holds until its active runs end, or None.
        queue: runs waiting for a slot under ``max_active_runs``, in the order they were
            queued (tick order); at most ``max_queued_runs``.
    """

    job_id: str
    spec: JobSpec
    status: JobStatus
    clock: datetime
    next_fire_at: datetime | None = None
    runs: tuple[Run, ...] = ()
    applied: tuple[str, ...] = ()
    applied_digests: tuple[str, ...] = ()
    renewals: tuple[str, ...] = ()
    runs_fired: int = 0
    incarnation: int = 0
    buffered: Buffered | None = None
    queue: tuple[Queued, ...] = ()

    def runs_remaining(self) -> int | None:
        """Return how many runs the schedule may still fire, or None when unbounded."""
        limit = self.spec.schedule.max_runs
        return None if limit is None else max(0, limit - self.runs_fired)

    def has_applied(self, idem_key: str) -> bool:
        """Return whether a command with ``idem_key`` was applied recently."""
        marker = idem_marker(idem_key)
        return marker in self.applied or marker in self.renewals

    def applied_digest(self, idem_key: str) -> str | None:
        """Return the digest of the user command applied with ``idem_key``.

        None when there is no such marker, or it has no digest (written before digests).
        """
        marker = idem_marker(idem_key)
        for i in range(len(self.applied) - 1, -1, -1):  # the newest marker of the key
            if self.applied[i] == marker:
                j = i - (len(self.applied) - len(self.applied_digests))
                return self.applied_digests[j] if j >= 0 else None
        return None

    def with_applied(self, idem_key: str, digest: str) -> JobState:
        """Return the state with a user command's marker added (the oldest drop out)."""
        return replace(
            self,
            applied=(*self.applied, idem_marker(idem_key))[-MAX_APPLIED_MARKERS:],
            applied_digests=(*self.applied_digests, digest)[-MAX_APPLIED_MARKERS:],
        )

    def with_renewal(self, idem_key: str) -> JobState:
        """Return the state with a worker command's marker added (the oldest drop out)."""
        return replace(
            self, renewals=(*self.renewals, idem_marker(idem_key))[-MAX_RENEWAL_MARKERS:]
        )

    def run(self, run_id: str) -> Run | None:
        """Return the active run ``run_id``, or None."""
        return next((r for r in self.runs if r.run_id == run_id), None)

    def is_queued(self, run_id: str) -> bool:
        """Return whether ``run_id`` waits in the queue."""
        return any(q.run_id == run_id for q in self.queue)

    def active_runs(self) -> int:
        """Return how many active runs count toward ``max_active_runs``.

        Backfill and replay runs do not (docs/schedules.md, "Backfill").
        """
        return sum(r.trigger not in OFF_SCHEDULE_TRIGGERS for r in self.runs)

    def ready_since(self) -> datetime | None:
        """Return when the oldest run with a grantable task instance was scheduled.

        That is the job's place in its partition's ready index (docs/dispatch.md); None when
        no task instance is ready.
        """
        ready = TaskState.READY
        return min(
            (r.scheduled_for for r in self.runs if any(t.state is ready for t in r.tasks)),
            default=None,
        )

    def next_deadline(self) -> datetime | None:
        """Return the earliest instant a Tick has work for this job, or None.

        That is the next tick (while active), a retry or jitter release, or a lease expiry.
        """
        times: list[datetime] = []
        if self.status is JobStatus.ACTIVE and self.next_fire_at is not None:
            times.append(self.next_fire_at)
        for run in self.runs:
            if run.timeout_at is not None:
                times.append(run.timeout_at)
            for ti in run.tasks:
                if ti.state is TaskState.CLAIMED and ti.lease_expires_at is not None:
                    times.append(ti.lease_expires_at)
                    if ti.deadline_at is not None:
                        times.append(ti.deadline_at)
                elif ti.state in WAITING_TASK_STATES and ti.retry_at is not None:
                    times.append(ti.retry_at)
        return min(times, default=None)


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
            return _with_task(
                state, run_id, replace(ti, state=TaskState.SUCCEEDED, lease_expires_at=None)
            )
        case ev.TaskFailed(run_id=run_id, task=task):
            ti = _task(state, run_id, task)
            return _with_task(
                state, run_id, replace(ti, state=TaskState.FAILED, lease_expires_at=None)
            )
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
        case _:
            assert_never(event)
