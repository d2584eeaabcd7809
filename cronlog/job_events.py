"""Events of jobs and runs: definitions, pauses, runs scheduled, queued and ended, refusals.

Also the circuit breaker's and the tenant slots'. Re-exported by ``cronlog.events``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from cronlog.commands import TaskSnapshot
from cronlog.model import JobSpec
from cronlog.vocabulary import (
    CancelReason,
    CommandKind,
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
class RunTimedOut:
    """The run's ``timeout_at`` passed.

    TaskCancelled follows for every task not ended, then RunFailed.
    """

    run_id: str
    """The run, ``r`` + 24 hex digits (``cronlog.ids``)."""
    timeout_at: datetime
    """The run's timeout instant that passed, aware UTC."""


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
