"""The one JSON shape of a job's definition (pydantic, ``extra="forbid"``) and its field types.

The POST body, the definition part of ``GET /api/v1/jobs/{job_id}`` and what ``PATCH`` merges
into. Durations are seconds, named ``*_s``; instants are ISO-8601 strings with a zone
(answers: UTC with ``Z``).
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time
from typing import Annotated, Literal

from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, Field

from cronlog.breaker import MAX_BREAKER_FAILURES
from cronlog.limits import EARLIEST, LATEST, MAX_DURATION, MAX_JOB_ID_CHARS, MAX_TAGS
from cronlog.priority import MAX_PRIORITY, MAX_PRIORITY_AGING, MIN_PRIORITY
from cronlog.tenants import TENANT_PATTERN
from cronlog.validation import MAX_LEASE_EXPIRIES_LIMIT, MAX_QUEUED_RUNS_LIMIT, TAG_PATTERN

JOB_ID_PATTERN = rf"^[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_JOB_ID_CHARS - 1}}}$"
Priority = Annotated[int, Field(ge=MIN_PRIORITY, le=MAX_PRIORITY, strict=True)]
"""A priority class (``cronlog.priority``)."""
AgingSeconds = Annotated[
    float, Field(ge=1, le=MAX_PRIORITY_AGING.total_seconds(), allow_inf_nan=False)
]
"""``priority_aging_s``: 1 s .. 7 days."""
TENANT_NAME_PATTERN = rf"^{TENANT_PATTERN.pattern}$"
"""A tenant name (``cronlog.tenants.TENANT_PATTERN``)."""
"""job_ids are URL-path safe: letters, digits, ``.``, ``_``, ``-``; 1..128 characters."""

MAX_DURATION_S = int(MAX_DURATION.total_seconds())
"""Upper bound of every duration field, seconds (10 years of 365 days): instants are at most
year 9000, so no sum of instants and durations in the core can overflow a datetime. The
number lives in ``cronlog/limits.py``, with the decoder's limits of every command field."""
Seconds = Annotated[float, Field(allow_inf_nan=False, ge=0, le=MAX_DURATION_S)]
"""A duration in seconds: finite, ``0..MAX_DURATION_S`` (the core asks more of some fields:
``timeout_s`` > 0, ``lease_ttl_s`` and ``interval_s`` at least 1, ...)."""


def _unique_tags(tags: list[str]) -> list[str]:
    for i, tag in enumerate(tags):
        if tag in tags[:i]:
            raise ValueError(f"tag {tag!r} is listed twice (at {i})")
    return tags


Tags = Annotated[
    list[Annotated[str, Field(pattern=TAG_PATTERN)]],
    Field(max_length=MAX_TAGS),
    AfterValidator(_unique_tags),
]
"""A job's tags: at most 16, each ``TAG_PATTERN`` (``critical`` pages on a missed tick)."""


def _instant_in_range(value: datetime) -> datetime:
    # Checked on the year first: moving year 1 or 9999 with an offset to UTC overflows. Then
    # in UTC, as the decoder of commands checks it (an offset moves the year by up to a day).
    if not 1970 <= value.year <= 9000 or not EARLIEST <= value.astimezone(UTC) <= LATEST:
        raise ValueError("must be between the years 1970 and 9000 (UTC)")
    return value


Instant = Annotated[AwareDatetime, AfterValidator(_instant_in_range)]
"""An aware instant the fold can store as epoch milliseconds (1970..9000)."""


class StrictModel(BaseModel):
    """A shape that refuses fields it does not know (a typo is a 422 naming the field)."""

    model_config = ConfigDict(extra="forbid")


Weekday = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
Kind = Literal["cron", "once", "manual", "every", "after"]
AfterOnName = Literal["success", "done"]
Overlap = Literal["allow", "skip", "buffer_one", "cancel_previous"]
DstGapName = Literal["shift", "skip"]
DstOverlapName = Literal["first", "last", "both"]
TaskKindName = Literal["exec", "shell", "python", "http"]
Isolation = Literal["process", "thread"]
"""Where a python task's call runs (cronlog.model.Isolation)."""


class ExclusionIn(StrictModel):
    """A window whose ticks are skipped, in the schedule's timezone (docs/schedules.md).

    Every constraint set must hold; at least one must be set.

    Attributes:
        start_date / end_date: local dates ``YYYY-MM-DD``, inclusive (end defaults to start).
        weekdays: ``mon`` .. ``sun``; empty for any day.
        start_time / end_time: local times of day ``HH:MM[:SS]``, start inclusive, end
            exclusive; an end not after the start wraps past midnight.
    """

    start_date: date | None = None
    end_date: date | None = None
    weekdays: list[Weekday] = Field(default_factory=list)
    start_time: time | None = None
    end_time: time | None = None


class ScheduleIn(StrictModel):
    """When a job fires.

    Attributes:
        type: ``cron`` (expression in timezone), ``once`` (run_at), ``every`` (interval_s)
            or ``manual`` (triggers only).
        expression: cron expression, 5 fields or 6 with seconds first (``cron`` only).
        timezone: IANA zone the expression (and the exclusions) are read in. Default ``UTC``.
        run_at: the instant of a ``once`` job, ISO 8601 with a zone.
        interval_s: the period of an ``every`` job, seconds (at least 1).
        anchor_at: the phase of an ``every`` job: ticks at anchor_at + k * interval. Default
            the Unix epoch (ticks on interval boundaries).
        start_at / end_at: no tick fires before / after these instants; the first tick past
            ``end_at`` is skipped (``end_at``) and ends the schedule.
        max_runs: most scheduled runs (manual triggers do not count); then ``max_runs``.
        exclusions: windows whose ticks are skipped (``excluded``).
        catchup: missed-tick policy: ``all``, ``latest`` (default) or ``none``.
        catchup_window_s: how far back missed ticks may be fired, seconds. Default 86400.
        misfire_grace_s: a tick folded at most this late is on time, seconds (at least 1).
            Default 60.
        job_id: the upstream job of an ``after`` job: a run starts for each of its runs that
            ends as ``on`` asks (docs/schedules.md, "After").
        on: ``success`` (default: the upstream run succeeded) or ``done`` (it ended in any
            way: succeeded, failed or cancelled); ``after`` only.
        dst_gap / dst_overlap: fixed-time cron ticks in a spring-forward gap: ``shift``
            (default: once, at the gap's end) or ``skip``; whose wall time occurs twice:
            ``first`` (default), ``last`` or ``both`` (docs/schedules.md); cron only.
    """

    type: Kind
    expression: str | None = None
    timezone: str = "UTC"
    run_at: Instant | None = None
    catchup: Literal["all", "latest", "none"] = "latest"
    catchup_window_s: Seconds = 86400.0
    interval_s: Seconds | None = None
    anchor_at: Instant | None = None
    start_at: Instant | None = None
    end_at: Instant | None = None
    max_runs: int | None = Field(default=None, ge=1, le=2**62)
    exclusions: list[ExclusionIn] = Field(default_factory=list, max_length=64)
    misfire_grace_s: Seconds = 60.0
    job_id: str | None = None
    on: AfterOnName = "success"
    dst_gap: DstGapName = "shift"
    dst_overlap: DstOverlapName = "first"


BackoffName = Literal["constant", "linear", "exponential"]
FailureKindName = Literal["nonzero_exit", "timeout", "lease_expired", "spawn_error"]
ALL_FAILURE_KIND_NAMES: list[FailureKindName] = [
    "nonzero_exit",
    "timeout",
    "lease_expired",
    "spawn_error",
]
ExitCode = Annotated[int, Field(ge=1, le=255)]


class RetryPolicyIn(StrictModel):
    """Retries of failed attempts (Temporal's vocabulary; cronlog.model.RetryPolicy).

    Attributes:
        max_attempts: total attempts including the first; 1 = no retry. Default 1.
        backoff: how the delay grows: ``constant`` (base_s every time), ``linear``
            (n x base_s after attempt n), ``exponential`` (base_s x coefficient^(n-1), the
            default).
        base_s: the base delay, seconds. Default 10.
        backoff_coefficient: exponential only: multiplier per further attempt. Default 2.0.
        max_s: cap on the delay, seconds. Default 600.
        jitter: fraction 0..1: each delay is shortened by up to this share, by an amount
            hashed from (run_id, task, attempt). Default 0.2.
        retry_on: failure kinds that are retried; another kind is dead-lettered at once.
            Default all: nonzero_exit, timeout, lease_expired, spawn_error.
        non_retryable_exit_codes: exit codes (1..255) dead-lettered at once. Default none.
    """

    max_attempts: int = Field(default=1, ge=1, le=10_000)
    backoff: BackoffName = "exponential"
    base_s: Seconds = 10.0
    backoff_coefficient: float = Field(default=2.0, allow_inf_nan=False, le=1000)
    max_s: Seconds = 600.0
    jitter: float = Field(default=0.2, ge=0.0, le=1.0, allow_inf_nan=False)
    retry_on: list[FailureKindName] = Field(
        default_factory=lambda: list(ALL_FAILURE_KIND_NAMES), max_length=4
    )
    non_retryable_exit_codes: list[ExitCode] = Field(default_factory=list, max_length=255)


class HttpTaskIn(StrictModel):
    """The request of an ``http`` task.

    Attributes:
        url: absolute http:// or https:// URL.
        method: HTTP method. Default ``GET``.
        headers: request headers; the worker adds ``X-Cronlog-*`` context headers.
        body: request body, text; null sends none.
        success_codes: status codes counted as success; empty (default) means any 2xx.
    """

    url: str
    method: str = "GET"
    headers: dict[str, str] = Field(default_factory=dict)
    body: str | None = None
    success_codes: list[int] = Field(default_factory=list)


TriggerRuleName = Literal[
    "all_success",
    "all_failed",
    "all_done",
    "one_success",
    "one_failed",
    "none_failed",
    "none_failed_min_one_success",
    "always",
]
TaskName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
"""Task names are URL-path and environment safe, like job_ids."""


class TaskIn(StrictModel):
    """One task of a DAG job (``tasks`` of a definition).

    Attributes:
        name: unique within the job, 1..64 characters.
        command / kind / shell / callable / http: what runs, as for a one-task job.
        depends_on: names of upstream tasks (unknown names and cycles are a 422).
        trigger_rule: Airflow's rules: ``all_success`` (default), ``all_failed``,
            ``all_done``, ``one_success``, ``one_failed``, ``none_failed``,
            ``none_failed_min_one_success``, ``always``.
        retry_policy, timeout_s, lease_ttl_s: overrides of the job's; null inherits.
        isolation: where a ``python`` task's call runs: ``process`` (default; the worker's
            pool, killable) or ``thread`` (in the worker, no process round trip; cannot be
            killed on timeout).
        priority: the task's priority class (-9..9); null inherits the job's.
    """

    name: TaskName
    command: list[str] = Field(default_factory=list)
    kind: TaskKindName = "exec"
    shell: str | None = None
    callable: str | None = None
    http: HttpTaskIn | None = None
    depends_on: list[TaskName] = Field(default_factory=list, max_length=200)
    trigger_rule: TriggerRuleName = "all_success"
    retry_policy: RetryPolicyIn | None = None
    timeout_s: Seconds | None = None
    lease_ttl_s: Seconds | None = None
    isolation: Isolation = "process"
    priority: Priority | None = None


class JobDefinition(StrictModel):
    """A job's definition (everything but its id).

    Attributes:
        name: human name, 1..200 characters.
        schedule: when it fires.
        command: argv list run by the worker (no shell unless the argv asks for one); kind
            ``exec`` only.
        timeout_s: the worker sends SIGTERM to the task's process group after this many
            seconds. Default 3600.
        grace_s: and SIGKILL this many seconds after that. Default 10. The fold's hard
            deadline for an attempt is claim + timeout_s + grace_s + lease_ttl_s.
        lease_ttl_s: how long a claim holds without renewal, seconds. Default 60.
        retry_policy: retries of failed attempts. Default: no retry.
        max_active_runs: most runs active at once; a tick beyond it is queued (run state
            ``queued``) and starts, in tick order, when an active run ends. Default 16.
        max_queued_runs: most runs kept queued (0..1000); a tick past it is skipped
            (``queue_full``). Default 100.
        overlap: a tick while a run is active: ``allow`` (default), ``skip``, ``buffer_one``,
            ``cancel_previous`` (Temporal's ScheduleOverlapPolicy).
        jitter_s: each scheduled run is released up to this many seconds after its tick, by a
            deterministic offset hashed from (job_id, scheduled_for). Default 0.
        kind: what the worker runs: ``exec`` (``command``, the default), ``shell`` (``shell``
            by /bin/sh -c), ``python`` (``callable``, ``module:function`` given the run
            context dict), ``http`` (``http``).
        shell, callable, http: the kind's task; null for the other kinds.
        tasks: a DAG of tasks (see TaskIn); empty (default) for a one-task job, whose task
            is ``main`` and runs the job-level command. With tasks, leave the job-level
            command/kind fields unset.
        max_active_tasks: most task instances of one run ready or running at once.
            Default 16.
        run_timeout_s: a run still going this many seconds after it was scheduled is
            stopped: tasks not ended are cancelled and the run fails. Default null (none).
        max_lease_expiries: how often a task's lease may lapse (its worker crashed or hung)
            and the attempt be given back, without spending a retry, before the task is
            dead-lettered as ``lease_expired`` (0..100). Default 3.
        isolation: where a one-task job's ``python`` call runs: ``process`` (default) or
            ``thread`` (see TaskIn).
        priority: the priority class of its tasks, -9..9: under backlog a higher class is
            granted a worker slot first. Default 0. docs/dispatch.md, "Priorities".
        priority_aging_s: a waiting task counts as one class higher per this many seconds
            waited (1 .. 604800), so nothing starves. Default 300.
        breaker_failures: the job's circuit opens (``JobSuspended``; new runs queue) when
            this many attempts failed within ``breaker_window_s`` with no success between
            (0..100; 0, the default, is off). docs/schedules.md, "Circuit breaking".
        breaker_window_s: the window ``breaker_failures`` counts in, seconds (1 .. 604800).
            Default 600.
        breaker_cooldown_s: an open circuit half-opens (one probe run) this many seconds
            after it opened (1 .. 604800). Default 300.
        tags: short labels (at most 16, each ``^[a-z0-9][a-z0-9_.-]{0,62}$``, no duplicates);
            ``critical`` marks a job whose missed tick pages (docs/metrics.md). Default none.
    """

    name: str
    schedule: ScheduleIn
    command: list[str] = Field(default_factory=list)
    timeout_s: Seconds = 3600.0
    grace_s: Seconds = 10.0
    lease_ttl_s: Seconds = 60.0
    retry_policy: RetryPolicyIn = Field(default_factory=RetryPolicyIn)
    max_active_runs: int = Field(default=16, ge=1, le=256)
    overlap: Overlap = "allow"
    jitter_s: Seconds = Field(default=0.0, ge=0)
    kind: TaskKindName = "exec"
    shell: str | None = None
    callable: str | None = None
    http: HttpTaskIn | None = None
    tasks: list[TaskIn] = Field(default_factory=list, max_length=200)
    max_active_tasks: int = Field(default=16, ge=1, le=200)
    run_timeout_s: Seconds | None = Field(default=None, gt=0)
    max_queued_runs: int = Field(default=100, ge=0, le=MAX_QUEUED_RUNS_LIMIT)
    max_lease_expiries: int = Field(default=3, ge=0, le=MAX_LEASE_EXPIRIES_LIMIT)
    isolation: Isolation = "process"
    priority: Priority = 0
    priority_aging_s: AgingSeconds = 300.0
    breaker_failures: int = Field(default=0, ge=0, le=MAX_BREAKER_FAILURES)
    breaker_window_s: AgingSeconds = 600.0
    breaker_cooldown_s: AgingSeconds = 300.0
    tags: Tags = Field(default_factory=list)


class JobIn(JobDefinition):
    """Body of ``POST /api/v1/jobs``.

    Attributes:
        job_id: the job's id; generated when absent. Re-using a live id is a 409.
        tenant: the owning tenant; only a platform caller (tenant ``*``) names one (default
            ``default``); anyone else's jobs are their own tenant's (leave it out).
    """

    job_id: Annotated[str, Field(pattern=JOB_ID_PATTERN)] | None = None
    tenant: Annotated[str, Field(pattern=TENANT_NAME_PATTERN)] | None = None
