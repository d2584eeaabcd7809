"""The API's request bodies beyond the definition (PATCH, backfill) and the answers to writes.

Pydantic, ``extra="forbid"``; the definition's own shape (``JobDefinition``, ``JobIn`` and their
field types) is ``services.api.shapes.definition``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from cronlog.breaker import MAX_BREAKER_FAILURES
from cronlog.validation import MAX_LEASE_EXPIRIES_LIMIT, MAX_QUEUED_RUNS_LIMIT
from services.api.shapes.definition import (
    AfterOnName,
    AgingSeconds,
    BackoffName,
    DstGapName,
    DstOverlapName,
    ExclusionIn,
    ExitCode,
    FailureKindName,
    Instant,
    Isolation,
    Kind,
    Overlap,
    Priority,
    Seconds,
    StrictModel,
    Tags,
    TaskIn,
    TaskKindName,
)


class HttpTaskPatch(StrictModel):
    """Merge-patch of an ``http`` task (fields as in HttpTaskIn)."""

    url: str | None = None
    method: str | None = None
    headers: dict[str, str | None] | None = None
    body: str | None = None
    success_codes: list[int] | None = None


class SchedulePatch(StrictModel):
    """A partial schedule for PATCH (JSON merge-patch: absent keys keep their value)."""

    type: Kind | None = None
    expression: str | None = None
    timezone: str | None = None
    run_at: Instant | None = None
    catchup: Literal["all", "latest", "none"] | None = None
    catchup_window_s: Seconds | None = None
    interval_s: Seconds | None = None
    anchor_at: Instant | None = None
    start_at: Instant | None = None
    end_at: Instant | None = None
    max_runs: int | None = Field(default=None, ge=1, le=2**62)
    exclusions: list[ExclusionIn] | None = Field(default=None, max_length=64)
    misfire_grace_s: Seconds | None = None
    job_id: str | None = None
    on: AfterOnName | None = None
    dst_gap: DstGapName | None = None
    dst_overlap: DstOverlapName | None = None


class RetryPolicyPatch(StrictModel):
    """A partial retry policy for PATCH (fields as in ``RetryPolicyIn``)."""

    max_attempts: int | None = Field(default=None, ge=1, le=10_000)
    backoff: BackoffName | None = None
    base_s: Seconds | None = None
    backoff_coefficient: float | None = Field(default=None, allow_inf_nan=False, le=1000)
    max_s: Seconds | None = None
    jitter: float | None = Field(default=None, ge=0.0, le=1.0, allow_inf_nan=False)
    retry_on: list[FailureKindName] | None = Field(default=None, max_length=4)
    non_retryable_exit_codes: list[ExitCode] | None = Field(default=None, max_length=255)


class JobPatch(StrictModel):
    """Body of ``PATCH /api/v1/jobs/{job_id}``: pause/resume and/or a merge-patch of the definition.

    Attributes:
        paused: true pauses the job, false resumes it; absent leaves it.
        catchup: with ``paused: false`` only: true fires the ticks passed while paused per
            the schedule's catch-up policy; false (default) owes them nothing.
        other fields: merged into the current definition (RFC 7396: nested objects merge,
            ``null`` resets a field to its default); the result must be a valid definition.
    """

    paused: bool | None = None
    catchup: bool | None = None
    name: str | None = None
    schedule: SchedulePatch | None = None
    command: list[str] | None = None
    timeout_s: Seconds | None = None
    grace_s: Seconds | None = None
    lease_ttl_s: Seconds | None = None
    retry_policy: RetryPolicyPatch | None = None
    max_active_runs: int | None = Field(default=None, ge=1, le=256)
    overlap: Overlap | None = None
    jitter_s: Seconds | None = Field(default=None, ge=0)
    kind: TaskKindName | None = None
    shell: str | None = None
    callable: str | None = None
    http: HttpTaskPatch | None = None
    tasks: list[TaskIn] | None = Field(default=None, max_length=200)
    max_active_tasks: int | None = Field(default=None, ge=1, le=200)
    run_timeout_s: Seconds | None = Field(default=None, gt=0)
    max_queued_runs: int | None = Field(default=None, ge=0, le=MAX_QUEUED_RUNS_LIMIT)
    max_lease_expiries: int | None = Field(default=None, ge=0, le=MAX_LEASE_EXPIRIES_LIMIT)
    isolation: Isolation | None = None
    priority: Priority | None = None
    priority_aging_s: AgingSeconds | None = None
    breaker_failures: int | None = Field(default=None, ge=0, le=MAX_BREAKER_FAILURES)
    breaker_window_s: AgingSeconds | None = None
    breaker_cooldown_s: AgingSeconds | None = None
    tags: Tags | None = None


class JobCreated(BaseModel):
    """Answer of a registration: the job's id and its first tick (ISO UTC, null if none)."""

    job_id: str
    next_run_at: str | None


class Accepted(BaseModel):
    """Answer 202: the command is in the log; its effect was not seen within the timeout."""

    status: Literal["accepted"] = "accepted"
    job_id: str
    idem_key: str
    run_id: str | None = None
    location: str


class RunTriggered(BaseModel):
    """Answer of a manual trigger."""

    job_id: str
    run_id: str
    scheduled_for: str | None


class BackfillIn(StrictModel):
    """Body of ``POST /api/v1/jobs/{job_id}/backfill`` (docs/schedules.md, "Backfill").

    Attributes:
        start / end: the range of ticks, ``(start, end]``, ISO 8601 with a zone. Ticks after
            now or at/after the job's next tick are the schedule's and left out.
        reprocess: ``none`` (default): only ticks without any run; ``failed``: also ticks
            whose runs all failed or were cancelled; ``all``: every tick.
        dry_run: answer the ticks that would get a run, create nothing.
        max_runs: at most this many runs, oldest ticks first (1..1000, and at most 3500 task
            instances: runs x the job's tasks, else 422 naming ``max_runs``). Without it, a
            range needing more runs than that is refused (422 naming ``end``).
    """

    start: Instant
    end: Instant
    reprocess: Literal["none", "failed", "all"] = "none"
    dry_run: bool = False
    max_runs: int | None = Field(default=None, ge=1, le=1000)


class BackfillRun(BaseModel):
    """One backfilled tick and its run (``run_id`` null in a dry run that reprocesses: the
    id derives from the real request's idem_key)."""

    scheduled_for: str
    run_id: str | None


class Backfilled(BaseModel):
    """Answer of a backfill: the runs created (or, in a dry run, that would be), oldest first."""

    job_id: str
    runs: list[BackfillRun]
    dry_run: bool
