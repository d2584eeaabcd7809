"""Schedule maths: validation and next tick(s) of a schedule, in its time zone, as UTC instants.

croniter is the cron engine. 6-field expressions carry seconds first (croniter's
``second_at_beginning``). Time is always an argument; nothing here reads a clock.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterator
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from croniter.croniter import CroniterError

from cronlog.errors import InvalidDefinition
from cronlog.model import Schedule, ScheduleKind
from cronlog.time import utc

_FIELD_NAMES_5 = ("minute", "hour", "day_of_month", "month", "day_of_week")
_FIELD_NAMES_6 = ("second", *_FIELD_NAMES_5)
MAX_BACKWARD_STEPS = 10_000_000
"""Bound on croniter answers examined per iteration (a guard against a non-advancing engine)."""


def zone(name: str) -> ZoneInfo:
    """Return the IANA zone ``name``.

    Raises:
        InvalidDefinition: field ``schedule.timezone`` when the zone is unknown.
    """
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError) as exc:
        raise InvalidDefinition("schedule.timezone", f"unknown IANA time zone {name!r}") from exc


def _is_valid(expression: str, six: bool) -> bool:
    try:
        croniter(expression, second_at_beginning=six)
    except (CroniterError, ValueError, KeyError, IndexError):
        return False
    return True


def validate_cron(expression: str) -> None:
    """Check a 5- or 6-field cron expression (or an ``@`` macro).

    Raises:
        InvalidDefinition: field ``schedule.expression``; the reason names the offending cron
            field (``minute``, ``hour``, …) when one can be singled out.
    """
    fields = expression.split()
    if not expression.startswith("@") and len(fields) not in (5, 6):
        raise InvalidDefinition(
            "schedule.expression",
            f"{expression!r} has {len(fields)} fields; expected 5, or 6 with seconds first",
        )
    six = len(fields) == 6
    if _is_valid(expression, six):
        return
    names = _FIELD_NAMES_6 if six else _FIELD_NAMES_5
    for i, name in enumerate(names):
        probe = ["*"] * len(fields)
        probe[i] = fields[i]
        if not _is_valid(" ".join(probe), six):
            raise InvalidDefinition(
                "schedule.expression", f"cron field {name} {fields[i]!r} is not valid"
            )
    raise InvalidDefinition("schedule.expression", f"{expression!r} is not a valid cron expression")


def validate_schedule(schedule: Schedule) -> None:
    """Check a schedule as a whole.

    Raises:
        InvalidDefinition: naming the offending field.
    """
    zone(schedule.timezone)
    if schedule.kind is ScheduleKind.CRON:
        if not schedule.expression:
            raise InvalidDefinition("schedule.expression", "required for a cron schedule")
        validate_cron(schedule.expression)
    elif schedule.kind is ScheduleKind.ONCE and schedule.run_at is None:
        raise InvalidDefinition("schedule.run_at", "required for a once schedule")
    if schedule.catchup_window < timedelta(0):
        raise InvalidDefinition("schedule.catchup_window_s", "must not be negative")


def cron_ticks(expression: str, tz: str, after: datetime) -> Iterator[datetime]:
    """Yield the ticks of a cron expression strictly after ``after``, in order.

    Args:
        expression: 5 fields, or 6 with seconds first; assumed valid.
        tz: IANA zone the expression's wall times are read in.
        after: an aware instant.

    Returns:
        An endless iterator of aware UTC datetimes (stops only if croniter finds no match
        within 50 years).
    """
    it = copy.copy(_parsed(expression))
    it.set_current(utc(after).astimezone(zone(tz)), force=True)
    last = utc(after)
    for _ in range(MAX_BACKWARD_STEPS):
        try:
            nxt = utc(it.get_next(datetime))
        except CroniterError:
            return
        if nxt <= last:
            # croniter can step back inside a DST fall-back hour; ticks must only move forward.
            continue
        last = nxt
        yield nxt


@functools.lru_cache(maxsize=8192)
def _parsed(expression: str) -> croniter:
    """Return a croniter with ``expression`` expanded once (the expansion dominates the cost).

    Callers copy it before moving it: the expanded fields are shared read-only.
    """
    six = len(expression.split()) == 6
    return croniter(expression, 0, second_at_beginning=six, max_years_between_matches=50)


def next_tick(schedule: Schedule, after: datetime) -> datetime | None:
    """Return the first tick of ``schedule`` strictly after ``after``, or None if none.

    Args:
        schedule: a validated schedule.
        after: an aware instant (exclusive lower bound).

    Returns:
        An aware UTC datetime, or None (manual job, or a once job whose run_at is not after
        ``after``).
    """
    if schedule.kind is ScheduleKind.CRON and schedule.expression is not None:
        return next(cron_ticks(schedule.expression, schedule.timezone, after), None)
    if schedule.kind is ScheduleKind.ONCE and schedule.run_at is not None:
        return schedule.run_at if schedule.run_at > after else None
    return None
