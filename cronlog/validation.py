"""Validation of a job definition; errors name the offending field."""

from __future__ import annotations

from datetime import timedelta

from cronlog.errors import InvalidDefinition
from cronlog.model import JobSpec
from cronlog.schedule import validate_schedule

MAX_COMMAND_BYTES = 64 * 1024
"""Upper bound of a command's argv, bytes (it travels in every TaskClaimed)."""
MAX_TASKS = 200
"""Upper bound of a job's tasks (the whole DAG lives in one table record)."""
MAX_ACTIVE_RUNS_LIMIT = 256
"""Upper bound of max_active_runs (active runs live in the job's table record)."""
MAX_JITTER = timedelta(days=1)
"""Upper bound of a job's jitter."""
MAX_ACTIVE_TASK_INSTANCES = 2000
"""Upper bound of max_active_runs x tasks: every active task instance lives in the job record
(~150 bytes each), which must fit one changelog message."""


def validate_spec(spec: JobSpec) -> None:
    """Check a job definition.

    Raises:
        InvalidDefinition: naming the first offending field (``name``, ``command``,
            ``schedule.expression``, ``schedule.timezone``, ``timeout_s``, ...).
    """
    if not spec.name or len(spec.name) > 200:
        raise InvalidDefinition("name", "must be 1..200 characters")
    if not spec.command or not all(isinstance(a, str) for a in spec.command):
        raise InvalidDefinition("command", "must be a non-empty argv list of strings")
    size = sum(len(a.encode()) for a in spec.command)
    if size > MAX_COMMAND_BYTES:
        raise InvalidDefinition("command", f"argv is {size} bytes; at most {MAX_COMMAND_BYTES}")
    validate_schedule(spec.schedule)
    if spec.timeout <= timedelta(0):
        raise InvalidDefinition("timeout_s", "must be positive")
    if spec.lease_ttl < timedelta(seconds=1):
        raise InvalidDefinition("lease_ttl_s", "must be at least 1 second")
    policy = spec.retry_policy
    if policy.max_attempts < 1:
        raise InvalidDefinition("retry_policy.max_attempts", "must be at least 1")
    if policy.backoff < timedelta(0) or policy.max_backoff < timedelta(0):
        raise InvalidDefinition("retry_policy.backoff_s", "must not be negative")
    if policy.backoff_coefficient < 1.0:
        raise InvalidDefinition("retry_policy.backoff_coefficient", "must be at least 1.0")
    if not spec.tasks or len(set(spec.tasks)) != len(spec.tasks):
        raise InvalidDefinition("tasks", "task names must be unique and non-empty")
    if len(spec.tasks) > MAX_TASKS:
        raise InvalidDefinition("tasks", f"{len(spec.tasks)} tasks; at most {MAX_TASKS}")
    if not 1 <= spec.max_active_runs <= MAX_ACTIVE_RUNS_LIMIT:
        raise InvalidDefinition("max_active_runs", f"must be 1..{MAX_ACTIVE_RUNS_LIMIT}")
    if not timedelta(0) <= spec.jitter <= MAX_JITTER:
        raise InvalidDefinition("jitter_s", f"must be 0..{MAX_JITTER.total_seconds():g} s")
    if spec.max_active_runs * len(spec.tasks) > MAX_ACTIVE_TASK_INSTANCES:
        raise InvalidDefinition(
            "max_active_runs", f"max_active_runs x tasks = "
            f"{spec.max_active_runs * len(spec.tasks)}; at most {MAX_ACTIVE_TASK_INSTANCES}")
