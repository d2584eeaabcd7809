"""Validation of a job definition; errors name the offending field."""

from __future__ import annotations

import re
from datetime import timedelta
from urllib.parse import urlsplit

from cronlog.errors import InvalidDefinition
from cronlog.model import HttpTask, JobSpec, TaskKind
from cronlog.schedule import validate_schedule

MAX_COMMAND_BYTES = 64 * 1024
"""Upper bound of a command's argv, bytes (it travels in every TaskClaimed)."""
MAX_TASKS = 200
"""Upper bound of a job's tasks (the whole DAG lives in one table record)."""
MAX_ACTIVE_RUNS_LIMIT = 256
"""Upper bound of max_active_runs (active runs live in the job's table record)."""
MAX_JITTER = timedelta(days=1)
"""Upper bound of a job's jitter."""
MAX_TASK_NAME = 64
"""Upper bound of a task name's length (names are repeated in every active task instance)."""
MAX_ACTIVE_TASK_INSTANCES = 1000
"""Upper bound of max_active_runs x tasks: every active task instance lives in the job record
(~150 bytes each), which must fit one changelog message."""
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
"""Methods an http task may use."""
_CALLABLE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")
"""``module.path:function`` (the entry-point object reference syntax, without extras)."""
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
"""An RFC 9110 section 5.1 field name (token)."""
_KIND_FIELD = {TaskKind.SHELL: "shell", TaskKind.PYTHON: "callable", TaskKind.HTTP: "http"}


def validate_spec(spec: JobSpec) -> None:
    """Check a job definition.

    Raises:
        InvalidDefinition: naming the first offending field (``name``, ``command``,
            ``schedule.expression``, ``schedule.timezone``, ``timeout_s``, ...).
    """
    if not spec.name or len(spec.name) > 200:
        raise InvalidDefinition("name", "must be 1..200 characters")
    validate_task(spec)
    validate_schedule(spec.schedule)
    if spec.timeout <= timedelta(0):
        raise InvalidDefinition("timeout_s", "must be positive")
    if spec.lease_ttl < timedelta(seconds=1):
        raise InvalidDefinition("lease_ttl_s", "must be at least 1 second")
    policy = spec.retry_policy
    if policy.max_attempts < 1:
        raise InvalidDefinition("retry_policy.max_attempts", "must be at least 1")
    if policy.backoff < timedelta(0) or policy.max_backoff < timedelta(0):
        raise InvalidDefinition("retry_policy.base_s", "base_s and max_s must not be negative")
    if policy.backoff_coefficient < 1.0:
        raise InvalidDefinition("retry_policy.backoff_coefficient", "must be at least 1.0")
    if not 0.0 <= policy.jitter <= 1.0:
        raise InvalidDefinition("retry_policy.jitter", "must be a fraction in 0..1")
    if not policy.retry_on and policy.max_attempts > 1:
        raise InvalidDefinition("retry_policy.retry_on",
                                "is empty, so max_attempts > 1 could never be used")
    if len(policy.non_retryable_exit_codes) > 256 or any(
            not 1 <= c <= 255 for c in policy.non_retryable_exit_codes):
        raise InvalidDefinition("retry_policy.non_retryable_exit_codes",
                                "at most 256 exit codes, each 1..255")
    if spec.grace < timedelta(0):
        raise InvalidDefinition("grace_s", "must not be negative")
    if not spec.tasks or len(set(spec.tasks)) != len(spec.tasks):
        raise InvalidDefinition("tasks", "task names must be unique and non-empty")
    if len(spec.tasks) > MAX_TASKS:
        raise InvalidDefinition("tasks", f"{len(spec.tasks)} tasks; at most {MAX_TASKS}")
    if any(len(t) > MAX_TASK_NAME for t in spec.tasks):
        raise InvalidDefinition("tasks", f"task names are at most {MAX_TASK_NAME} characters")
    if not 1 <= spec.max_active_runs <= MAX_ACTIVE_RUNS_LIMIT:
        raise InvalidDefinition("max_active_runs", f"must be 1..{MAX_ACTIVE_RUNS_LIMIT}")
    if not timedelta(0) <= spec.jitter <= MAX_JITTER:
        raise InvalidDefinition("jitter_s", f"must be 0..{MAX_JITTER.total_seconds():g} s")
    if spec.max_active_runs * len(spec.tasks) > MAX_ACTIVE_TASK_INSTANCES:
        raise InvalidDefinition(
            "max_active_runs", f"max_active_runs x tasks = "
            f"{spec.max_active_runs * len(spec.tasks)}; at most {MAX_ACTIVE_TASK_INSTANCES}")


def validate_task(spec: JobSpec) -> None:
    """Check a job's task kind and the fields that kind uses (and only those).

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
    if spec.kind is TaskKind.EXEC:
        if not spec.command or not all(isinstance(a, str) for a in spec.command):
            raise InvalidDefinition("command", "must be a non-empty argv list of strings")
        if any("\x00" in a for a in spec.command):
            raise InvalidDefinition("command", "an argument contains a NUL byte")
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
    for header in http.headers:
        if not _HEADER_NAME.fullmatch(header.name) or any(c in header.value for c in "\r\n\0"):
            raise InvalidDefinition("http.headers", f"invalid header {header.name!r}")
    size = len(http.url.encode()) + len((http.body or "").encode()) + sum(
        len(h.name.encode()) + len(h.value.encode()) for h in http.headers)
    if size > MAX_COMMAND_BYTES:
        raise InvalidDefinition("http", f"request is {size} bytes; at most {MAX_COMMAND_BYTES}")
    if not all(100 <= code <= 599 for code in http.success_codes):
        raise InvalidDefinition("http.success_codes", "must be status codes 100..599")
