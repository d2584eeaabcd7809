"""What a task of a job runs, and how its failed attempts are retried (TaskSpec, RetryPolicy).

Re-exported by ``cronlog.model``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

from cronlog.vocabulary import ALL_FAILURE_KINDS, FailureKind


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
