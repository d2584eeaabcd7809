"""Events: every state change of a job, its runs, task instances and leases."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from cronlog.commands import TaskSnapshot
from cronlog.model import JobSpec, TaskAction
from cronlog.vocabulary import (
    CancelReason,
    CommandKind,
    FailureKind,
    RejectReason,
    RunTrigger,
    SkipReason,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobRegistered:
    spec: JobSpec
    next_fire_at: datetime | None
    runs_remaining: int | None = None
    """Runs the schedule may still fire (``max_runs`` bound); None when unbounded."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobRedefined:
    spec: JobSpec
    next_fire_at: datetime | None
    runs_remaining: int | None = None
    """Runs the schedule may still fire under the new definition; None when unbounded."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobPaused:
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class JobResumed:
    next_fire_at: datetime | None
    catchup: bool = False
    """True: the ticks passed while paused are owed and follow the catch-up policy."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobDeleted:
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class RunScheduled:
    run_id: str
    scheduled_for: datetime
    trigger: RunTrigger
    tasks: tuple[str, ...]
    next_fire_at: datetime | None
    runs_remaining: int | None = None
    """Runs the schedule may still fire after this one; None when unbounded."""
    release_at: datetime | None = None
    """When jitter delays the release: the instant the tasks become ready (TaskReady then).
    None: they are ready at once (TaskReady follows this event)."""
    replay_of: str | None = None
    """For a ``replay`` run: the run whose dead-lettered task it runs again; else None."""
    timeout_at: datetime | None = None
    """The job's run timeout as an instant: a Tick at/after it cancels every task that has
    not ended (RunTimedOut) and the run fails. None: no run timeout."""
    upstream_job_id: str | None = None
    """For an ``after`` run: the upstream job whose run triggered it; else None."""
    upstream_run_id: str | None = None
    """For an ``after`` run: the upstream run that triggered it; else None."""
    ready: tuple[str, ...] = ()
    """The tasks the run readies at once, in definition order (``cronlog.runs.start_run``
    decides them): a TaskReady follows for each, at once or at ``release_at``; the other
    tasks start pending. ``evolve`` copies it rather than recomputing the DAG's roots. Empty
    in records written before schema v4 (they were decided by the rules of then)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunBuffered:
    """A tick fired while a run was active under ``buffer_one``: it starts when they end."""

    run_id: str
    scheduled_for: datetime
    trigger: RunTrigger
    next_fire_at: datetime | None
    runs_remaining: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RunCancelled:
    """An active run was cancelled (it leaves the record; its leases are revoked)."""

    run_id: str
    reason: CancelReason
    replaced_by: str | None = None
    """The run that displaced it (``cancel_previous``), or None."""
    scheduled_for: datetime | None = None
    """The run's tick (so a consumer needs no memory of RunScheduled); None in old records."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TickSkipped:
    scheduled_for: datetime
    reason: SkipReason
    next_fire_at: datetime | None


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskReady:
    run_id: str
    task: str
    attempt: int
    scheduled_for: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskClaimed:
    run_id: str
    task: str
    attempt: int
    epoch: int
    worker_id: str
    lease_expires_at: datetime
    lease_ttl: timedelta
    scheduled_for: datetime
    command: tuple[str, ...]
    timeout: timedelta
    action: TaskAction | None = None
    grace: timedelta = timedelta(seconds=10)
    """How long the worker waits between SIGTERM and SIGKILL at the timeout."""
    deadline_at: datetime | None = None
    """The fold's hard deadline for this attempt (claim + timeout + grace + lease ttl): a
    Tick past it fails the attempt as ``timeout`` even if the holder still renews."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseRenewed:
    run_id: str
    task: str
    attempt: int
    epoch: int
    worker_id: str
    lease_expires_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseExpired:
    run_id: str
    task: str
    attempt: int
    epoch: int
    worker_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskSucceeded:
    run_id: str
    task: str
    attempt: int
    epoch: int
    worker_id: str
    exit_code: int
    output_tail: str
    started_at: datetime
    finished_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskFailed:
    run_id: str
    task: str
    attempt: int
    epoch: int
    worker_id: str
    failure_kind: FailureKind
    exit_code: int | None
    output_tail: str
    started_at: datetime | None
    finished_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskCancelled:
    """One task instance was cancelled by a CancelRun; terminal ``cancelled`` for it."""

    run_id: str
    task: str
    attempt: int
    worker_id: str | None = None
    """The lease holder when it was cancelled (it is refused at its next renewal), or None."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskReleased:
    """The holder gave the attempt back unfinished (ReleaseTask); a TaskReady for the same
    attempt follows. Not a failure: the attempt number does not advance."""

    run_id: str
    task: str
    attempt: int
    epoch: int
    worker_id: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RunReopened:
    """A run that had ended is active again for a RerunTask: its task instances as the
    command carried them (terminal states); TaskReset events follow."""

    run_id: str
    scheduled_for: datetime
    trigger: RunTrigger
    tasks: tuple[TaskSnapshot, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskReset:
    """A task instance starts a new attempt series (RerunTask): pending again at
    ``attempt``, which counts as the series' first toward max_attempts; the trigger rules
    then decide when it runs."""

    run_id: str
    task: str
    attempt: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RunTimedOut:
    """The run's ``timeout_at`` passed: TaskCancelled follows for every task not ended, then
    RunFailed."""

    run_id: str
    timeout_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskSkipped:
    """A task of a run will not execute: its trigger rule says skip (terminal ``skipped``,
    counted as success for the run)."""

    run_id: str
    task: str
    trigger_rule: str
    """The rule that decided it (a TriggerRule value), or ``removed`` when a redefinition of
    the job dropped the task before it ever ran."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskUpstreamFailed:
    """A task of a run will not execute: upstream failures mean its trigger rule can no
    longer be met (terminal ``upstream_failed``, counted as failure for the run)."""

    run_id: str
    task: str
    trigger_rule: str
    """The rule that decided it (a TriggerRule value)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskDeadLettered:
    """A task instance's last allowed attempt failed: it is listed until replayed."""

    run_id: str
    task: str
    attempt: int
    failure_kind: FailureKind
    exit_code: int | None
    output_tail: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryScheduled:
    run_id: str
    task: str
    attempt: int
    retry_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSucceeded:
    run_id: str
    scheduled_for: datetime | None = None
    """The run's tick (so a consumer needs no memory of RunScheduled); None in old records."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunFailed:
    run_id: str
    scheduled_for: datetime | None = None
    """The run's tick (so a consumer needs no memory of RunScheduled); None in old records."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CommandRejected:
    command: CommandKind
    reason: RejectReason
    detail: str
    run_id: str | None = None
    task: str | None = None
    worker_id: str | None = None


Event = (
    JobRegistered
    | JobRedefined
    | JobPaused
    | JobResumed
    | JobDeleted
    | RunScheduled
    | TickSkipped
    | TaskReady
    | TaskClaimed
    | LeaseRenewed
    | LeaseExpired
    | TaskSucceeded
    | TaskFailed
    | RetryScheduled
    | RunSucceeded
    | RunFailed
    | CommandRejected
    | RunBuffered
    | RunCancelled
    | TaskCancelled
    | TaskDeadLettered
    | TaskReleased
    | TaskSkipped
    | TaskUpstreamFailed
    | RunTimedOut
    | RunReopened
    | TaskReset
)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunEvent:
    """An event as published on ``cronlog.run-events``.

    Attributes:
        event_id: deterministic id from (causing idem_key, job_id, index); consumers dedupe by it.
        job_id: the job (also the record key).
        at: the fold's now when the event was decided, aware UTC.
        idem_key: idem_key of the command that caused it.
        index: position among the events that command produced for this job, from 0.
        event: the event itself.
    """

    event_id: str
    job_id: str
    at: datetime
    idem_key: str
    index: int
    event: Event
