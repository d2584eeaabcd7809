"""Response models of the read endpoints (documented in /openapi.json). Instants: ISO UTC ``Z``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from services.api.shapes.requests import Accepted

Number = int | float
"""A JSON number; whole seconds stay ints on output."""


class Counts(BaseModel):
    """How many runs a job has had, by outcome.

    Attributes:
        runs: every run (queued ones included).
        active: started (or buffered) and not ended.
        queued: waiting for a slot under ``max_active_runs`` (state ``queued``); each starts,
            in tick order, when an active run ends.
        failed: failed, not counting cancelled runs (``cancelled``).
    """

    runs: int
    active: int
    queued: int = 0
    succeeded: int
    failed: int
    cancelled: int = 0


class LastRun(BaseModel):
    """The newest run of a job, in short."""

    run_id: str
    scheduled_for: str
    state: str
    exit_code: int | None


class ScheduleOut(BaseModel):
    """A job's schedule as stored (see ``definition.ScheduleIn``; ``run_at`` ISO UTC ``Z``)."""

    type: Literal["cron", "once", "manual", "every", "after"]
    expression: str | None
    timezone: str
    run_at: str | None
    catchup: Literal["all", "latest", "none"]
    catchup_window_s: Number
    interval_s: Number | None = None
    anchor_at: str | None = None
    start_at: str | None = None
    end_at: str | None = None
    max_runs: int | None = None
    exclusions: list[dict[str, object]] = []
    misfire_grace_s: Number = 60
    job_id: str | None = None
    """The upstream job of an ``after`` schedule."""
    on: Literal["success", "done"] = "success"
    """Which upstream run ends start a run (``after`` only)."""
    dst_gap: Literal["shift", "skip"] = "shift"
    """Fixed-time cron ticks in a spring-forward gap (docs/schedules.md)."""
    dst_overlap: Literal["first", "last", "both"] = "first"
    """Fixed-time cron ticks whose wall time occurs twice (docs/schedules.md)."""


class RetryPolicyOut(BaseModel):
    """A job's retry policy (see ``definition.RetryPolicyIn``)."""

    max_attempts: int
    backoff: str
    base_s: Number
    backoff_coefficient: Number
    max_s: Number
    jitter: Number
    retry_on: list[str]
    non_retryable_exit_codes: list[int]


class Suspended(BaseModel):
    """A job's open circuit: runs queue (reason ``suspended``) until it closes.

    Attributes:
        reason: ``circuit_open`` or ``probe_failed``.
        failed_attempts: attempts failed within the window (0 for probe_failed).
        since: when it opened; resume_at: when it half-opens (one probe run).
        probe_run_id: the probe run while half-open, else null.
    """

    reason: str
    failed_attempts: int
    since: str
    resume_at: str
    probe_run_id: str | None = None


class TenantSlots(BaseModel):
    """A job's tenant slots (a tenant other than ``default``; docs/tenants.md).

    Attributes:
        held: slots the tenant ledger gave it: claimed tasks, or ready ones about to be.
        waiting: ready task instances waiting for a slot.
    """

    held: int
    waiting: int


class JobOut(BaseModel):
    """A job: its definition (the shape of the POST body), status and counters.

    Attributes:
        tenant: the team that owns the job.
        status: ``active``, ``paused``, ``deleted`` (a deleted job's history stays) or
            ``done``: active, but its schedule fires no more (a ``once`` job that fired, a
            job whose ``max_runs`` are spent) and its last run ended.
        next_run_at: the next tick that will fire, null when none will (paused, deleted,
            manual, or a once job that fired).
        created_at / updated_at / deleted_at: instants of the last registration, last
            change, deletion.
        skipped_count: how many of its ticks were skipped (``GET .../skipped`` lists them).
        max_active_runs / max_queued_runs / overlap / jitter_s / max_lease_expiries: see
            ``definition.JobDefinition``.
        runs_remaining: runs the schedule may still fire (``max_runs``); null when unbounded.
    """

    job_id: str
    tenant: str = "default"
    name: str
    schedule: ScheduleOut
    command: list[str]
    timeout_s: Number
    grace_s: Number
    lease_ttl_s: Number
    retry_policy: RetryPolicyOut
    status: Literal["active", "paused", "deleted", "done"]
    next_run_at: str | None
    created_at: str
    updated_at: str | None
    deleted_at: str | None
    counts: Counts
    last_run: LastRun | None
    skipped_count: int = 0
    max_active_runs: int = 16
    overlap: Literal["allow", "skip", "buffer_one", "cancel_previous"] = "allow"
    jitter_s: Number = 0
    runs_remaining: int | None = None
    tasks: list[dict[str, Any]] = []
    """The DAG's tasks as defined (see ``definition.TaskIn``); empty for a one-task job."""
    max_active_tasks: int = 16
    run_timeout_s: Number | None = None
    max_queued_runs: int = 100
    max_lease_expiries: int = 3
    isolation: Literal["process", "thread"] = "process"
    priority: int = 0
    priority_aging_s: Number = 300
    breaker_failures: int = 0
    breaker_window_s: Number = 600
    breaker_cooldown_s: Number = 300
    tags: list[str] = []
    """Its tags (``definition.JobDefinition``); ``critical`` pages on a missed tick."""
    suspended: Suspended | None = None
    """The open circuit (``cronlog.breaker``), or null while it is closed."""
    slots: TenantSlots | None = None
    """Its tenant slots (the tenant ledger), or null for the default tenant."""


class JobList(BaseModel):
    """``GET /api/v1/jobs``: one page of jobs ordered by job_id."""

    jobs: list[JobOut]
    next_cursor: str | None = None
    """Pass as ``cursor`` for the next page; null when this page is the last."""


class Release(BaseModel):
    """A lease given back unfinished (a draining worker's ReleaseTask): not a failure."""

    worker_id: str
    epoch: int
    at: str
    reason: str


class Attempt(BaseModel):
    """One attempt of one task of a run.

    Attributes:
        releases: leases on this attempt given back unfinished before the current one
            (the attempt then ran again under a higher epoch, same attempt number).
    """

    task: str
    attempt: int
    state: str
    worker_id: str | None
    epoch: int | None
    claimed_at: str | None
    started_at: str | None
    finished_at: str | None
    exit_code: int | None
    failure_kind: str | None
    releases: list[Release] = []


class TaskInstanceOut(BaseModel):
    """One task of a run, as it stands (a DAG run has one per task; a one-task job, one).

    Attributes:
        state: ``pending`` (upstream not done, or no free task slot) → ``ready`` →
            ``running`` → ``succeeded`` | ``failed``; ``retrying`` while a retry waits for
            its backoff; ``skipped`` / ``upstream_failed`` when its trigger rule says it will
            never run; ``cancelled``.
        attempt / epoch / worker_id: the current (or last) attempt and its lease holder.
        ready_at / claimed_at / started_at / finished_at: instants of the current attempt
            (ISO UTC ``Z``); ``finished_at`` of a skipped or upstream_failed task is when
            that was decided.
        retry_at: while ``retrying``, when the next attempt is released.
        trigger_rule: the task's rule (null for a one-task job).
    """

    task: str
    state: Literal[
        "pending",
        "ready",
        "running",
        "retrying",
        "succeeded",
        "failed",
        "skipped",
        "upstream_failed",
        "cancelled",
    ]
    attempt: int
    epoch: int | None
    worker_id: str | None
    ready_at: str | None
    claimed_at: str | None = None
    started_at: str | None
    finished_at: str | None
    exit_code: int | None
    failure_kind: str | None
    retry_at: str | None = None
    trigger_rule: str | None = None


class RunOut(BaseModel):
    """A run: one firing of a job.

    Attributes:
        state: ``scheduled`` → ``ready`` (waiting for a worker) → ``running`` (claimed) →
            ``succeeded`` | ``failed``; ``retrying`` while a retry waits for its backoff;
            ``buffered`` while a ``buffer_one`` tick waits for the active run to end;
            ``queued`` while its tick waits for a slot (``max_active_runs`` runs were active:
            it starts, as ``scheduled``, in tick order when one ends); ``cancelled``
            (terminal) when a ``cancel_previous`` tick displaced it, a user cancelled it, or
            its job was deleted while it was queued (a run with one task cancelled ends
            ``failed``).
        queued_at: when it was queued (null for a run that never was); queued_reason: why.
        release_at: when jitter delays the run, the instant its tasks are released.
        runs_remaining: runs the schedule may still fire after this one (``max_runs``).
        cancelled_by: the run that displaced a cancelled run.
        cancel_reason: why it was cancelled: ``overlap``, ``user`` or ``job_deleted``.
        trigger: ``schedule``, ``catchup``, ``manual``, ``backfill`` or ``replay``.
        attempt / epoch / claimed_by / lease_expires_at: the current attempt and its lease.
        decided_by / exit_code / failure_kind / output_tail: the task the summary names and
            its outcome: while active, the latest finished attempt's; once failed, the task
            whose failure failed the run (the first ``failed`` in task order; with none, the
            first ``cancelled``), not a cleanup that ran after it
            (``services/api/readmodel/run_outcome.py``).
        ready_at / claimed_at / started_at: those of the run's first task (finished_at: the
            run's end).
        trigger_lag_s: seconds from scheduled_for to the first attempt's start (its claim
            until the worker reports the start).
        attempts: every attempt, oldest first.
        task_instances: every task of the run in its task order, each with its own state
            (the run-level attempt/claimed_by/exit_code fields follow the latest task event).
    """

    run_id: str
    job_id: str
    job_name: str | None
    scheduled_for: str
    trigger: str
    tasks: list[str]
    state: str
    attempt: int
    epoch: int
    claimed_by: str | None
    lease_expires_at: str | None
    exit_code: int | None
    failure_kind: str | None
    output_tail: str
    decided_by: str | None = None
    created_at: str
    ready_at: str | None
    claimed_at: str | None
    started_at: str | None
    finished_at: str | None
    retry_at: str | None
    trigger_lag_s: float | None
    attempts: list[Attempt]
    release_at: str | None = None
    runs_remaining: int | None = None
    cancelled_by: str | None = None
    cancel_reason: str | None = None
    queued_at: str | None = None
    queued_reason: str | None = None
    """Why a queued run waits: ``max_active_runs`` or ``suspended`` (open circuit)."""
    timed_out_at: str | None = None
    """When the job's run timeout stopped this run (its tasks cancelled, the run failed)."""
    reopened_at: list[str] = []
    """When reruns reopened this run after it had ended (``POST …/tasks/{task}/retry``)."""
    replay_of: str | None = None
    """For a ``replay`` run: the run whose dead-lettered task it runs again."""
    archived: bool = False
    """True when the run was older than the hot history and was rebuilt from the cold
    archive (``services/api/readmodel/archived.py``; docs/history.md); its ``job_name`` is null."""
    upstream_job_id: str | None = None
    """For an ``after`` run: the upstream job whose run ended and started it."""
    upstream_run_id: str | None = None
    """For an ``after`` run: the upstream run that started it."""
    cancelled_tasks: list[str] = []
    """Tasks cancelled one by one (``POST /runs/{run_id}/cancel`` with a task)."""
    task_instances: list[TaskInstanceOut] = []


class RunList(BaseModel):
    """``GET /api/v1/jobs/{job_id}/runs``: one page, newest scheduled_for first, ties by run_id."""

    job_id: str
    runs: list[RunOut]
    next_cursor: str | None = None
    """Pass as ``cursor`` for the next page; null when this page is the last."""


class Tick(BaseModel):
    """One tick: the instant in UTC, and the wall time in the job's zone with its offset."""

    utc: str
    local: str


class TickList(BaseModel):
    """``GET /api/v1/jobs/{job_id}/ticks``: the job's next ticks, ascending."""

    job_id: str
    ticks: list[Tick]


class SkippedTick(BaseModel):
    """A tick the scheduler did not fire (a ``TickSkipped`` event).

    Attributes:
        scheduled_for: the tick, ISO UTC ``Z``.
        reason: ``catchup_policy``, ``catchup_window``, ``max_active_runs``, … (SkipReason).
        at: when the scheduler skipped it.
    """

    scheduled_for: str
    reason: str
    at: str


class SkippedList(BaseModel):
    """``GET /api/v1/jobs/{job_id}/skipped``: newest first (the last 1000 are kept)."""

    job_id: str
    skipped: list[SkippedTick]


class Problem(BaseModel):
    """An error answer that is not a validation error: what went wrong (``HTTPException``)."""

    detail: str


_ERRORS: dict[int, dict[str, Any]] = {
    400: {"model": Problem, "description": "The body is not parseable (not UTF-8 JSON)."},
    404: {"model": Problem, "description": "Unknown job, run or task."},
    409: {"model": Problem, "description": "The job was deleted, or the run or task ended."},
    413: {"description": "The body is larger than CRONLOG_API_MAX_BODY_BYTES (default 1 MiB)."},
    429: {
        "model": Problem,
        "description": "Over a tenant quota (detail names it); Retry-After says when to retry.",
    },
    503: {"model": Problem, "description": "Kafka or the read model is not reachable yet."},
}
_AUTH: dict[int | str, dict[str, Any]] = {
    401: {"model": Problem, "description": "No bearer token, or a bad one (named in detail)."},
    403: {"model": Problem, "description": "The caller's role may not do this."},
}


def documented(*codes: int, accepted: bool = False) -> dict[int | str, dict[str, Any]]:
    """Return a route's OpenAPI ``responses=``: the error answers ``codes`` (400, 404, 409,
    413, 503), the 401 and 403 of authentication, and, with ``accepted``, the 202 of a write
    whose effect was not seen in time."""
    out: dict[int | str, dict[str, Any]] = {code: _ERRORS[code] for code in codes}
    out.update(_AUTH)
    if accepted:
        out[202] = {
            "model": Accepted,
            "description": "The command is in the log; its effect was not seen in time: "
            "poll the Location.",
        }
    return out
