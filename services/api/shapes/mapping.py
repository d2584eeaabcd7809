"""The API's JSON definition ↔ the core's JobSpec, both ways (``to_spec``, ``spec_to_json``),
and RFC 7396 merge-patch for PATCH. The shapes themselves are in ``definition.py``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from cronlog.errors import InvalidDefinition
from cronlog.job_level import JobLevelTask, job_level
from cronlog.model import (
    AfterOn,
    BackoffKind,
    CatchupPolicy,
    DstGapPolicy,
    DstOverlapPolicy,
    Exclusion,
    HttpHeader,
    HttpTask,
    JobSpec,
    OverlapPolicy,
    RetryPolicy,
    Schedule,
    ScheduleKind,
    TaskKind,
    TaskSpec,
    TriggerRule,
    main_task,
)
from cronlog.model import (
    Isolation as ModelIsolation,
)
from cronlog.time import iso
from cronlog.vocabulary import FailureKind
from services.api.shapes.definition import (
    ExclusionIn,
    HttpTaskIn,
    JobDefinition,
    RetryPolicyIn,
    TaskIn,
)

_ONE_TASK_FIELDS = ("command", "shell", "callable", "http")
"""The job-level fields of the one-task form, beside ``kind`` and ``isolation``."""


def to_spec(body: JobDefinition) -> JobSpec:
    """Return the core JobSpec of an API definition (not yet validated by the core).

    Args:
        body: a definition that passed pydantic's checks.

    Returns:
        A JobSpec whose ``task_specs`` are ``body.tasks``, or, without tasks, one task
        ``main`` running the job-level ``command`` / ``kind`` / ``shell`` / ``callable`` /
        ``http`` (``isolation``); instants in UTC, durations as timedelta.

    Raises:
        InvalidDefinition: ``body`` has tasks and sets a job-level field of the one-task
            form (``command``, ``kind``, ...): what runs is defined per task.
    """
    if body.tasks:
        for name in _ONE_TASK_FIELDS:
            if getattr(body, name):
                raise InvalidDefinition(
                    name,
                    "a job with tasks defines what runs per task; leave the job-level field unset",
                )
        if body.kind != "exec":
            raise InvalidDefinition("kind", "a job with tasks sets kind per task")
        tasks = tuple(_task_spec(t) for t in body.tasks)
    else:
        tasks = main_task(
            tuple(body.command),
            kind=TaskKind(body.kind),
            shell=body.shell,
            callable=body.callable,
            http=_http(body.http),
            isolation=ModelIsolation(body.isolation),
        )
    s = body.schedule
    return JobSpec(
        name=body.name,
        schedule=Schedule(
            kind=ScheduleKind(s.type),
            expression=s.expression,
            timezone=s.timezone,
            run_at=s.run_at.astimezone(UTC) if s.run_at is not None else None,
            catchup=CatchupPolicy(s.catchup),
            catchup_window=timedelta(seconds=s.catchup_window_s),
            dst_gap=DstGapPolicy(s.dst_gap),
            dst_overlap=DstOverlapPolicy(s.dst_overlap),
            interval=timedelta(seconds=s.interval_s) if s.interval_s is not None else None,
            anchor_at=_utc(s.anchor_at),
            start_at=_utc(s.start_at),
            end_at=_utc(s.end_at),
            max_runs=s.max_runs,
            exclusions=tuple(_exclusion(x) for x in s.exclusions),
            misfire_grace=timedelta(seconds=s.misfire_grace_s),
            # only an after schedule keeps them, so a PATCH to another type drops them
            after_job_id=s.job_id if s.type == "after" else None,
            after_on=AfterOn(s.on) if s.type == "after" else AfterOn.SUCCESS,
        ),
        task_specs=tasks,
        timeout=timedelta(seconds=body.timeout_s),
        retry_policy=_retry_policy(body.retry_policy),
        grace=timedelta(seconds=body.grace_s),
        lease_ttl=timedelta(seconds=body.lease_ttl_s),
        max_active_runs=body.max_active_runs,
        overlap=OverlapPolicy(body.overlap),
        jitter=timedelta(seconds=body.jitter_s),
        max_active_tasks=body.max_active_tasks,
        run_timeout=(
            timedelta(seconds=body.run_timeout_s) if body.run_timeout_s is not None else None
        ),
        max_queued_runs=body.max_queued_runs,
        max_lease_expiries=body.max_lease_expiries,
        priority=body.priority,
        priority_aging=timedelta(seconds=body.priority_aging_s),
        breaker_failures=body.breaker_failures,
        breaker_window=timedelta(seconds=body.breaker_window_s),
        breaker_cooldown=timedelta(seconds=body.breaker_cooldown_s),
        tags=tuple(body.tags),
    )


def definition_field(body: JobDefinition, field: str) -> str:
    """Return the field of ``body`` that a core validation error names.

    The core names a task's fields ``tasks[i].<field>``; in the one-task form (no ``tasks``)
    its only task's fields are the job-level ones, named without the prefix (``command``).
    """
    prefix = "tasks[0]."
    return field.removeprefix(prefix) if not body.tasks else field


def _retry_policy(r: RetryPolicyIn) -> RetryPolicy:
    return RetryPolicy(
        max_attempts=r.max_attempts,
        backoff=timedelta(seconds=r.base_s),
        backoff_coefficient=r.backoff_coefficient,
        max_backoff=timedelta(seconds=r.max_s),
        kind=BackoffKind(r.backoff),
        jitter=r.jitter,
        retry_on=tuple(FailureKind(k) for k in dict.fromkeys(r.retry_on)),
        non_retryable_exit_codes=tuple(sorted(set(r.non_retryable_exit_codes))),
    )


def _retry_json(r: RetryPolicy) -> dict[str, Any]:
    return {
        "max_attempts": r.max_attempts,
        "backoff": r.kind.value,
        "base_s": _secs(r.backoff),
        "backoff_coefficient": r.backoff_coefficient,
        "max_s": _secs(r.max_backoff),
        "jitter": r.jitter,
        "retry_on": [k.value for k in r.retry_on],
        "non_retryable_exit_codes": list(r.non_retryable_exit_codes),
    }


def _task_spec(t: TaskIn) -> TaskSpec:
    return TaskSpec(
        name=t.name,
        command=tuple(t.command),
        kind=TaskKind(t.kind),
        shell=t.shell,
        callable=t.callable,
        http=_http(t.http),
        depends_on=tuple(t.depends_on),
        trigger_rule=TriggerRule(t.trigger_rule),
        retry_policy=_retry_policy(t.retry_policy) if t.retry_policy is not None else None,
        timeout=timedelta(seconds=t.timeout_s) if t.timeout_s is not None else None,
        lease_ttl=timedelta(seconds=t.lease_ttl_s) if t.lease_ttl_s is not None else None,
        isolation=ModelIsolation(t.isolation),
        priority=t.priority,
    )


def _task_json(t: TaskSpec) -> dict[str, Any]:
    return {
        "name": t.name,
        "command": list(t.command),
        "kind": t.kind.value,
        "shell": t.shell,
        "callable": t.callable,
        "http": _http_json(t.http),
        "depends_on": list(t.depends_on),
        "trigger_rule": t.trigger_rule.value,
        "retry_policy": _retry_json(t.retry_policy) if t.retry_policy is not None else None,
        "timeout_s": _secs(t.timeout) if t.timeout is not None else None,
        "lease_ttl_s": _secs(t.lease_ttl) if t.lease_ttl is not None else None,
        "isolation": t.isolation.value,
        "priority": t.priority,
    }


def _http(h: HttpTaskIn | None) -> HttpTask | None:
    if h is None:
        return None
    return HttpTask(
        url=h.url,
        method=h.method,
        headers=tuple(HttpHeader(k, v) for k, v in h.headers.items()),
        body=h.body,
        success_codes=tuple(h.success_codes),
    )


def _http_json(h: HttpTask | None) -> dict[str, Any] | None:
    if h is None:
        return None
    return {
        "url": h.url,
        "method": h.method,
        "headers": {x.name: x.value for x in h.headers},
        "body": h.body,
        "success_codes": list(h.success_codes),
    }


def _utc(instant: datetime | None) -> datetime | None:
    return instant.astimezone(UTC) if instant is not None else None


def _exclusion(x: ExclusionIn) -> Exclusion:
    return Exclusion(
        start_date=x.start_date.isoformat() if x.start_date else None,
        end_date=x.end_date.isoformat() if x.end_date else None,
        weekdays=tuple(x.weekdays),
        start_time=x.start_time.isoformat() if x.start_time else None,
        end_time=x.end_time.isoformat() if x.end_time else None,
    )


def _exclusion_json(x: Exclusion) -> dict[str, Any]:
    return {
        "start_date": x.start_date,
        "end_date": x.end_date,
        "weekdays": list(x.weekdays),
        "start_time": x.start_time,
        "end_time": x.end_time,
    }


def _secs(duration: timedelta) -> int | float:
    seconds = duration.total_seconds()
    return int(seconds) if seconds.is_integer() else seconds


def _iso(instant: datetime | None) -> str | None:
    return iso(instant) if instant is not None else None


def spec_to_json(spec: JobSpec) -> dict[str, Any]:
    """Return the API's JSON shape of a core JobSpec (the inverse of ``to_spec``).

    A job of one task ``main`` with no settings of its own (``cronlog.job_level.job_level``)
    is shown in the one-task form (job-level ``command``, ``kind``, ..., no ``tasks``); any
    other lists its ``tasks``, the job-level fields at their defaults.

    Returns:
        A dict that ``JobDefinition.model_validate`` accepts; seconds as numbers, instants as
        ISO-8601 UTC strings with ``Z``.
    """
    s = spec.schedule
    one = job_level(spec)  # shown in the one-task form, as it was defined (or registered)
    task = one or JobLevelTask()
    return {
        "name": spec.name,
        "schedule": {
            "type": s.kind.value,
            "expression": s.expression,
            "timezone": s.timezone,
            "run_at": _iso(s.run_at),
            "catchup": s.catchup.value,
            "catchup_window_s": _secs(s.catchup_window),
            "dst_gap": s.dst_gap.value,
            "dst_overlap": s.dst_overlap.value,
            "interval_s": _secs(s.interval) if s.interval is not None else None,
            "anchor_at": _iso(s.anchor_at),
            "start_at": _iso(s.start_at),
            "end_at": _iso(s.end_at),
            "max_runs": s.max_runs,
            "exclusions": [_exclusion_json(x) for x in s.exclusions],
            "misfire_grace_s": _secs(s.misfire_grace),
            # an after schedule's own fields, shown only on it
            **(
                {"job_id": s.after_job_id, "on": s.after_on.value}
                if s.kind is ScheduleKind.AFTER
                else {}
            ),
        },
        "command": list(task.command),
        "timeout_s": _secs(spec.timeout),
        "lease_ttl_s": _secs(spec.lease_ttl),
        "retry_policy": _retry_json(spec.retry_policy),
        "grace_s": _secs(spec.grace),
        "max_active_runs": spec.max_active_runs,
        "overlap": spec.overlap.value,
        "jitter_s": _secs(spec.jitter),
        "kind": task.kind.value,
        "shell": task.shell,
        "callable": task.callable,
        "http": _http_json(task.http),
        "tasks": [] if one is not None else [_task_json(t) for t in spec.task_specs],
        "max_active_tasks": spec.max_active_tasks,
        "run_timeout_s": _secs(spec.run_timeout) if spec.run_timeout is not None else None,
        "max_queued_runs": spec.max_queued_runs,
        "max_lease_expiries": spec.max_lease_expiries,
        "isolation": task.isolation.value,
        "priority": spec.priority,
        "priority_aging_s": _secs(spec.priority_aging),
        "breaker_failures": spec.breaker_failures,
        "breaker_window_s": _secs(spec.breaker_window),
        "breaker_cooldown_s": _secs(spec.breaker_cooldown),
        "tags": list(spec.tags),
    }


def merge_patch(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Return ``target`` merged with ``patch`` per RFC 7396 (JSON Merge Patch).

    Nested objects merge key by key; a ``None`` in ``patch`` removes the key (so the field
    falls back to its default); any other value replaces. Neither argument is modified.
    """
    merged = dict(target)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge_patch(merged[key], value)
        else:
            merged[key] = value
    return merged
