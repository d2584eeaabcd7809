"""Commands: the inputs of the job aggregate. Each travels in an ``Envelope`` with its idem_key.

The worker commands are defined in ``cronlog.worker_commands`` and re-exported here, so
``from cronlog import commands as cmd`` names every command.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from cronlog.limits import MAX_BACKFILL_TICKS as MAX_BACKFILL_TICKS  # re-exported
from cronlog.model import JobSpec
from cronlog.vocabulary import CommandKind, Reprocess, UpstreamOutcome
from cronlog.worker_commands import ClaimTask as ClaimTask
from cronlog.worker_commands import CompleteTask as CompleteTask
from cronlog.worker_commands import PollJob as PollJob
from cronlog.worker_commands import PollTasks as PollTasks
from cronlog.worker_commands import ReleaseTask as ReleaseTask
from cronlog.worker_commands import RenewLease as RenewLease


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterJob:
    """Register a new job. Refused with ``job_exists`` if the job_id is live."""

    spec: JobSpec


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateJob:
    """Replace a job's definition; future ticks are recomputed from the fold's now."""

    spec: JobSpec


@dataclass(frozen=True, slots=True, kw_only=True)
class PauseJob:
    """Stop firing ticks; runs already started go on."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ResumeJob:
    """Fire ticks again.

    Attributes:
        catchup: False (default): from now on, the ticks that passed while paused are owed
            nothing. True: they are fired per the schedule's catch-up policy (``all``,
            ``latest``, ``none`` within ``catchup_window``), as if the fold had been down.
    """

    catchup: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteJob:
    """Stop the job for good; history stays readable on the run-events topic."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TriggerJob:
    """Start one manual run now; its run_id derives from the command's idem_key."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BackfillJob:
    """Create runs for past ticks of the job (``trigger=backfill``).

    The caller (the API, which keeps every run's history) chooses the ticks: the fold keeps
    only active runs, so it cannot tell which ticks already had one. See docs/schedules.md,
    "Backfill".

    Attributes:
        ticks: the ticks, aware UTC, at most ``MAX_BACKFILL_TICKS``. Ticks at or after the
            schedule's cursor (``next_fire_at``) or after the fold's now are left to the
            schedule and dropped; so is a tick whose run is active.
        reprocess: ``none``: each run takes the tick's own run_id (``run_id_for_tick``), so a
            tick never gets two runs; ``failed``/``all``: the caller asks for a new run beside
            the earlier one(s), and it gets a distinct run_id (``run_id_for_backfill``).
    """

    ticks: tuple[datetime, ...]
    reprocess: Reprocess = Reprocess.NONE


@dataclass(frozen=True, slots=True, kw_only=True)
class Tick:
    """Time passes: fire due ticks, release retries, expire leases. Carries no data."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelRun:
    """Cancel an active run, or one task instance of it (a user's request).

    Whole run: RunCancelled (reason ``user``). One task: TaskCancelled (terminal
    ``cancelled``); the run then ends by the usual rules, a cancelled task counting as failed.
    A worker holding a cancelled task has its next RenewLease refused and kills the process.

    Attributes:
        run_id: the run.
        task: the task to cancel, or None for the whole run.
    """

    run_id: str
    task: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayTask:
    """Run a dead-lettered task instance again, as a new run (trigger ``replay``).

    The original run left the job record when it finished, so the replay is a fresh attempt
    series: a new run holding only ``task``, run_id ``run_id_for_replay(job_id, run_id, task,
    idem_key)``, attempt 1, epoch from 0. The original attempts stay in history.

    Attributes:
        run_id: the run whose task was dead-lettered.
        task: the task to run again.
        scheduled_for: the original run's tick, aware UTC (the new run keeps it: CRONLOG
            context and the run listing show which tick is being redone).
    """

    run_id: str
    task: str
    scheduled_for: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskSnapshot:
    """A task instance of a finished run as the read model last saw it (RerunTask).

    Attributes:
        task: the task name.
        state: its terminal state (a TaskState value: succeeded, failed, cancelled, skipped,
            upstream_failed).
        attempt: its last attempt number (1 if it never ran).
        epoch: its last lease epoch (0 if it was never claimed).
    """

    task: str
    state: str
    attempt: int
    epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RerunTask:
    """Run a task of a run again, optionally with everything downstream of it.

    Airflow's "clear" of a task instance: a new attempt series in the same run, which reopens
    if it had ended.

    The fold keeps only active runs, so for a run that ended the command carries the run as
    the sender's read model saw it (``scheduled_for``, ``trigger``, ``tasks``); for a run
    still active the fold uses its own state and ignores them.

    Attributes:
        run_id, task: the task instance to run again.
        downstream: also reset every task downstream of it (transitively).
        scheduled_for: the run's tick, aware UTC.
        trigger: the run's trigger (a RunTrigger value).
        tasks: every task instance of the run, in the run's order.
    """

    run_id: str
    task: str
    downstream: bool
    scheduled_for: datetime
    trigger: str
    tasks: tuple[TaskSnapshot, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class UpstreamRunEnded:
    """A run of another job ended; addressed to a job whose schedule is ``after`` that job.

    Appended by the after relay (``services/scheduler/after_relay.py``) with idem_key
    ``after:<job_id>:<upstream_run_id>:<upstream_event_id>``. The fold starts a run (trigger
    ``after``) when the job is active, its schedule is ``after`` ``upstream_job_id`` and
    ``outcome`` qualifies (docs/schedules.md, "After").

    Attributes:
        upstream_job_id: the job whose run ended.
        upstream_run_id: the run that ended.
        upstream_scheduled_for: that run's ``scheduled_for`` (aware UTC), which the new run
            takes; None when the relay did not see it (the fold's now is used then).
        outcome: how it ended.
        upstream_event_id: the event_id of the run-event that ended it (a run reopened by a
            rerun can end more than once; each end is its own). "" when unknown.
        upstream_tenant: the upstream job's tenant, as its run-ending event says. The fold
            starts no run of a job of another tenant (docs/tenants.md, "The tenant of after
            chains"). "" when unknown (relays and run-events from before this field): not
            checked.
    """

    upstream_job_id: str
    upstream_run_id: str
    upstream_scheduled_for: datetime | None
    outcome: UpstreamOutcome
    upstream_event_id: str = ""
    upstream_tenant: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class AskSlots:
    """A job of ``tenant`` has ``count`` more ready task instances without a tenant slot.

    Addressed to the tenant ledger (job_id ``cronlog.ledger.LEDGER_KEY``), appended by the
    fold in the transaction that decided the job's ``TenantSlotsAsked`` (idem_key: that
    event's event_id). The ledger answers with GrantSlots as its caps and weights allow
    (docs/tenants.md, "The tenant ledger").

    Attributes:
        tenant: the asking job's tenant.
        asker: the asking job's job_id (where the grant goes).
        count: how many slots, 0..2^31 - 1.
        rank_at: the best rank of the job's waiting task instances (``cronlog.priority``),
            aware UTC: within a tenant the ledger serves the smallest first.
    """

    tenant: str
    asker: str
    count: int
    rank_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class ReturnSlots:
    """A job of ``tenant`` gives ``count`` tenant slots back (leases ended, work gone).

    Addressed to the tenant ledger, appended with the job's ``TenantSlotsReturned``.

    Attributes:
        tenant: the job's tenant.
        asker: the job returning them.
        count: how many, 0..2^31 - 1.
        withdraw: the job cannot hold slots (no record, another tenant): its waiting ask is
            dropped too, so the ledger does not grant it again.
    """

    tenant: str
    asker: str
    count: int
    withdraw: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class GrantSlots:
    """The tenant ledger gives a job ``count`` tenant slots (an answer to AskSlots).

    Addressed to the job; its ready task instances may then be granted to workers, one lease
    per slot. A job that no longer needs them returns them at once.

    Attributes:
        tenant: the tenant the slots are counted against.
        count: how many, 0 or more.
        refused: slots asked for that the ledger refused because its record is full (too
            many jobs waiting at once); the job no longer counts them as asked and asks again
            on a later decision (a poll). 0 normally.
    """

    tenant: str
    count: int
    refused: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class SetTenantLimits:
    """Set a tenant's share of the fleet, or the fleet's size; addressed to the tenant ledger.

    Sent by the API for a platform admin (``PUT /api/v1/tenants/{tenant}/limits``).

    Attributes:
        tenant: the tenant, or ``*`` for the fleet (then only ``max_running_tasks`` counts:
            how many task instances of all ledger tenants run at once, the fleet's slots).
        weight: the tenant's weight in fair sharing, 1..1000.
        max_running_tasks: most task instances of the tenant holding a slot (claimed or
            about to be) at once; None for no cap.
    """

    tenant: str
    weight: int = 1
    max_running_tasks: int | None = None


Command = (
    RegisterJob
    | UpdateJob
    | PauseJob
    | ResumeJob
    | DeleteJob
    | TriggerJob
    | Tick
    | ClaimTask
    | RenewLease
    | CompleteTask
    | BackfillJob
    | CancelRun
    | ReplayTask
    | ReleaseTask
    | RerunTask
    | UpstreamRunEnded
    | PollTasks
    | AskSlots
    | ReturnSlots
    | GrantSlots
    | SetTenantLimits
)
"""Every command on the wire: the body of a ``cronlog.Command`` record (``Envelope``)."""

JobCommand = Command | PollJob
"""What ``decide`` reads: a command from the log, or one the fold makes for a job (PollJob)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Addressed:
    """A command addressed to one job, with its deduplication key.

    ``decide`` reads this; the commands from the log are its subclass ``Envelope``.

    Attributes:
        idem_key: unique per logical command; a second command with the same key is a no-op
            (another command re-using it is refused: ``idempotency_conflict``).
        job_id: the job (also the Kafka record key).
        command: the command itself.
        tenant: the tenant the sender acts for (``cronlog.tenants``); the fold refuses a user
            command whose tenant does not own the job. Default ``"default"``.
        issued_at: when the sender first issued this logical command (aware UTC, its own
            clock); every re-send under the same idem_key carries the same value. The fold
            judges the dedupe horizon by it (``cronlog.idem``): an external command issued
            longer ago than the horizon is refused (``idem_key_expired``). None (default:
            old senders, Ticks, worker commands): no age check.
    """

    idem_key: str
    job_id: str
    command: JobCommand
    tenant: str = "default"
    issued_at: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Envelope(Addressed):
    """A command as it travels on the commands topic: an ``Addressed`` wire ``Command``.

    Its Avro record is ``cronlog.Command`` (``schemas/``); the codec maps only ``Command``.
    """

    command: Command


def command_kind(command: JobCommand) -> CommandKind:
    """Return the kind refusals and spans name ``command`` by (CommandRejected.command).

    Its type's name; a PollJob is named for the PollTasks it serves.
    """
    if isinstance(command, PollJob):
        return CommandKind.POLL_TASKS
    return CommandKind(type(command).__name__)
