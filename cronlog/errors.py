"""The error hierarchy and the business-refusal vocabulary."""

from __future__ import annotations

from enum import StrEnum


class CronlogError(Exception):
    """Root of every error cronlog raises on purpose."""


class InvalidDefinition(CronlogError):
    """A job definition (schedule, command, policy) is invalid.

    Attributes:
        field: dotted path of the offending field, e.g. ``"schedule.expression"``.
        reason: what is wrong, for a human.
    """

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class InvariantViolation(CronlogError):
    """A bug: the core reached a state its rules forbid. Never raised for bad input."""


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
