"""Validation of a job definition; errors name the offending field."""

from __future__ import annotations

import re
from datetime import timedelta
from urllib.parse import urlsplit

from cronlog.breaker import MAX_BREAKER_FAILURES
from cronlog.dag import find_cycle
from cronlog.errors import InvalidDefinition
from cronlog.limits import (
    MAX_ARGV_ITEMS,
    MAX_CALLABLE_CHARS,
    MAX_EXPRESSION_CHARS,
    MAX_HTTP_HEADERS,
    MAX_NAME_CHARS,
    MAX_SUCCESS_CODES,
    MAX_TAG_CHARS,
    MAX_TAGS,
)
from cronlog.limits import MAX_COMMAND_BYTES as MAX_COMMAND_BYTES  # re-exported: its old home
from cronlog.limits import MAX_TASK_NAME as MAX_TASK_NAME  # re-exported
from cronlog.limits import MAX_TASKS as MAX_TASKS  # re-exported
from cronlog.model import HttpTask, Isolation, JobSpec, RetryPolicy, TaskKind, TaskSpec
from cronlog.priority import MAX_PRIORITY, MAX_PRIORITY_AGING, MIN_PRIORITY
from cronlog.schedule import validate_schedule

MAX_ACTIVE_RUNS_LIMIT = 256
"""Upper bound of max_active_runs (active runs live in the job's table record)."""
MAX_QUEUED_RUNS_LIMIT = 1000
"""Upper bound of max_queued_runs (queued ticks live in the job's record, ~100 bytes each)."""
MAX_LEASE_EXPIRIES_LIMIT = 100
"""Upper bound of max_lease_expiries."""
MAX_JITTER = timedelta(days=1)
"""Upper bound of a job's jitter."""
MAX_ACTIVE_TASK_INSTANCES = 1000
"""Upper bound of max_active_runs x tasks: every active task instance lives in the job record
(~150 bytes each), which must fit one changelog message."""
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
"""Methods an http task may use."""
_CALLABLE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")
"""``module.path:function`` (the entry-point object reference syntax, without extras)."""
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
"""An RFC 9110 section 5.1 field name (token)."""
_TASK_NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_TASK_NAME - 1}}}")
"""A DAG task's name: like a job_id (URL-path and environment safe)."""
TAG_PATTERN = rf"^[a-z0-9][a-z0-9_.-]{{0,{MAX_TAG_CHARS - 1}}}$"
"""A job tag: lowercase letters, digits, ``_ . -``, starting with a letter or digit."""
_TAG = re.compile(TAG_PATTERN)
_KIND_FIELD = {TaskKind.SHELL: "shell", TaskKind.PYTHON: "callable", TaskKind.HTTP: "http"}


def validate_priority(spec: JobSpec) -> None:
    """Check the priority classes (job's and tasks') and the aging of ``spec``.

    Raises:
        InvalidDefinition: ``priority``, ``tasks.<name>.priority`` or ``priority_aging_s``.
    """
    bound = f"must be {MIN_PRIORITY}..{MAX_PRIORITY}"
    if not MIN_PRIORITY <= spec.priority <= MAX_PRIORITY:
        raise InvalidDefinition("priority", bound)
    for t in spec.task_specs:
        if t.priority is not None and not MIN_PRIORITY <= t.priority <= MAX_PRIORITY:
            raise InvalidDefinition(f"tasks.{t.name}.priority", bound)
    if not timedelta(seconds=1) <= spec.priority_aging <= MAX_PRIORITY_AGING:
        raise InvalidDefinition("priority_aging_s", "must be 1 s .. 7 days")


def validate_breaker(spec: JobSpec) -> None:
    """Check the circuit breaker settings of ``spec`` (``cronlog.breaker``).

    Raises:
        InvalidDefinition: ``breaker_failures`` (0..100), ``breaker_window_s`` or
            ``breaker_cooldown_s`` (1 s .. 7 days).
    """
    if not 0 <= spec.breaker_failures <= MAX_BREAKER_FAILURES:
        raise InvalidDefinition("breaker_failures", f"must be 0..{MAX_BREAKER_FAILURES}")
    for field, value in (
        ("breaker_window_s", spec.breaker_window),
        ("breaker_cooldown_s", spec.breaker_cooldown),
    ):
        if not timedelta(seconds=1) <= value <= timedelta(days=7):
            raise InvalidDefinition(field, "must be 1 s .. 7 days")


def validate_tags(tags: tuple[str, ...]) -> None:
    """Check a job's tags: each ``TAG_PATTERN``, at most ``MAX_TAGS``, no duplicates.

    Raises:
        InvalidDefinition: ``tags`` (too many), ``tags[i]`` (malformed or a duplicate).
    """
    if len(tags) > MAX_TAGS:
        raise InvalidDefinition("tags", f"{len(tags)} tags; at most {MAX_TAGS}")
    for i, tag in enumerate(tags):
        if _TAG.fullmatch(tag) is None:
            raise InvalidDefinition(f"tags[{i}]", f"{tag!r} does not match {TAG_PATTERN}")
        if tag in tags[:i]:
            raise InvalidDefinition(f"tags[{i}]", f"{tag!r} is listed twice")


def validate_spec(spec: JobSpec, *, job_id: str | None = None) -> None:
    """Check a job definition.

    Args:
        spec: the definition.
        job_id: the job it defines, when known: an ``after`` schedule must not name it.

    Raises:
        InvalidDefinition: naming the first offending field (``name``, ``tasks[0].command``,
            ``schedule.expression``, ``schedule.timezone``, ``timeout_s``, ...).
    """
    if not spec.name or len(spec.name) > MAX_NAME_CHARS:
        raise InvalidDefinition("name", f"must be 1..{MAX_NAME_CHARS} characters")
    expression = spec.schedule.expression
    if expression is not None and len(expression) > MAX_EXPRESSION_CHARS:
        raise InvalidDefinition(
            "schedule.expression", f"{len(expression)} characters; at most {MAX_EXPRESSION_CHARS}"
        )
    validate_tasks(spec)
    validate_schedule(spec.schedule, job_id=job_id)
    validate_limits("", spec.timeout, spec.lease_ttl, spec.retry_policy)
    if spec.grace < timedelta(0):
        raise InvalidDefinition("grace_s", "must not be negative")
    if not 1 <= spec.max_active_runs <= MAX_ACTIVE_RUNS_LIMIT:
        raise InvalidDefinition("max_active_runs", f"must be 1..{MAX_ACTIVE_RUNS_LIMIT}")
    if not 0 <= spec.max_queued_runs <= MAX_QUEUED_RUNS_LIMIT:
        raise InvalidDefinition("max_queued_runs", f"must be 0..{MAX_QUEUED_RUNS_LIMIT}")
    if not 0 <= spec.max_lease_expiries <= MAX_LEASE_EXPIRIES_LIMIT:
        raise InvalidDefinition("max_lease_expiries", f"must be 0..{MAX_LEASE_EXPIRIES_LIMIT}")
    validate_priority(spec)
    validate_breaker(spec)
    validate_tags(spec.tags)
    if not timedelta(0) <= spec.jitter <= MAX_JITTER:
        raise InvalidDefinition("jitter_s", f"must be 0..{MAX_JITTER.total_seconds():g} s")
    if spec.max_active_runs * len(spec.tasks) > MAX_ACTIVE_TASK_INSTANCES:
        raise InvalidDefinition(
            "max_active_runs",
            f"max_active_runs x tasks = "
            f"{spec.max_active_runs * len(spec.tasks)}; at most {MAX_ACTIVE_TASK_INSTANCES}",
        )


def validate_limits(
    prefix: str, timeout: timedelta | None, lease_ttl: timedelta | None, policy: RetryPolicy | None
) -> None:
    """Check a job's or a task's timeout, lease ttl and retry policy (None: inherited).

    Raises:
        InvalidDefinition: naming the field under ``prefix`` (``""`` or ``"tasks[2]."``).
    """
    if timeout is not None and timeout <= timedelta(0):
        raise InvalidDefinition(f"{prefix}timeout_s", "must be positive")
    if lease_ttl is not None and lease_ttl < timedelta(seconds=1):
        raise InvalidDefinition(f"{prefix}lease_ttl_s", "must be at least 1 second")
    if policy is None:
        return
    where = f"{prefix}retry_policy"
    if policy.max_attempts < 1:
        raise InvalidDefinition(f"{where}.max_attempts", "must be at least 1")
    if policy.backoff < timedelta(0) or policy.max_backoff < timedelta(0):
        raise InvalidDefinition(f"{where}.base_s", "base_s and max_s must not be negative")
    if not policy.backoff_coefficient >= 1.0:  # NaN fails this too
        raise InvalidDefinition(f"{where}.backoff_coefficient", "must be at least 1.0")
    if not 0.0 <= policy.jitter <= 1.0:
        raise InvalidDefinition(f"{where}.jitter", "must be a fraction in 0..1")
    if not policy.retry_on and policy.max_attempts > 1:
        raise InvalidDefinition(
            f"{where}.retry_on", "is empty, so max_attempts > 1 could never be used"
        )
    if len(policy.non_retryable_exit_codes) > 256 or any(
        not 1 <= c <= 255 for c in policy.non_retryable_exit_codes
    ):
        raise InvalidDefinition(
            f"{where}.non_retryable_exit_codes", "at most 256 exit codes, each 1..255"
        )


def validate_tasks(spec: JobSpec) -> None:
    """Check a job's tasks (one or more): names, what each runs, dependencies, no cycle.

    Raises:
        InvalidDefinition: ``tasks`` (none, too many, a cycle, naming its path
            ``a → b → a``), ``tasks[i].name`` (malformed or a duplicate),
            ``tasks[i].depends_on`` (unknown or itself), ``tasks[i].<field>`` for a task's
            own fields, ``max_active_tasks``.
    """
    names = [t.name for t in spec.task_specs]
    if not names:
        raise InvalidDefinition("tasks", "a job has at least one task")
    if len(names) > MAX_TASKS:
        raise InvalidDefinition("tasks", f"{len(names)} tasks; at most {MAX_TASKS}")
    seen: set[str] = set()
    for i, t in enumerate(spec.task_specs):
        if not _TASK_NAME.fullmatch(t.name):
            raise InvalidDefinition(
                f"tasks[{i}].name",
                f"must be 1..{MAX_TASK_NAME} characters of letters, digits, "
                "'.', '_', '-', starting with a letter or digit (it is a path segment and an "
                "environment value)",
            )
        if t.name in seen:
            raise InvalidDefinition(f"tasks[{i}].name", f"duplicate task name {t.name!r}")
        seen.add(t.name)
    for i, t in enumerate(spec.task_specs):
        try:
            validate_task(t)
        except InvalidDefinition as exc:
            raise InvalidDefinition(f"tasks[{i}].{exc.field}", exc.reason) from None
        validate_limits(f"tasks[{i}].", t.timeout, t.lease_ttl, t.retry_policy)
        for up in t.depends_on:
            if up == t.name:
                raise InvalidDefinition(
                    f"tasks[{i}].depends_on", f"task {t.name!r} depends on itself"
                )
            if up not in seen:
                raise InvalidDefinition(
                    f"tasks[{i}].depends_on", f"unknown task {up!r} (tasks: {', '.join(names)})"
                )
        if len(set(t.depends_on)) != len(t.depends_on):
            raise InvalidDefinition(f"tasks[{i}].depends_on", "lists a task twice")
    cycle = find_cycle({t.name: t.depends_on for t in spec.task_specs})
    if cycle is not None:
        raise InvalidDefinition("tasks", f"dependency cycle: {' → '.join(cycle)}")
    if not 1 <= spec.max_active_tasks <= MAX_TASKS:
        raise InvalidDefinition("max_active_tasks", f"must be 1..{MAX_TASKS}")


def validate_task(spec: TaskSpec) -> None:
    """Check a task's kind and the fields that kind uses (and only those).

    Raises:
        InvalidDefinition: naming the field: ``kind``, ``command``, ``shell``, ``callable``,
            ``http``, ``http.url``, ``http.method``, ``http.headers``, ``http.body`` or
            ``http.success_codes``.
    """
    if spec.kind not in TaskKind:
        raise InvalidDefinition("kind", f"must be one of {', '.join(TaskKind)}")
    for kind, name in _KIND_FIELD.items():
        if kind is not spec.kind and getattr(spec, name) is not None:
            raise InvalidDefinition(name, f"only for kind {kind}, not {spec.kind}")
    if spec.isolation is not Isolation.PROCESS and spec.kind is not TaskKind.PYTHON:
        raise InvalidDefinition("isolation", f"only for kind python, not {spec.kind}")
    if spec.kind is TaskKind.EXEC:
        if not spec.command or not all(isinstance(a, str) for a in spec.command):
            raise InvalidDefinition("command", "must be a non-empty argv list of strings")
        if any("\x00" in a for a in spec.command):
            raise InvalidDefinition("command", "an argument contains a NUL byte")
        if len(spec.command) > MAX_ARGV_ITEMS:
            raise InvalidDefinition(
                "command", f"{len(spec.command)} arguments; at most {MAX_ARGV_ITEMS}"
            )
        size = sum(len(a.encode()) for a in spec.command)
        if size > MAX_COMMAND_BYTES:
            raise InvalidDefinition("command", f"argv is {size} bytes; at most {MAX_COMMAND_BYTES}")
        return
    if spec.command:
        raise InvalidDefinition("command", f"only for kind exec, not {spec.kind}")
    if spec.kind is TaskKind.SHELL:
        if not spec.shell or not spec.shell.strip():
            raise InvalidDefinition("shell", "must be a non-empty command string")
        if len(spec.shell.encode()) > MAX_COMMAND_BYTES:
            raise InvalidDefinition("shell", f"at most {MAX_COMMAND_BYTES} bytes")
    elif spec.kind is TaskKind.PYTHON:
        if spec.callable is not None and len(spec.callable) > MAX_CALLABLE_CHARS:
            raise InvalidDefinition("callable", f"at most {MAX_CALLABLE_CHARS} characters")
        if spec.callable is None or not _CALLABLE.fullmatch(spec.callable):
            raise InvalidDefinition("callable", "must be an importable 'module.path:function'")
    elif spec.http is None:
        raise InvalidDefinition("http", "required for kind http")
    else:
        _validate_http(spec.http)


def _validate_http(http: HttpTask) -> None:
    url = urlsplit(http.url)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise InvalidDefinition("http.url", "must be an absolute http:// or https:// URL")
    if http.method not in HTTP_METHODS:
        raise InvalidDefinition("http.method", f"must be one of {', '.join(sorted(HTTP_METHODS))}")
    if len(http.headers) > MAX_HTTP_HEADERS:
        raise InvalidDefinition(
            "http.headers", f"{len(http.headers)} headers; at most {MAX_HTTP_HEADERS}"
        )
    for header in http.headers:
        if not _HEADER_NAME.fullmatch(header.name) or any(c in header.value for c in "\r\n\0"):
            raise InvalidDefinition("http.headers", f"invalid header {header.name!r}")
    size = (
        len(http.url.encode())
        + len((http.body or "").encode())
        + sum(len(h.name.encode()) + len(h.value.encode()) for h in http.headers)
    )
    if size > MAX_COMMAND_BYTES:
        raise InvalidDefinition("http", f"request is {size} bytes; at most {MAX_COMMAND_BYTES}")
    if not all(100 <= code <= 599 for code in http.success_codes):
        raise InvalidDefinition("http.success_codes", "must be status codes 100..599")
    if len(http.success_codes) > MAX_SUCCESS_CODES:
        raise InvalidDefinition("http.success_codes", f"at most {MAX_SUCCESS_CODES} codes")
