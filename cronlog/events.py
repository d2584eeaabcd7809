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
    QueueReason,
    RejectReason,
    RunTrigger,
    SkipReason,
    SuspendReason,
    UnsuspendReason,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobRegistered:
    """A job was registered (or registered again after a delete): its definition and first tick."""

    spec: JobSpec
    """The job's definition as registered."""
    next_fire_at: datetime | None
    """The job's first tick, aware UTC; None for manual and after jobs."""
    runs_remaining: int | None = None
    """Runs the schedule may still fire (``max_runs`` bound); None when unbounded."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobRedefined:
    """A job's definition was replaced (UpdateJob); the schedule's cursor is recomputed."""

    spec: JobSpec
    """The new definition."""
    next_fire_at: datetime | None
    """The schedule's cursor under the new definition (unchanged if the schedule is), aware UTC, or
    None."""
    runs_remaining: int | None = None
    """Runs the schedule may still fire under the new definition; None when unbounded."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobPaused:
    """A job stopped firing ticks; its active runs go on."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobResumed:
    """A paused job fires ticks again."""

    next_fire_at: datetime | None
    """The schedule's cursor after the resume, aware UTC, or None."""
    catchup: bool = False
    """True: the ticks passed while paused are owed and follow the catch-up policy."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobDeleted:
    """A job was deleted: no new runs ever (its active runs go on to their end)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunScheduled:
    """A run started: its tasks, which are ready at once, its release and its timeout.

    Decided by ``cronlog.runs.start_run`` for every kind of trigger.
    """

    run_id: str
    """The run, ``r`` + 24 hex digits (``cronlog.ids``)."""
    scheduled_for: datetime
    """The run's tick, aware UTC (manual runs: when they were triggered)."""
    trigger: RunTrigger
    """What started it (schedule, catchup, manual, backfill, replay, after)."""
    tasks: tuple[str, ...]
    """The run's task instances, in definition order (a replay run: only the replayed task)."""
    next_fire_at: datetime | None
    """The schedule's cursor after this run, aware UTC, or None."""
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
    created_at: datetime | None = None
    """For a backfill or replay run: when it was created (the fold's now), where its priority
    rank starts (``cronlog.priority``: its waiting starts then, not at its old tick); None for
    other runs, whose rank starts at ``scheduled_for``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunBuffered:
    """A tick fired while a run was active under ``buffer_one``: it starts when they end."""

    run_id: str
    """The run the buffered tick will start (its tick's own run_id)."""
    scheduled_for: datetime
    """The run's tick, aware UTC (manual runs: when they were triggered)."""
    trigger: RunTrigger
    """The trigger it will start with (schedule or catchup)."""
    next_fire_at: datetime | None
    """The schedule's cursor after this tick, aware UTC, or None."""
    runs_remaining: int | None = None
    """Runs the schedule may still fire after this one; None when unbounded."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunQueued:
    """A tick (or an upstream run's end) found ``max_active_runs`` runs active: its run waits.

    Overload delays, never drops (DESIGN.md): the run starts (RunScheduled, same run_id) in
    queue order as soon as an active run ends; Airflow queues a DAG run the same way. The
    schedule's cursor moves on and the run counts toward ``max_runs`` now.
    """

    run_id: str
    """The run that will start (the tick's own run_id, or an after run's)."""
    scheduled_for: datetime
    """Its tick, aware UTC."""
    trigger: RunTrigger
    """The trigger it will start with (schedule, catchup or after)."""
    next_fire_at: datetime | None
    """The schedule's cursor after this tick, aware UTC, or None."""
    runs_remaining: int | None = None
    """Runs the schedule may still fire after this one; None when unbounded."""
    upstream_job_id: str | None = None
    """For an ``after`` run: the upstream job whose run ended; else None."""
    upstream_run_id: str | None = None
    """For an ``after`` run: the upstream run that ended; else None."""
    reason: QueueReason = QueueReason.MAX_ACTIVE_RUNS
    """Why it waits: ``max_active_runs``, or ``suspended`` (the job's circuit is open)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunCancelled:
    """An active run was cancelled (it leaves the record; its leases are revoked)."""

    run_id: str
    """The run, ``r`` + 24 hex digits (``cronlog.ids``)."""
    reason: CancelReason
    """Why: ``user`` (CancelRun) or ``overlap`` (``cancel_previous``)."""
    replaced_by: str | None = None
    """The run that displaced it (``cancel_previous``), or None."""
    scheduled_for: datetime | None = None
    """The run's tick (so a consumer needs no memory of RunScheduled); None in old records."""
    tenant: str = ""
    """The job's tenant (``JobSpec.tenant``), so the after relay can tell its downstream jobs
    whose run ended (docs/tenants.md, "The tenant of after chains"); "" in old records."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TickSkipped:
    """A tick of the job's schedule was not fired, for ``reason``."""

    scheduled_for: datetime
    """The tick not fired, aware UTC."""
    reason: SkipReason
    """Why it was not fired."""
    next_fire_at: datetime | None
    """The schedule's cursor after it, aware UTC; None when the schedule ended (``end_at``,
    ``max_runs``)."""


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
class RunReopened:
    """A run that had ended is active again, for a RerunTask.

    Its task instances are as the command carried them (terminal states); TaskReset follows.
    """

    run_id: str
    """The run, ``r`` + 24 hex digits (``cronlog.ids``)."""
    scheduled_for: datetime
    """The run's tick, aware UTC (manual runs: when they were triggered)."""
    trigger: RunTrigger
    """The run's original trigger."""
    tasks: tuple[TaskSnapshot, ...]
    """Every task instance of the run as the RerunTask carried it (terminal states)."""


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
class RunTimedOut:
    """The run's ``timeout_at`` passed.

    TaskCancelled follows for every task not ended, then RunFailed.
    """

    run_id: str
    """The run, ``r`` + 24 hex digits (``cronlog.ids``)."""
    timeout_at: datetime
    """The run's timeout instant that passed, aware UTC."""


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
class RunSucceeded:
    """A run ended: every task succeeded or was skipped."""

    run_id: str
    """The run, ``r`` + 24 hex digits (``cronlog.ids``)."""
    scheduled_for: datetime | None = None
    """The run's tick (so a consumer needs no memory of RunScheduled); None in old records."""
    tenant: str = ""
    """The job's tenant (``JobSpec.tenant``), so the after relay can tell its downstream jobs
    whose run ended (docs/tenants.md, "The tenant of after chains"); "" in old records."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunFailed:
    """A run ended: some task failed, was cancelled or upstream_failed (or the run timed out)."""

    run_id: str
    """The run, ``r`` + 24 hex digits (``cronlog.ids``)."""
    scheduled_for: datetime | None = None
    """The run's tick (so a consumer needs no memory of RunScheduled); None in old records."""
    tenant: str = ""
    """The job's tenant (``JobSpec.tenant``), so the after relay can tell its downstream jobs
    whose run ended (docs/tenants.md, "The tenant of after chains"); "" in old records."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CommandRejected:
    """``decide`` refused a command.

    The refusal is data (DESIGN.md, invariant 3), never an exception.
    """

    command: CommandKind
    """Which command was refused."""
    reason: RejectReason
    """Why."""
    detail: str
    """A human explanation naming what is wrong."""
    run_id: str | None = None
    """The command's run, when it names one (worker commands, cancel, rerun), else None."""
    task: str | None = None
    """The command's task, when it names one, else None."""
    worker_id: str | None = None
    """The sending worker, for worker commands, else None."""
    epoch: int | None = None
    """The refused command's epoch, when it has one (a worker command): a worker revokes
    only a lease of that epoch."""


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


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSuspended:
    """The job's circuit opened (``cronlog.breaker``): new runs queue until it closes."""

    reason: SuspendReason
    """``circuit_open`` or ``probe_failed``."""
    failed_attempts: int
    """Attempts failed within the window with no success between (0 for probe_failed)."""
    window: timedelta
    """The job's ``breaker_window``."""
    resume_at: datetime
    """When the circuit half-opens (the first queued run starts as the probe), aware UTC."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobProbing:
    """A suspended job's circuit half-opened: ``run_id`` starts as the one probe."""

    run_id: str
    """The probe run (the oldest queued one)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobUnsuspended:
    """The job's circuit closed: queued runs start again as slots allow."""

    reason: UnsuspendReason
    """``operator`` (a ResumeJob) or ``probe_succeeded``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TenantSlotsAsked:
    """The job asked the tenant ledger for slots: ready task instances wait for them.

    The fold appends an AskSlots to the ledger in the same transaction. Only jobs of a
    tenant other than ``default`` go through the ledger (docs/tenants.md).
    """

    tenant: str
    """The job's tenant."""
    count: int
    """Slots asked for now."""
    waiting: int
    """Ready task instances of the job without a slot after this event (all asked for)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TenantSlotsReturned:
    """The job gave tenant slots back: leases ended, or the work they were for is gone.

    The fold appends a ReturnSlots to the ledger in the same transaction.
    """

    tenant: str
    """The tenant they count against."""
    count: int
    """How many."""
    withdraw: bool = False
    """The job cannot hold slots (no record, another tenant): its waiting ask is dropped."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TenantSlotsReceived:
    """The ledger gave the job tenant slots (GrantSlots): that many ready instances may start."""

    tenant: str
    """The tenant they count against."""
    count: int
    """How many."""
    refused: int = 0
    """Asked-for slots the ledger refused (its record was full): no longer counted as asked;
    the job asks again on a later decision (a poll)."""


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
    | RunQueued
    | PollAnswered
    | JobSuspended
    | JobProbing
    | JobUnsuspended
    | TenantSlotsAsked
    | TenantSlotsReturned
    | TenantSlotsReceived
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
