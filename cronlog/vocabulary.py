"""The closed vocabularies of the job lifecycle, in one place.

Job and task states, run triggers, skip / cancel / failure / refusal reasons, and the other
string-coded enums the wire contract carries (``schemas/README.md``: enums travel as strings).
"""

from __future__ import annotations

from enum import StrEnum


class JobStatus(StrEnum):
    """Lifecycle of a job."""

    ACTIVE = "active"
    """Ticks fire."""
    PAUSED = "paused"
    """Ticks pass unfired; runs already started go on."""
    DELETED = "deleted"
    """No new runs ever; terminal. History stays on the run-events topic."""


class TaskState(StrEnum):
    """Lifecycle of a task instance's current attempt."""

    PENDING = "pending"
    """Waiting for its upstream tasks (trigger rule not met yet) or for a free task slot of
    the run (``max_active_tasks``)."""
    READY = "ready"
    """Waiting for a worker to claim the attempt."""
    CLAIMED = "claimed"
    """A worker holds the lease on the attempt."""
    RETRY_WAIT = "retry_wait"
    """The last attempt failed; the next one is released at ``retry_at``."""
    DELAYED = "delayed"
    """The first attempt is held back by the job's jitter; released at ``retry_at``."""
    SUCCEEDED = "succeeded"
    """Terminal: an attempt succeeded."""
    FAILED = "failed"
    """Terminal: the last allowed attempt failed."""
    CANCELLED = "cancelled"
    """Terminal: cancelled by a CancelRun; counts as failed for the run's outcome."""
    SKIPPED = "skipped"
    """Terminal, never executed: its trigger rule says skip (an upstream skipped, or e.g.
    ``one_failed`` and nothing failed). Counts as success for the run's outcome."""
    UPSTREAM_FAILED = "upstream_failed"
    """Terminal, never executed: its trigger rule can no longer be met because upstream
    tasks failed. Counts as failed for the run's outcome."""


TERMINAL_TASK_STATES = frozenset(
    {
        TaskState.SUCCEEDED,
        TaskState.FAILED,
        TaskState.CANCELLED,
        TaskState.SKIPPED,
        TaskState.UPSTREAM_FAILED,
    }
)


OK_TASK_STATES = frozenset({TaskState.SUCCEEDED, TaskState.SKIPPED})
"""Terminal states a run may end ``succeeded`` with."""


WAITING_TASK_STATES = frozenset({TaskState.RETRY_WAIT, TaskState.DELAYED})
"""States a Tick releases (TaskReady) once ``retry_at`` has passed."""


class RunTrigger(StrEnum):
    """What started a run."""

    SCHEDULE = "schedule"
    """A tick of the job's schedule, on time."""
    CATCHUP = "catchup"
    """A tick missed while nothing was folding, fired late by the catch-up policy."""
    MANUAL = "manual"
    """A TriggerJob command."""
    BACKFILL = "backfill"
    """A BackfillJob command: a past tick run on request. Never moves the schedule's cursor,
    does not count toward ``max_runs``, is exempt from the overlap policy and
    ``max_active_runs``, and is not counted by them either (docs/schedules.md, "Backfill")."""
    REPLAY = "replay"
    """A ReplayTask command: one dead-lettered task instance run again as a new run. Like a
    backfill run it never moves the cursor, does not count toward ``max_runs`` and is outside
    the overlap policy and ``max_active_runs``."""
    AFTER = "after"
    """An ``after`` schedule: a run of the upstream job ended as the schedule asks
    (UpstreamRunEnded); ``upstream_job_id``/``upstream_run_id`` name it."""


OFF_SCHEDULE_TRIGGERS = frozenset({RunTrigger.BACKFILL, RunTrigger.REPLAY})
"""Runs outside the schedule's overlap policy and ``max_active_runs``, both ways."""


class SkipReason(StrEnum):
    """Why a tick was not fired."""

    CATCHUP_POLICY = "catchup_policy"
    """Missed while nothing was folding; the catch-up policy does not fire it."""
    CATCHUP_WINDOW = "catchup_window"
    """Missed for longer than the job's catchup_window."""
    MAX_ACTIVE_RUNS = "max_active_runs"
    """The job already had ``max_active_runs`` runs active when the tick came due. Records
    decided before runs were queued (schema v4) carry it; ticks now queue (RunQueued)."""
    EXCLUDED = "excluded"
    """The tick falls in one of the schedule's exclusion windows."""
    OVERLAP = "overlap"
    """A run was still active and the overlap policy is ``skip`` (or ``buffer_one`` with a
    tick already buffered)."""
    END_AT = "end_at"
    """The first tick after the schedule's ``end_at``; the schedule has no further tick."""
    MAX_RUNS = "max_runs"
    """The first tick after the schedule fired ``max_runs`` runs; it has no further tick."""
    QUEUE_FULL = "queue_full"
    """``max_active_runs`` runs were active and ``max_queued_runs`` more already queued: the
    one bound past which overload drops a tick (visible, counted, never silent)."""


class CancelReason(StrEnum):
    """Why a run was cancelled."""

    OVERLAP = "overlap"
    """A new tick fired under the ``cancel_previous`` overlap policy."""
    USER = "user"
    """A CancelRun command (API ``POST /runs/{run_id}/cancel``)."""
    JOB_DELETED = "job_deleted"
    """The job was deleted while the run was queued: it never started."""


class FailureKind(StrEnum):
    """Why an attempt failed."""

    NONZERO_EXIT = "nonzero_exit"
    """The command exited with a code other than 0 (python: raised; http: status not in the
    success set)."""
    TIMEOUT = "timeout"
    """The worker killed the command after the job's timeout, or the fold's hard deadline
    (timeout + grace + lease ttl after the claim) passed while it was still held."""
    LEASE_EXPIRED = "lease_expired"
    """The holder stopped renewing; the fold expired the lease on a tick."""
    SPAWN_ERROR = "spawn_error"
    """The command could not be started (missing executable, permissions)."""


ALL_FAILURE_KINDS = tuple(FailureKind)


class RejectReason(StrEnum):
    """Why ``decide`` refused a command (carried by ``CommandRejected``)."""

    UNKNOWN_JOB = "unknown_job"
    """The command names a job that was never registered."""
    JOB_EXISTS = "job_exists"
    """RegisterJob for a job_id that is already registered and not deleted."""
    JOB_DELETED = "job_deleted"
    """The job was deleted; it accepts no further commands except reads."""
    INVALID_DEFINITION = "invalid_definition"
    """The definition in the command failed validation."""
    ALREADY_IN_STATE = "already_in_state"
    """Pause of a paused job, resume of an active one."""
    UNKNOWN_TASK_INSTANCE = "unknown_task_instance"
    """No active run/task instance matches the command (it may have finished)."""
    NOT_READY = "not_ready"
    """ClaimTask for a task instance that is not ready for that attempt (already claimed)."""
    STALE_EPOCH = "stale_epoch"
    """The command carries an epoch older than the task instance's current one."""
    NOT_HOLDER = "not_holder"
    """The command comes from a worker that does not hold the lease."""
    RECORD_TOO_LARGE = "record_too_large"
    """Applying the command would grow the job's table record past its size limit."""
    WRONG_PARTITION = "wrong_partition"
    """The record arrived on a partition its key does not map to."""
    IDEMPOTENCY_CONFLICT = "idempotency_conflict"
    """The command re-uses the idem_key of another command already applied to the job (other
    content: ``cronlog.ids.command_digest``). A key names one command: a re-delivery of the
    same command is a no-op, another command needs a new key (the rule of the IETF draft "The
    Idempotency-Key HTTP Header Field", which the HTTP API applies to requests)."""
    IDEM_KEY_EXPIRED = "idem_key_expired"
    """The command's ``issued_at`` is older than the dedupe horizon (``cronlog.idem``): its
    idem_key may have been applied and forgotten, so it is neither applied nor taken as a
    duplicate. A command still wanted is sent again under a new idem_key."""
    ISSUED_AT_IN_FUTURE = "issued_at_in_future"
    """The command's ``issued_at`` is further ahead of the log time than the horizon's
    ``max_future`` (the sender's clock is wrong)."""
    WRONG_TENANT = "wrong_tenant"
    """The command's tenant does not own the job (``cronlog.tenants``), or a RegisterJob or
    UpdateJob names another tenant than its envelope's."""


class QueueReason(StrEnum):
    """Why a run waits in its job's queue (``RunQueued.reason``)."""

    MAX_ACTIVE_RUNS = "max_active_runs"
    """``max_active_runs`` runs of the job are active: it starts when one ends."""
    SUSPENDED = "suspended"
    """The job's circuit is open (``cronlog.breaker``): it starts when the job is resumed,
    or as the probe once the cool-down passed."""


class SuspendReason(StrEnum):
    """Why a job's circuit opened (``JobSuspended.reason``)."""

    CIRCUIT_OPEN = "circuit_open"
    """``breaker_failures`` attempts failed within ``breaker_window`` with no success."""
    PROBE_FAILED = "probe_failed"
    """The one probe run of a half-open circuit failed (or was cancelled)."""


class UnsuspendReason(StrEnum):
    """Why a job's circuit closed (``JobUnsuspended.reason``)."""

    OPERATOR = "operator"
    """A ResumeJob (``cronlog jobs resume``)."""
    PROBE_SUCCEEDED = "probe_succeeded"
    """The probe run succeeded."""
    BREAKER_OFF = "breaker_off"
    """The job's definition was changed to ``breaker_failures`` 0."""


class Reprocess(StrEnum):
    """Which ticks of a backfill get a new run although a run for them exists."""

    NONE = "none"
    """None: a tick that already has a run is left alone (the run_id is the tick's own)."""
    FAILED = "failed"
    """Ticks whose runs all failed or were cancelled get a new run (a distinct run_id)."""
    ALL = "all"
    """Every tick gets a new run (a distinct run_id)."""


class UpstreamOutcome(StrEnum):
    """How an upstream run ended (UpstreamRunEnded.outcome)."""

    SUCCEEDED = "succeeded"
    """RunSucceeded."""
    FAILED = "failed"
    """RunFailed."""
    CANCELLED = "cancelled"
    """RunCancelled (by a user or by the ``cancel_previous`` overlap policy)."""


class CommandKind(StrEnum):
    """Which command a CommandRejected refused: the command's type name, as on the wire.

    The ``cronlog.<Name>`` union branch of ``cronlog.Command``, without the namespace.
    """

    REGISTER_JOB = "RegisterJob"
    """RegisterJob."""
    UPDATE_JOB = "UpdateJob"
    """UpdateJob."""
    PAUSE_JOB = "PauseJob"
    """PauseJob."""
    RESUME_JOB = "ResumeJob"
    """ResumeJob."""
    DELETE_JOB = "DeleteJob"
    """DeleteJob."""
    TRIGGER_JOB = "TriggerJob"
    """TriggerJob."""
    TICK = "Tick"
    """Tick."""
    CLAIM_TASK = "ClaimTask"
    """ClaimTask: a worker's claim was refused (not ready, unknown run or task)."""
    RENEW_LEASE = "RenewLease"
    """RenewLease: the lease is gone (stale epoch, not the holder, run ended or cancelled);
    the worker kills the task."""
    COMPLETE_TASK = "CompleteTask"
    """CompleteTask: the completion came from a stale epoch or a non-holder."""
    BACKFILL_JOB = "BackfillJob"
    """BackfillJob."""
    CANCEL_RUN = "CancelRun"
    """CancelRun."""
    REPLAY_TASK = "ReplayTask"
    """ReplayTask."""
    RELEASE_TASK = "ReleaseTask"
    """ReleaseTask."""
    RERUN_TASK = "RerunTask"
    """RerunTask."""
    UPSTREAM_RUN_ENDED = "UpstreamRunEnded"
    """UpstreamRunEnded."""
    POLL_TASKS = "PollTasks"
    """PollTasks (never refused: a poll that finds nothing ready is answered with 0)."""
    ASK_SLOTS = "AskSlots"
    """AskSlots (refused only when sent to a job instead of the tenant ledger)."""
    RETURN_SLOTS = "ReturnSlots"
    """ReturnSlots (likewise)."""
    GRANT_SLOTS = "GrantSlots"
    """GrantSlots (never refused: a job that cannot hold them gives them back)."""
    SET_TENANT_LIMITS = "SetTenantLimits"
    """SetTenantLimits (refused when sent to a job instead of the tenant ledger)."""
