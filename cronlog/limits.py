"""The limits of every command field on the wire: the one table of cronlog's size bounds.

The codec (``topology/wire/avro_limits.py``) refuses a ``cronlog.Command`` with a field past its
limit as a DecodeError naming the field path, so the fold dead-letters it instead of copying it into
events its producer cannot send; the core's validation and the API reuse these numbers.
schemas/README.md, "Limits", documents them and shows that the worst cases add up.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import MappingProxyType

from cronlog.time import to_ms

MAX_COMMAND_RECORD_BYTES = 768 * 1024
"""Largest ``cronlog.Command`` record value, bytes (framing included). Every event the fold
emits for a command copies at most that command's content plus a few KiB of its own, so events
stay under the producers' ``message.max.bytes`` (1,000,000). The API cannot produce a larger
one: its definitions must fit the 512 KiB job record (``topology.fold.folder.MAX_RECORD_BYTES``)."""
MAX_IDEM_KEY_CHARS = 512
"""An idem_key, characters (the API's Idempotency-Key is at most 200, plus its suffixes; a
worker's claim key is at most ~250). Copied into every event the command causes."""
MAX_JOB_ID_CHARS = 128
"""A job_id, characters (the API's pattern: 1..128 URL-path-safe characters)."""
MAX_RUN_ID_CHARS = 128
"""A run_id, characters (cronlog's are ``r`` + 24 hex digits)."""
MAX_TASK_NAME = 64
"""A task name, characters (a DAG task's name is a path segment and an environment value)."""
MAX_WORKER_ID_CHARS = 128
"""A worker_id, characters (the default ``<host>-<pid>`` is at most 64 + 1 + 7)."""
MAX_EVENT_ID_CHARS = 128
"""An event_id a command refers to, characters (cronlog's are 32 hex digits)."""
MAX_NAME_CHARS = 200
"""A job's human name, characters."""
MAX_TASKS = 200
"""A job's tasks (the whole DAG lives in one table record); also a task's depends_on and the
task snapshots of a RerunTask."""
MAX_COMMAND_BYTES = 64 * 1024
"""An exec task's argv, a shell string, an http request (url + body + headers): UTF-8 bytes as
the core validates them; the codec counts characters, never more than the bytes."""
MAX_ARGV_ITEMS = 4096
"""Arguments of an exec task's argv."""
MAX_EXPRESSION_CHARS = 1024
"""A cron expression, characters (every minute and second listed one by one is ~530)."""
MAX_TIMEZONE_CHARS = 128
"""An IANA zone name, characters (the longest is under 40)."""
MAX_CALLABLE_CHARS = 1024
"""A python task's ``module.path:function``, characters."""
MAX_HTTP_METHOD_CHARS = 16
"""An http task's method, characters (the allowed methods are at most 7)."""
MAX_HTTP_HEADERS = 256
"""Request headers of an http task."""
MAX_SUCCESS_CODES = 500
"""Success status codes of an http task (there are 500 codes in 100..599)."""
MAX_EXCLUSIONS = 64
"""Exclusion windows of a schedule (they live in the job's table record)."""
MAX_DATE_TIME_CHARS = 32
"""A local date ``YYYY-MM-DD`` or time of day ``HH:MM[:SS]`` of an exclusion, characters."""
MAX_WEEKDAYS = 7
"""Weekdays of an exclusion."""
MAX_ENUM_ITEMS = 16
"""Items of an array of enum values (``retry_on``)."""
MAX_EXIT_CODES = 256
"""Non-retryable exit codes of a retry policy."""
MAX_BACKFILL_TICKS = 1000
"""Ticks of one BackfillJob (the API refuses larger ranges with 422)."""
MAX_BACKFILL_TASK_INSTANCES = 3500
"""Task instances one BackfillJob may start (its new runs x the job's tasks). A fresh task
instance takes at least ~160 bytes of the job record, so more than this never fits the fold's
512 KiB record (``tests/unit/test_backfill.py`` checks it against the codec): the fold refuses
more (``record_too_large``) before building them, which took ~13-22 s for 1000 ticks x 200
tasks; the API refuses such a range with 422."""
MAX_OUTPUT_TAIL_CHARS = 16 * 1024
"""A completion's output tail, characters (the worker sends the last 4 KiB)."""
MAX_REASON_CHARS = 1024
"""Free text a worker gives (ReleaseTask.reason), characters."""
MAX_LABEL_CHARS = 64
"""A string-coded enum value the core checks itself (TaskSnapshot.state, RerunTask.trigger)."""
MAX_LEASE_TOKEN_CHARS = 128
"""A worker's lease secret (``cronlog.leases.lease_digest``)."""
MAX_TENANT_CHARS = 63
"""A tenant name (``cronlog.tenants.TENANT_PATTERN``); the fold refuses a malformed one."""
MAX_TAGS = 16
"""A job's tags (``JobSpec.tags``; each at most ``MAX_TAG_CHARS``)."""
MAX_TAG_CHARS = 63
"""A job tag, characters (``cronlog.validation.TAG_PATTERN``)."""
MAX_CLAIM_NEXT = 256
"""Task instances a poll or a completion may take at once (``PollTasks.slots``,
``CompleteTask.claim_next``): a worker's free slots, at most its ``CRONLOG_SLOTS`` (256)."""
MAX_DURATION = timedelta(days=10 * 365)
"""Every duration of a command (``*_ms``): 0 up to this, inclusive (the API's 10 years)."""
MAX_DURATION_MS = MAX_DURATION // timedelta(milliseconds=1)
"""``MAX_DURATION`` in milliseconds (315,360,000,000)."""
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
"""Earliest instant of a command (epoch ms 0)."""
LATEST = datetime(9000, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC)
"""Latest instant of a command: with durations at most ``MAX_DURATION``, no sum of instants
and durations in the core can pass ``datetime.max``."""
EARLIEST_MS = to_ms(EARLIEST)
LATEST_MS = to_ms(LATEST)
INT32 = (-(2**31), 2**31 - 1)
"""The range of a 32-bit signed integer."""
COUNTER = (0, 2**31 - 1)
"""The range of attempt numbers and lease epochs."""


@dataclass(frozen=True, slots=True)
class Limit:
    """The bound of one wire field. Only the attributes that apply to the field's type are set.

    Attributes:
        chars: a string: at most this many characters; an array of strings: each item.
        token: a string: an identifier, of ``ID_CHARS`` only (what a job record stores of
            it then costs one byte a character; a worker_id or run_id of control characters
            would cost six in the record's JSON).
        empty: a token may be the empty string (``Command.job_id``: a Tick's or a poll's;
            ``UpstreamRunEnded.upstream_event_id`` and ``upstream_tenant`` of old records);
            other identifiers may not.
        items: an array: at most this many items.
        total_chars: an array of strings: at most this many characters in all items together.
        low, high: an integer (or each integer of an array): the inclusive range.
    """

    chars: int | None = None
    token: bool = False
    empty: bool = False
    items: int | None = None
    total_chars: int | None = None
    low: int | None = None
    high: int | None = None


ID_CHARS = "printable ASCII except space, '\"' and '\\'"
"""The characters of an identifier field (``Limit.token``): 0x21..0x7E but the double quote
and the backslash."""


def _text(chars: int) -> Limit:
    return Limit(chars=chars)


def _token(chars: int, *, empty: bool = False) -> Limit:
    return Limit(chars=chars, token=True, empty=empty)


def _range(bounds: tuple[int, int]) -> Limit:
    return Limit(low=bounds[0], high=bounds[1])


_IDS = _token(MAX_RUN_ID_CHARS)
_TASK = _token(MAX_TASK_NAME)
_WORKER = _token(MAX_WORKER_ID_CHARS)
_LEASE = {
    "attempt": _range(COUNTER),
    "epoch": _range(COUNTER),
    "worker_id": _WORKER,
    "lease_token": _text(MAX_LEASE_TOKEN_CHARS),
}
_SLOTS = {  # a job's ask or return of tenant slots
    "tenant": _token(MAX_TENANT_CHARS),
    "asker": _token(MAX_JOB_ID_CHARS),
    "count": _range(COUNTER),
}
_ARGV = Limit(items=MAX_ARGV_ITEMS, total_chars=MAX_COMMAND_BYTES)
_RUNNABLE = {
    "command": _ARGV,
    "shell": _text(MAX_COMMAND_BYTES),
    "callable": _text(MAX_CALLABLE_CHARS),
}


def _fields(record: str, **limits: Limit) -> dict[str, Limit]:
    return {f"{record}.{name}": limit for name, limit in limits.items()}


COMMAND_LIMITS: Mapping[str, Limit] = MappingProxyType(
    {
        **_fields(
            "Command",
            idem_key=_text(MAX_IDEM_KEY_CHARS),
            job_id=_token(MAX_JOB_ID_CHARS, empty=True),
            tenant=_token(MAX_TENANT_CHARS),
        ),
        **_fields("BackfillJob", ticks=Limit(items=MAX_BACKFILL_TICKS)),
        **_fields(
            "ClaimTask",
            run_id=_IDS,
            task=_TASK,
            attempt=_range(COUNTER),
            worker_id=_WORKER,
            lease_token=_text(MAX_LEASE_TOKEN_CHARS),
        ),
        **_fields("RenewLease", run_id=_IDS, task=_TASK, **_LEASE),
        **_fields(
            "CompleteTask",
            run_id=_IDS,
            task=_TASK,
            exit_code=_range(INT32),
            output_tail=_text(MAX_OUTPUT_TAIL_CHARS),
            claim_next=Limit(low=0, high=MAX_CLAIM_NEXT),
            **_LEASE,
        ),
        **_fields("ReleaseTask", run_id=_IDS, task=_TASK, reason=_text(MAX_REASON_CHARS), **_LEASE),
        **_fields("CancelRun", run_id=_IDS, task=_TASK),
        **_fields(
            "PollTasks",
            worker_id=_WORKER,
            slots=Limit(low=1, high=MAX_CLAIM_NEXT),
            poll_id=_token(MAX_EVENT_ID_CHARS),
            lease_token=_text(MAX_LEASE_TOKEN_CHARS),
        ),
        **_fields("ReplayTask", run_id=_IDS, task=_TASK),
        **_fields("AskSlots", **_SLOTS),
        **_fields("ReturnSlots", **_SLOTS),
        **_fields(
            "GrantSlots",
            tenant=_token(MAX_TENANT_CHARS),
            count=_range(COUNTER),
            refused=_range(COUNTER),
        ),
        **_fields(
            "SetTenantLimits",
            tenant=_token(MAX_TENANT_CHARS),
            weight=Limit(low=1, high=1000),
            max_running_tasks=_range(COUNTER),
        ),
        **_fields(
            "RerunTask",
            run_id=_IDS,
            task=_TASK,
            trigger=_text(MAX_LABEL_CHARS),
            tasks=Limit(items=MAX_TASKS),
        ),
        **_fields(
            "TaskSnapshot",
            task=_TASK,
            state=_text(MAX_LABEL_CHARS),
            attempt=_range(COUNTER),
            epoch=_range(COUNTER),
        ),
        **_fields(
            "UpstreamRunEnded",
            upstream_job_id=_token(MAX_JOB_ID_CHARS),
            upstream_run_id=_IDS,
            upstream_event_id=_token(MAX_EVENT_ID_CHARS, empty=True),
            upstream_tenant=_token(MAX_TENANT_CHARS, empty=True),
        ),
        **_fields(
            "JobSpec",
            name=_text(MAX_NAME_CHARS),
            tasks=Limit(items=MAX_TASKS, chars=MAX_TASK_NAME),
            max_active_runs=_range(INT32),
            task_specs=Limit(items=MAX_TASKS),
            max_active_tasks=_range(INT32),
            max_queued_runs=_range(INT32),
            max_lease_expiries=_range(INT32),
            tenant=_token(MAX_TENANT_CHARS),
            priority=Limit(low=-9, high=9),
            breaker_failures=Limit(low=0, high=100),
            tags=Limit(items=MAX_TAGS, chars=MAX_TAG_CHARS),
            **_RUNNABLE,
        ),
        **_fields(
            "TaskSpec",
            name=_TASK,
            depends_on=Limit(items=MAX_TASKS, chars=MAX_TASK_NAME),
            priority=Limit(low=-9, high=9),
            **_RUNNABLE,
        ),
        **_fields(
            "HttpTask",
            url=_text(MAX_COMMAND_BYTES),
            method=_text(MAX_HTTP_METHOD_CHARS),
            headers=Limit(items=MAX_HTTP_HEADERS),
            body=_text(MAX_COMMAND_BYTES),
            success_codes=Limit(items=MAX_SUCCESS_CODES, low=INT32[0], high=INT32[1]),
        ),
        **_fields("HttpHeader", name=_text(MAX_COMMAND_BYTES), value=_text(MAX_COMMAND_BYTES)),
        **_fields(
            "Schedule",
            expression=_text(MAX_EXPRESSION_CHARS),
            timezone=_text(MAX_TIMEZONE_CHARS),
            max_runs=Limit(low=-(2**62), high=2**62),
            exclusions=Limit(items=MAX_EXCLUSIONS),
            after_job_id=_token(MAX_JOB_ID_CHARS),
        ),
        **_fields(
            "Exclusion",
            start_date=_text(MAX_DATE_TIME_CHARS),
            end_date=_text(MAX_DATE_TIME_CHARS),
            weekdays=Limit(items=MAX_WEEKDAYS, chars=MAX_DATE_TIME_CHARS),
            start_time=_text(MAX_DATE_TIME_CHARS),
            end_time=_text(MAX_DATE_TIME_CHARS),
        ),
        **_fields(
            "RetryPolicy",
            max_attempts=_range(INT32),
            retry_on=Limit(items=MAX_ENUM_ITEMS),
            non_retryable_exit_codes=Limit(items=MAX_EXIT_CODES, low=INT32[0], high=INT32[1]),
        ),
    }
)
"""``"<Avro record>.<field>"`` → its limit, for every string, integer and array field of every
record a ``cronlog.Command`` holds. Every other field is bounded by its type: booleans; enums
(one of the listed values); doubles (finite); durations (``0..MAX_DURATION_MS``); instants
(``EARLIEST..LATEST``); nested records (their own fields). The codec refuses to start if a field
of a command record has neither (or if an entry names no field)."""
