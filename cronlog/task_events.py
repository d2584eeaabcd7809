"""Events of task instances and their leases: ready, claimed, renewed, expired, ended.

Retried, skipped and dead-lettered too, and a poll's answer. Re-exported by ``cronlog.events``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from cronlog.model import TaskAction
from cronlog.vocabulary import FailureKind


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskReady:
    """An attempt of a task instance may be claimed by a worker (also copied to the ready topic)."""

    run_id: str
    """The run, ``r`` + 24 hex digits (``cronlog.ids``)."""
    task: str
    """The task instance's task name within the run."""
    attempt: int
    """The attempt number, from 1 (a retry is a new attempt)."""
    scheduled_for: datetime
    """The run's tick, aware UTC (manual runs: when they were triggered)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskClaimed:
    """A worker was granted the lease on an attempt: what to run and under which limits."""

    run_id: str
    """The run, ``r`` + 24 hex digits (``cronlog.ids``)."""
    task: str
    """The task instance's task name within the run."""
    attempt: int
    """The attempt number, from 1 (a retry is a new attempt)."""
    epoch: int
    """The lease's fencing token (bumped by every claim)."""
    worker_id: str
    """The worker that holds (or held) the lease."""
    lease_expires_at: datetime
    """When the lease lapses unless renewed, aware UTC (claim + ``lease_ttl``)."""
    lease_ttl: timedelta
    """The lease's duration; the worker renews every ``lease_ttl / 6``."""
    scheduled_for: datetime
    """The run's tick, aware UTC (manual runs: when they were triggered)."""
    command: tuple[str, ...]
    """The argv of an ``exec`` task (empty for other kinds)."""
    timeout: timedelta
    """How long the attempt may run before the worker sends SIGTERM."""
    action: TaskAction | None = None
    """What the worker runs (kind and its field); None in records from before task kinds (exec)."""
    grace: timedelta = timedelta(seconds=10)
    """How long the worker waits between SIGTERM and SIGKILL at the timeout."""
    deadline_at: datetime | None = None
    """The fold's hard deadline for this attempt (claim + timeout + grace + lease ttl): a
    Tick past it fails the attempt as ``timeout`` even if the holder still renews."""
    lease_token_digest: str = ""
    """``cronlog.leases.lease_digest`` of the worker's lease secret; "" when it sent none."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseRenewed:
    """The holder extended its lease."""

    run_id: str
    """The run, ``r`` + 24 hex digits (``cronlog.ids``)."""
    task: str
    """The task instance's task name within the run."""
    attempt: int
    """The attempt number, from 1 (a retry is a new attempt)."""
    epoch: int
    """The lease's fencing token (bumped by every claim)."""
    worker_id: str
    """The worker that holds (or held) the lease."""
    lease_expires_at: datetime
    """The lease's new expiry, aware UTC (the fold's now + lease ttl)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseExpired:
    """The holder stopped renewing and the lease lapsed on a Tick; the attempt's outcome follows."""

    run_id: str
    """The run, ``r`` + 24 hex digits (``cronlog.ids``)."""
    task: str
    """The task instance's task name within the run."""
    attempt: int
    """The attempt number, from 1 (a retry is a new attempt)."""
    epoch: int
    """The lease's fencing token (bumped by every claim)."""
    worker_id: str
    """The holder whose lease lapsed (empty if unknown)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskSucceeded:
    """An attempt succeeded (the holder reported it)."""

    run_id: str
    """The run, ``r`` + 24 hex digits (``cronlog.ids``)."""
    task: str
    """The task instance's task name within the run."""
    attempt: int
    """The attempt number, from 1 (a retry is a new attempt)."""
    epoch: int
    """The lease's fencing token (bumped by every claim)."""
    worker_id: str
    """The worker that holds (or held) the lease."""
    exit_code: int
    """The process's exit code (0; an http task: its status code)."""
    output_tail: str
    """The last bytes of the attempt's combined stdout/stderr (at most 4 KiB, UTF-8 text)."""
    started_at: datetime
    """When the worker started the attempt, aware UTC (the worker's clock)."""
    finished_at: datetime
    """When it ended, aware UTC (the worker's clock)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskFailed:
    """An attempt failed: its holder said so, its lease lapsed, or its hard deadline passed.

    RetryScheduled or TaskDeadLettered follows.
    """

    run_id: str
    """The run, ``r`` + 24 hex digits (``cronlog.ids``)."""
    task: str
    """The task instance's task name within the run."""
    attempt: int
    """The attempt number, from 1 (a retry is a new attempt)."""
    epoch: int
    """The lease's fencing token (bumped by every claim)."""
    worker_id: str
    """The holder (empty if unknown)."""
    failure_kind: FailureKind
    """Why it failed."""
    exit_code: int | None
    """The exit code; None when it never ran, was killed by a signal or was taken back by the fold.
    """
    output_tail: str
    """The last bytes of the attempt's combined stdout/stderr (at most 4 KiB, UTF-8 text)."""
    started_at: datetime | None
    """When the worker started it, aware UTC; None when the fold ended it (lease, deadline)."""
    finished_at: datetime
    """When it ended: the worker's clock, or the fold's now for lease expiry and the hard deadline.
    """


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskCancelled:
    """One task instance was cancelled by a CancelRun; terminal ``cancelled`` for it."""

    run_id: str
    """The run, ``r`` + 24 hex digits (``cronlog.ids``)."""
    task: str
    """The task instance's task name within the run."""
    attempt: int
    """The attempt current when it was cancelled."""
    worker_id: str | None = None
    """The lease holder when it was cancelled (it is refused at its next renewal), or None."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskReleased:
    """The holder gave the attempt back unfinished (ReleaseTask).

    A TaskReady for the same attempt follows. Not a failure: the attempt number stays.
    """

    run_id: str
    """The run, ``r`` + 24 hex digits (``cronlog.ids``)."""
    task: str
    """The task instance's task name within the run."""
    attempt: int
    """The attempt number, from 1 (a retry is a new attempt)."""
    epoch: int
    """The lease's fencing token (bumped by every claim)."""
    worker_id: str
    """The worker that holds (or held) the lease."""
    reason: str
    """The holder's reason, free text (e.g. ``worker draining``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskReset:
    """A task instance starts a new attempt series (RerunTask).

    It is pending again at ``attempt``, the series' first toward max_attempts; the trigger
    rules then decide when it runs.
    """

    run_id: str
    """The run, ``r`` + 24 hex digits (``cronlog.ids``)."""
    task: str
    """The task instance's task name within the run."""
    attempt: int
    """The first attempt of the new series (the last attempt + 1 if it was ever claimed)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskSkipped:
    """A task of a run will not execute: its trigger rule says skip.

    Terminal ``skipped``, counted as success for the run.
    """

    run_id: str
    """The run, ``r`` + 24 hex digits (``cronlog.ids``)."""
    task: str
    """The task instance's task name within the run."""
    trigger_rule: str
    """The rule that decided it (a TriggerRule value), or ``removed`` when a redefinition of
    the job dropped the task before it ever ran."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskUpstreamFailed:
    """A task of a run will not execute: upstream failures broke its trigger rule.

    Terminal ``upstream_failed``, counted as failure for the run.
    """

    run_id: str
    """The run, ``r`` + 24 hex digits (``cronlog.ids``)."""
    task: str
    """The task instance's task name within the run."""
    trigger_rule: str
    """The rule that decided it (a TriggerRule value)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskDeadLettered:
    """A task instance's last allowed attempt failed: it is listed until replayed."""

    run_id: str
    """The run, ``r`` + 24 hex digits (``cronlog.ids``)."""
    task: str
    """The task instance's task name within the run."""
    attempt: int
    """The last attempt, the one that failed."""
    failure_kind: FailureKind
    """Why the last attempt failed."""
    exit_code: int | None
    """Its exit code, or None (see TaskFailed)."""
    output_tail: str
    """The last bytes of the attempt's combined stdout/stderr (at most 4 KiB, UTF-8 text)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryScheduled:
    """A failed task instance gets another attempt.

    The first Tick at or after ``retry_at`` releases it (TaskReady).
    """

    run_id: str
    """The run, ``r`` + 24 hex digits (``cronlog.ids``)."""
    task: str
    """The task instance's task name within the run."""
    attempt: int
    """The next attempt's number."""
    retry_at: datetime
    """When it is released, aware UTC (the failure + backoff, jittered deterministically)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PollAnswered:
    """The answer to a worker's poll (PollTasks, or a CompleteTask with ``claim_next``).

    A reply only: it goes to the worker's partition of ``cronlog.replies`` (job_id "", after
    the TaskClaimed grants it counts, in the same transaction), never to ``cronlog.run-events``;
    it changes no job. The worker's slots reserved for the poll are free again once it arrives.
    """

    worker_id: str
    """The polling worker."""
    poll_id: str
    """The poll's id (PollTasks.poll_id; a completion's idem_key)."""
    partition: int
    """The commands partition that answered."""
    granted: int
    """How many task instances it granted (each a TaskClaimed before this answer)."""
