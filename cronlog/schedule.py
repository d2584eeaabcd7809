"""Schedule maths: validation and the ticks of a schedule, in its time zone, as UTC instants.

The dialect is cronlog.cron (croniter expands the fields), wall-time matching is
cronlog.cronmatch, and the DST rules are cronlog.dst; docs/schedules.md states the semantics.
Time is always an argument; nothing here reads a clock.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronlog import cron
from cronlog.cronmatch import ever_matches
from cronlog.dst import Policy, next_after, prev_before
from cronlog.errors import InvalidDefinition
from cronlog.exclusions import validate_exclusions
from cronlog.limits import MAX_JOB_ID_CHARS
from cronlog.model import DstGapPolicy, DstOverlapPolicy, Schedule, ScheduleKind
from cronlog.time import EPOCH, from_ms, to_ms, utc

MIN_INTERVAL = timedelta(seconds=1)
"""Shortest ``every`` interval (the ticker's default resolution)."""
MIN_MISFIRE_GRACE = timedelta(seconds=1)
"""Shortest ``misfire_grace``: below the ticker's interval every tick would count as missed."""
JOB_ID = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_JOB_ID_CHARS - 1}}}")
"""A job_id as the API accepts it: URL-path safe, 1..``MAX_JOB_ID_CHARS`` characters."""


@functools.lru_cache(maxsize=1024)
def zone(name: str) -> ZoneInfo:
    """Return the IANA zone ``name``.

    Raises:
        InvalidDefinition: field ``schedule.timezone`` when the zone is unknown.
    """
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError) as exc:
        raise InvalidDefinition("schedule.timezone", f"unknown IANA time zone {name!r}") from exc


def validate_cron(expression: str, *, hash_id: str | None = None) -> None:
    """Check a 5- or 6-field cron expression (or an ``@`` macro).

    Args:
        expression: the expression as written (docs/schedules.md, "The dialect").
        hash_id: what Jenkins ``H`` hashes (the job_id); None hashes a fixed seed.

    Raises:
        InvalidDefinition: field ``schedule.expression``; the reason names the offending cron
            field (``minute``, ``hour``, ...) and says why, or the field count, or that the
            expression can never fire.
    """
    spec = cron.parse(expression, hash_id)
    if not ever_matches(spec):
        raise InvalidDefinition(
            "schedule.expression",
            f"cron field day_of_month {expression.split()[-3]!r} is not valid: no day ever "
            "matches it together with the month and day_of_week fields",
        )


def validate_schedule(
    schedule: Schedule, *, hash_id: str | None = None, job_id: str | None = None
) -> None:
    """Check a schedule as a whole.

    Args:
        schedule: the schedule to check.
        hash_id: what Jenkins ``H`` hashes (the job_id); None hashes a fixed seed.
        job_id: the job it belongs to, when known (an ``after`` schedule must not name it).

    Raises:
        InvalidDefinition: naming the offending field.
    """
    zone(schedule.timezone)
    if schedule.kind is ScheduleKind.CRON:
        if not schedule.expression:
            raise InvalidDefinition("schedule.expression", "required for a cron schedule")
        validate_cron(schedule.expression, hash_id=hash_id)
    elif schedule.kind is ScheduleKind.ONCE and schedule.run_at is None:
        raise InvalidDefinition("schedule.run_at", "required for a once schedule")
    elif schedule.kind is ScheduleKind.EVERY and (
        schedule.interval is None or schedule.interval < MIN_INTERVAL
    ):
        raise InvalidDefinition(
            "schedule.interval_s",
            f"an every schedule needs an interval of at least {MIN_INTERVAL.total_seconds():g} s",
        )
    elif schedule.kind is ScheduleKind.AFTER:
        validate_after(schedule, job_id=job_id)
    if schedule.catchup_window < timedelta(0):
        raise InvalidDefinition("schedule.catchup_window_s", "must not be negative")
    _validate_bounds(schedule)
    validate_exclusions(schedule.exclusions)


def validate_after(schedule: Schedule, *, job_id: str | None = None) -> None:
    """Check an ``after`` schedule: an upstream job_id, not the job itself, no tick bounds.

    ``start_at``, ``end_at`` and exclusions bound ticks, and an after schedule has none, so
    they are refused rather than silently ignored (``max_runs`` does apply).

    Args:
        schedule: a schedule of kind ``after``.
        job_id: the job the schedule belongs to, when known (the fold and the API know it).

    Raises:
        InvalidDefinition: field ``schedule.job_id``, ``schedule.start_at``,
            ``schedule.end_at`` or ``schedule.exclusions``.
    """
    upstream = schedule.after_job_id
    if not upstream or not JOB_ID.fullmatch(upstream):
        raise InvalidDefinition(
            "schedule.job_id",
            "an after schedule needs the upstream "
            "job_id: letters, digits, '.', '_', '-'; 1..128 characters",
        )
    if job_id is not None and upstream == job_id:
        raise InvalidDefinition("schedule.job_id", "a job cannot run after itself")
    for name in ("start_at", "end_at"):
        if getattr(schedule, name) is not None:
            raise InvalidDefinition(f"schedule.{name}", "not used by an after schedule")
    if schedule.exclusions:
        raise InvalidDefinition("schedule.exclusions", "not used by an after schedule")


def _validate_bounds(schedule: Schedule) -> None:
    start, end = schedule.start_at, schedule.end_at
    if start is not None and end is not None and end < start:
        raise InvalidDefinition("schedule.end_at", "must not be before start_at")
    if (
        schedule.kind is ScheduleKind.ONCE
        and schedule.run_at is not None
        and (
            (start is not None and schedule.run_at < start)
            or (end is not None and schedule.run_at > end)
        )
    ):
        raise InvalidDefinition("schedule.run_at", "lies outside start_at .. end_at")
    if schedule.max_runs is not None and schedule.max_runs < 1:
        raise InvalidDefinition("schedule.max_runs", "must be at least 1")
    if schedule.misfire_grace < MIN_MISFIRE_GRACE:
        raise InvalidDefinition(
            "schedule.misfire_grace_s", f"must be at least {MIN_MISFIRE_GRACE.total_seconds():g} s"
        )


def _seconds(instant: datetime) -> tuple[int, int]:
    """Whole epoch seconds of an aware instant (floored), and the microseconds left over."""
    if instant.tzinfo is None:
        utc(instant)  # raises the ValueError every naive instant gets
    elapsed = instant - EPOCH
    return elapsed.days * 86_400 + elapsed.seconds, elapsed.microseconds


def _instant(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def cron_ticks(
    expression: str,
    tz: str,
    after: datetime,
    *,
    hash_id: str | None = None,
    dst_gap: DstGapPolicy = DstGapPolicy.SHIFT,
    dst_overlap: DstOverlapPolicy = DstOverlapPolicy.FIRST,
) -> Iterator[datetime]:
    """Yield the ticks of a cron expression strictly after ``after``, in order.

    Args:
        expression: 5 fields, 6 with seconds first, or an ``@`` macro.
        tz: IANA zone the expression's wall times are read in.
        after: an aware instant (any zone).
        hash_id: what Jenkins ``H`` hashes (the job_id); None hashes a fixed seed.
        dst_gap: fixed-time ticks inside a spring-forward gap (docs/schedules.md).
        dst_overlap: fixed-time ticks whose wall time occurs twice (docs/schedules.md).

    Returns:
        An endless iterator of aware UTC datetimes, strictly increasing; it ends only if no
        tick exists within a century.

    Raises:
        ValueError: ``after`` is naive.
        InvalidDefinition: the expression or the zone is invalid.

    Determinism: a pure function of its arguments.
    """
    spec = cron.parse(expression, hash_id)
    zone(tz)
    policy = Policy(spec.fixed_time, dst_gap, dst_overlap)
    tick: int | None = _seconds(after)[0]
    while tick is not None and (tick := next_after(spec, tz, tick, policy)) is not None:
        yield _instant(tick)


def prev_ticks(
    expression: str,
    tz: str,
    before: datetime,
    count: int | None = None,
    *,
    hash_id: str | None = None,
    dst_gap: DstGapPolicy = DstGapPolicy.SHIFT,
    dst_overlap: DstOverlapPolicy = DstOverlapPolicy.FIRST,
) -> Iterator[datetime]:
    """Yield the ticks strictly before ``before``, latest first (what catch-up looks back at).

    Args:
        expression: 5 fields, 6 with seconds first, or an ``@`` macro.
        tz: IANA zone the expression's wall times are read in.
        before: an aware instant (any zone), exclusive.
        count: at most this many ticks; None for all (down to a century without one).
        hash_id: what Jenkins ``H`` hashes (the job_id); None hashes a fixed seed.
        dst_gap: fixed-time ticks inside a spring-forward gap (docs/schedules.md).
        dst_overlap: fixed-time ticks whose wall time occurs twice (docs/schedules.md).

    Returns:
        Aware UTC datetimes, strictly decreasing: exactly the ticks ``cron_ticks`` yields
        after any earlier instant, in reverse.

    Raises:
        ValueError: ``before`` is naive.
        InvalidDefinition: the expression or the zone is invalid.

    Determinism: a pure function of its arguments.
    """
    spec = cron.parse(expression, hash_id)
    zone(tz)
    policy = Policy(spec.fixed_time, dst_gap, dst_overlap)
    seconds, micro = _seconds(before)
    tick: int | None = seconds + (1 if micro else 0)
    left = count
    while (left is None or left > 0) and tick is not None:
        tick = prev_before(spec, tz, tick, policy)
        if tick is not None:
            left = None if left is None else left - 1
            yield _instant(tick)


def next_tick(
    schedule: Schedule, after: datetime, *, hash_id: str | None = None
) -> datetime | None:
    """Return the first tick of ``schedule`` strictly after ``after``, or None if none.

    Args:
        schedule: a validated schedule.
        after: an aware instant (exclusive lower bound).
        hash_id: what Jenkins ``H`` hashes (the job_id); None hashes a fixed seed.

    Returns:
        An aware UTC datetime, or None (manual job, or a once job whose run_at is not after
        ``after``).

    Determinism: a pure function of its arguments; the parsed expression is cached.
    """
    if schedule.kind is ScheduleKind.CRON and schedule.expression is not None:
        spec = cron.parse(schedule.expression, hash_id)
        zone(schedule.timezone)
        policy = Policy(spec.fixed_time, schedule.dst_gap, schedule.dst_overlap)
        tick = next_after(spec, schedule.timezone, _seconds(after)[0], policy)
        return None if tick is None else _instant(tick)
    if schedule.kind is ScheduleKind.ONCE and schedule.run_at is not None:
        return schedule.run_at if schedule.run_at > after else None
    if schedule.kind is ScheduleKind.EVERY and schedule.interval is not None:
        return every_tick(schedule.interval, schedule.anchor_at, after)
    return None


def every_tick(interval: timedelta, anchor_at: datetime | None, after: datetime) -> datetime:
    """Return the first tick ``anchor_at + k * interval`` (k any integer) strictly after ``after``.

    Temporal's IntervalSpec ("every ``interval``, offset by ``phase`` from the epoch"): the
    anchor fixes the phase only, ticks before it exist too (bound them with ``start_at``).

    Args:
        interval: the period, positive, whole milliseconds count.
        anchor_at: the phase; None is the Unix epoch (ticks on interval boundaries).
        after: an aware instant (exclusive).

    Determinism: integer arithmetic on epoch milliseconds.
    """
    step = max(1, interval // timedelta(milliseconds=1))
    anchor = to_ms(anchor_at) if anchor_at is not None else 0
    k = (to_ms(after) - anchor) // step + 1
    return from_ms(anchor + k * step)
