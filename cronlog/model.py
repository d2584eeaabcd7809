"""The job definition: schedule, tasks, policies. Frozen dataclasses; validated by the core."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum

from cronlog.vocabulary import ALL_FAILURE_KINDS, FailureKind


class ScheduleKind(StrEnum):
    """How a job's ticks are produced."""

    CRON = "cron"
    """A cron expression (5 fields, or 6 with seconds first) read in an IANA time zone."""
    ONCE = "once"
    """One tick at ``run_at`` (UTC); a ``run_at`` already past at registration fires at once."""
    MANUAL = "manual"
    """No ticks: runs only on TriggerJob."""
    EVERY = "every"
    """A fixed interval: ticks at ``anchor_at + k * interval`` for every integer k (default
    anchor: the Unix epoch, so ticks fall on interval boundaries). Temporal's IntervalSpec."""
    AFTER = "after"
    """No ticks: a run for each run of the upstream job ``after_job_id`` that ended as
    ``after_on`` asks (an UpstreamRunEnded command; docs/schedules.md, "After")."""


class AfterOn(StrEnum):
    """Which ends of an upstream run start a run of an ``after`` job."""

    SUCCESS = "success"
    """The upstream run succeeded (RunSucceeded). The default."""
    DONE = "done"
    """The upstream run ended in any way: succeeded, failed or cancelled."""


class OverlapPolicy(StrEnum):
    """What a tick does while an earlier run of the job is still active.

    After Temporal's ``ScheduleOverlapPolicy`` (docs/schedules.md, "Overlap").
    """

    ALLOW = "allow"
    """Start the run anyway, up to ``max_active_runs`` (cron's behaviour). The default."""
    SKIP = "skip"
    """Do not start it: TickSkipped ``overlap``."""
    BUFFER_ONE = "buffer_one"
    """Keep one tick (RunBuffered) and start it when the active runs have ended; a further tick
    while one is buffered is skipped (TickSkipped ``overlap``)."""
    CANCEL_PREVIOUS = "cancel_previous"
    """Cancel the active runs (RunCancelled; their leases are revoked), then start the new one."""


class CatchupPolicy(StrEnum):
    """What happens to ticks that came due while nothing was folding (see docs/schedules.md)."""

    ALL = "all"
    """Fire every missed tick inside ``catchup_window``."""
    LATEST = "latest"
    """Fire one run, for the latest missed tick (cron, Kubernetes and Airflow users' default)."""
    NONE = "none"
    """Fire none of the missed ticks."""


class DstGapPolicy(StrEnum):
    """What a fixed-time cron tick whose wall time falls in a spring-forward gap does.

    Fixed-time: neither the minute nor the hour field (nor seconds, for 6 fields) starts with
    ``*``. Other jobs never fire inside a gap. See docs/schedules.md.
    """

    SHIFT = "shift"
    """Fire once, at the first real instant after the gap (the transition). The default."""
    SKIP = "skip"
    """Do not fire: that wall time does not exist on that day."""


class DstOverlapPolicy(StrEnum):
    """What a fixed-time cron tick whose wall time occurs twice (fall-back overlap) does.

    Other (wildcard) jobs fire at every real instant whose wall time matches, both passes
    included. See docs/schedules.md.
    """

    FIRST = "first"
    """Fire once, on the first pass (the earlier UTC instant). The default."""
    LAST = "last"
    """Fire once, on the second pass (the later UTC instant)."""
    BOTH = "both"
    """Fire on both passes: two ticks, one wall time."""


@dataclass(frozen=True, slots=True)
class Exclusion:
    """A window in which a schedule's ticks are not fired (TickSkipped ``excluded``).

    Read in the schedule's ``timezone``. Every constraint that is set must hold for a tick to
    be excluded; at least one must be set.

    Attributes:
        start_date: first excluded local date, ``YYYY-MM-DD``, inclusive. None: no date bound.
        end_date: last excluded local date, ``YYYY-MM-DD``, inclusive. None: ``start_date``
            alone (a single day), or no date bound when ``start_date`` is None too.
        weekdays: local weekdays, ``mon`` .. ``sun``; empty means any day.
        start_time: local time of day the window opens, ``HH:MM:SS``, inclusive. None: 00:00.
        end_time: local time of day it closes, ``HH:MM:SS``, exclusive. None: end of day.
            An ``end_time`` not after ``start_time`` wraps past midnight (``22:00``-``06:00``).
    """

    start_date: str | None = None
    end_date: str | None = None
    weekdays: tuple[str, ...] = ()
    start_time: str | None = None
    end_time: str | None = None


@dataclass(frozen=True, slots=True)
class Schedule:
    """When a job fires.

    Attributes:
        kind: cron, once or manual.
        expression: the cron expression (``kind=cron`` only), 5 fields or 6 with seconds first.
        timezone: IANA zone the cron expression is read in. Default ``"UTC"``.
        run_at: the instant of a ``once`` job, aware UTC.
        catchup: policy for ticks missed while nothing was folding. Default ``latest``.
        catchup_window: how far back missed ticks may be fired. Default 1 day.
        dst_gap: fixed-time cron ticks inside a spring-forward gap: ``shift`` (default) fires
            once at the first real instant after the gap, ``skip`` drops them.
        dst_overlap: fixed-time cron ticks whose wall time occurs twice: ``first`` (default),
            ``last`` or ``both`` passes.
        interval: the period of an ``every`` schedule (at least 1 s). None for other kinds.
        anchor_at: the phase of an ``every`` schedule: ticks at ``anchor_at + k * interval``.
            None: the Unix epoch (ticks aligned on interval boundaries).
        start_at: no tick before this instant fires (the first tick is the first one at or
            after it). None: unbounded.
        end_at: no tick after this instant fires; the first tick past it is skipped
            (TickSkipped ``end_at``) and the schedule ends. None: unbounded.
        max_runs: most runs the schedule fires (manual triggers do not count); the tick after
            the last is skipped (TickSkipped ``max_runs``) and the schedule ends. None: no limit.
        exclusions: windows whose ticks are skipped (TickSkipped ``excluded``).
        misfire_grace: a tick folded at most this late is on time and always fires; later ones
            follow ``catchup``. Default 60 s (APScheduler's ``misfire_grace_time``).
        after_job_id: the upstream job of an ``after`` schedule; None for other kinds.
        after_on: which upstream run ends start a run (``after`` only). Default ``success``.
    """

    kind: ScheduleKind
    expression: str | None = None
    timezone: str = "UTC"
    run_at: datetime | None = None
    catchup: CatchupPolicy = CatchupPolicy.LATEST
    catchup_window: timedelta = timedelta(days=1)
    dst_gap: DstGapPolicy = DstGapPolicy.SHIFT
    dst_overlap: DstOverlapPolicy = DstOverlapPolicy.FIRST
    interval: timedelta | None = None
    anchor_at: datetime | None = None
    start_at: datetime | None = None
    end_at: datetime | None = None
    max_runs: int | None = None
    exclusions: tuple[Exclusion, ...] = ()
    misfire_grace: timedelta = timedelta(seconds=60)
    after_job_id: str | None = None
    after_on: AfterOn = AfterOn.SUCCESS


class BackoffKind(StrEnum):
    """How the delay between attempts grows (``base`` is ``RetryPolicy.backoff``)."""

    CONSTANT = "constant"
    """Every retry waits ``base``."""
    LINEAR = "linear"
    """The retry after attempt n waits ``n * base``."""
    EXPONENTIAL = "exponential"
    """The retry after attempt n waits ``base * coefficient**(n-1)`` (Temporal's rule)."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How failed attempts are retried (vocabulary after Temporal's ``RetryPolicy``).

    Attributes:
        max_attempts: total attempts including the first; 1 means no retry. Default 1.
        backoff: the base delay (before the second attempt). Default 10 s.
        backoff_coefficient: exponential only: multiplier per further attempt. Default 2.0.
        max_backoff: cap on the delay. Default 10 min.
        kind: how the delay grows: constant, linear or exponential (default).
        jitter: fraction in [0, 1]: each delay is shortened by up to this share of itself, by
            a deterministic amount hashed from (run_id, task, attempt). Default 0.2.
        retry_on: the failure kinds that are retried; any other ends the task at once
            (dead letter). Default: every kind.
        non_retryable_exit_codes: exit codes of a ``nonzero_exit`` failure that end the task
            at once (Temporal's non-retryable error types, for exit codes). Default none.
    """

    max_attempts: int = 1
    backoff: timedelta = timedelta(seconds=10)
    backoff_coefficient: float = 2.0
    max_backoff: timedelta = timedelta(minutes=10)
    kind: BackoffKind = BackoffKind.EXPONENTIAL
    jitter: float = 0.2
    retry_on: tuple[FailureKind, ...] = ALL_FAILURE_KINDS
    non_retryable_exit_codes: tuple[int, ...] = ()

    def retryable(self, kind: FailureKind, exit_code: int | None) -> bool:
        """Return whether a failure of ``kind`` (with ``exit_code``) may be retried at all."""
        if kind not in self.retry_on:
            return False
        return not (kind is FailureKind.NONZERO_EXIT and exit_code in self.non_retryable_exit_codes)


class TaskKind(StrEnum):
    """What a worker runs for each task of a job."""

    EXEC = "exec"
    """``command`` as an argv list, no shell. The default."""
    SHELL = "shell"
    """``shell``, a command string run by ``/bin/sh -c`` (explicit opt-in)."""
    PYTHON = "python"
    """``callable``, an importable ``module:function`` called in the worker's process pool with
    the run context dict; a return is success, an exception failure."""
    HTTP = "http"
    """``http``, one HTTP request; success when the status code is in its success set."""


@dataclass(frozen=True, slots=True)
class HttpHeader:
    """One request header of an http task.

    Attributes:
        name: header name.
        value: header value.
    """

    name: str
    value: str


@dataclass(frozen=True, slots=True)
class HttpTask:
    """The request an http task sends.

    Attributes:
        url: absolute ``http://`` or ``https://`` URL.
        method: HTTP method, upper case. Default ``GET``.
        headers: request headers, in order; the worker adds ``X-Cronlog-*`` context headers.
        body: request body as UTF-8 text; None sends none.
        success_codes: status codes that count as success; empty means any 2xx (the default).
    """

    url: str
    method: str = "GET"
    headers: tuple[HttpHeader, ...] = ()
    body: str | None = None
    success_codes: tuple[int, ...] = ()


class Isolation(StrEnum):
    """Where a worker runs a ``python`` task's call."""

    PROCESS = "process"
    """In the worker's process pool: a timeout or a revoked lease kills the pool process; the
    call's prints are captured. The default."""
    THREAD = "thread"
    """In the worker's own process, in the attempt's thread: no inter-process round trip (for
    cheap calls), but a call that overruns its timeout or loses its lease cannot be killed: it
    is reported (``timeout``) and left to finish in the background, and prints are not
    captured (its return value is its output)."""


@dataclass(frozen=True, slots=True)
class TaskAction:
    """What a worker runs for a granted attempt, beside the argv ``command`` (TaskClaimed).

    Attributes:
        kind: the task kind. Default ``exec`` (the grant's ``command``).
        shell: the command string of a ``shell`` task; None otherwise.
        callable: ``module:function`` of a ``python`` task; None otherwise.
        http: the request of an ``http`` task; None otherwise.
        isolation: where a ``python`` call runs. Default ``process``.
    """

    kind: TaskKind = TaskKind.EXEC
    shell: str | None = None
    callable: str | None = None
    http: HttpTask | None = None
    isolation: Isolation = Isolation.PROCESS


class TriggerRule(StrEnum):
    """When a task with upstream tasks runs.

    Airflow's trigger rules, same names and meaning (Airflow docs, "DAGs" → "Trigger Rules").
    Upstream ``cancelled`` counts as ``failed``.
    """

    ALL_SUCCESS = "all_success"
    """Every upstream succeeded (the default). One failed: upstream_failed; one skipped:
    skipped."""
    ALL_FAILED = "all_failed"
    """Every upstream failed or is upstream_failed; otherwise skipped."""
    ALL_DONE = "all_done"
    """Every upstream ended, whatever the outcome."""
    ONE_SUCCESS = "one_success"
    """As soon as one upstream succeeded (does not wait for the rest)."""
    ONE_FAILED = "one_failed"
    """As soon as one upstream failed (does not wait for the rest); none did: skipped."""
    NONE_FAILED = "none_failed"
    """Every upstream ended and none failed (succeeded or skipped)."""
    NONE_FAILED_MIN_ONE_SUCCESS = "none_failed_min_one_success"
    """Every upstream ended, none failed, at least one succeeded; all skipped: skipped."""
    ALWAYS = "always"
    """No dependency at all: ready when the run starts (Airflow: "run this task at any
    time")."""


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """One task of a job's DAG. ``None`` settings inherit the job's.

    Attributes:
        name: unique within the job, 1..64 characters.
        command: argv list run by the worker (no shell); ``kind=exec`` only, empty otherwise.
        kind: what the worker runs (TaskKind). Default ``exec`` (``command``).
        shell: command string run by ``/bin/sh -c``; ``kind=shell`` only.
        callable: ``module:function`` run in the worker's process pool; ``kind=python`` only.
        http: the request sent; ``kind=http`` only.
        depends_on: names of the upstream tasks.
        trigger_rule: when it runs given its upstream outcomes. Default ``all_success``.
        retry_policy, timeout, lease_ttl: per-task overrides of the job's; None inherits.
        isolation: where a ``python`` task's call runs. Default ``process``.
        priority: the task's priority class (``cronlog.priority``); None inherits the job's.
    """

    name: str
    command: tuple[str, ...] = ()
    kind: TaskKind = TaskKind.EXEC
    shell: str | None = None
    callable: str | None = None
    http: HttpTask | None = None
    depends_on: tuple[str, ...] = ()
    trigger_rule: TriggerRule = TriggerRule.ALL_SUCCESS
    retry_policy: RetryPolicy | None = None
    timeout: timedelta | None = None
    lease_ttl: timedelta | None = None
    isolation: Isolation = Isolation.PROCESS
    priority: int | None = None

    def action(self) -> TaskAction:
        """Return what a worker runs for this task (travels in TaskClaimed)."""
        return TaskAction(self.kind, self.shell, self.callable, self.http, self.isolation)


MAIN_TASK = "main"
"""The name of a one-task job's task (the API's and YAML's job-level ``command`` form)."""


def main_task(
    command: tuple[str, ...] = (),
    *,
    kind: TaskKind = TaskKind.EXEC,
    shell: str | None = None,
    callable: str | None = None,
    http: HttpTask | None = None,
    isolation: Isolation = Isolation.PROCESS,
) -> tuple[TaskSpec, ...]:
    """Return the ``task_specs`` of a one-task job: one TaskSpec named ``main``.

    Args:
        command: its argv (``kind=exec``); empty for the other kinds.
        kind: what it runs (TaskKind). Default ``exec``.
        shell: the command string of a ``shell`` task.
        callable: ``module:function`` of a ``python`` task.
        http: the request of an ``http`` task.
        isolation: where a ``python`` call runs. Default ``process``.

    Returns:
        A 1-tuple, for ``JobSpec(task_specs=...)``; the rest of the task's settings
        inherit the job's.
    """
    return (TaskSpec(MAIN_TASK, command, kind, shell, callable, http, isolation=isolation),)


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A job's definition as registered: a schedule, a DAG of one or more tasks, policies.

    Every job has its tasks in ``task_specs``; a one-task job has one, named ``main``
    (``main_task``). Definitions written before this one shape (job-level ``command``,
    ``kind``, ... and no ``task_specs``) are turned into it where they are read
    (``cronlog.job_level``).

    Attributes:
        name: human name; free text, 1..200 characters.
        schedule: when it fires.
        task_specs: the job's tasks, in definition order (``tasks`` lists their names); at
            least one.
        timeout: the worker sends SIGTERM to the task's process group after this long; a
            task's own ``timeout`` overrides it. Default 1 hour.
        grace: then SIGKILL after this much longer. Default 10 s (Kubernetes'
            terminationGracePeriodSeconds is 30 s; tasks here are expected to stop faster).
        retry_policy: retries of failed attempts; a task's own overrides it.
        lease_ttl: how long a claim holds without renewal; a task's own overrides it.
            Default 60 s.
        max_active_runs: most runs active at once; a tick that would exceed it is queued
            (RunQueued) and started, in tick order, when a run ends (Airflow queues a DAG
            run at ``max_active_runs``). Default 16, as Airflow's ``max_active_runs_per_dag``.
            It also bounds the job's table record.
        overlap: what a tick does while an earlier run is active. Default ``allow``.
        jitter: each scheduled run's release (TaskReady) is delayed by a deterministic offset
            in [0, jitter) hashed from (job_id, scheduled_for); ``scheduled_for`` stays the
            nominal tick. Default 0 (no delay).
        max_active_tasks: most task instances of one run ready or running at once; others
            wait (pending) though their trigger rule is met. Default 16, as Airflow's.
        run_timeout: a run still going this long after it was scheduled is stopped: every
            task not ended is cancelled (RunTimedOut) and the run fails (Airflow's
            ``dagrun_timeout``). None (default): no limit.
        max_lease_expiries: how often a task instance's lease may lapse (its worker crashed
            or hung) and the attempt be given back before the task is dead-lettered as
            ``lease_expired``; lapses never spend the retry budget. Default 3.
        max_queued_runs: most runs kept queued while ``max_active_runs`` are active; a tick
            past it is skipped (TickSkipped ``queue_full``). Default 100.
        tenant: the team that owns the job (``cronlog.tenants``); fixed at registration.
            Default ``"default"``, the tenant of single-team use.
        priority: the priority class of its tasks, -9..9, higher starts first under backlog
            (``cronlog.priority``); a task's own overrides it. Default 0.
        priority_aging: a waiting task counts as one class higher per this much waiting, so
            nothing starves (``cronlog.priority``). Default 5 minutes.
        breaker_failures: the job's circuit opens (``cronlog.breaker``) when this many
            attempts failed within ``breaker_window`` with no success between; 0 (default)
            turns the breaker off.
        breaker_window: see ``breaker_failures``. Default 10 minutes.
        breaker_cooldown: an open circuit half-opens (one probe run) this long after it
            opened. Default 5 minutes.
        tags: short labels for people and alerts (``critical`` marks a job whose missed
            tick pages: docs/metrics.md); each ``TAG_PATTERN`` of ``cronlog.validation``, at
            most 16, no duplicates, order kept. Default none.
    """

    name: str
    schedule: Schedule
    task_specs: tuple[TaskSpec, ...]
    timeout: timedelta = timedelta(hours=1)
    grace: timedelta = timedelta(seconds=10)
    retry_policy: RetryPolicy = field(default_factory=RetryPolicy)
    lease_ttl: timedelta = timedelta(seconds=60)
    max_active_runs: int = 16
    overlap: OverlapPolicy = OverlapPolicy.ALLOW
    jitter: timedelta = timedelta(0)
    max_active_tasks: int = 16
    run_timeout: timedelta | None = None
    max_lease_expiries: int = 3
    max_queued_runs: int = 100
    tenant: str = "default"
    priority: int = 0
    priority_aging: timedelta = timedelta(minutes=5)
    breaker_failures: int = 0
    breaker_window: timedelta = timedelta(minutes=10)
    breaker_cooldown: timedelta = timedelta(minutes=5)
    tags: tuple[str, ...] = ()

    @property
    def tasks(self) -> tuple[str, ...]:
        """The task names, in definition order (``("main",)`` for a one-task job)."""
        return tuple(t.name for t in self.task_specs)

    def task_spec(self, name: str) -> TaskSpec:
        """Return task ``name`` with every inherited setting filled in from the job.

        An unknown name (a run started before a redefinition dropped the task; decide never
        asks for one of a live task instance) gets an empty exec task with no command.
        """
        found = next((t for t in self.task_specs if t.name == name), None)
        if found is None:
            found = TaskSpec(name)
        return replace(
            found,
            retry_policy=found.retry_policy or self.retry_policy,
            timeout=found.timeout if found.timeout is not None else self.timeout,
            lease_ttl=(found.lease_ttl if found.lease_ttl is not None else self.lease_ttl),
        )
