"""Exclusion windows of a schedule: which ticks are skipped (TickSkipped ``excluded``).

A window is read in the schedule's time zone; every constraint it sets (a local date range,
weekdays, a time-of-day range) must hold for a tick to be excluded. docs/schedules.md,
"Exclusions", states the rules. Pure: no clock.
"""

from __future__ import annotations

from datetime import date, datetime, time
from zoneinfo import ZoneInfo

from cronlog.errors import InvalidDefinition
from cronlog.limits import MAX_EXCLUSIONS, MAX_WEEKDAYS
from cronlog.model import Exclusion, Schedule

WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
"""Weekday names in ``Exclusion.weekdays``, Monday first (``datetime.weekday()`` order)."""


def _date(value: str, where: str) -> date:
    try:
        return date.fromisoformat(value)
    except ValueError as exc:
        raise InvalidDefinition(where, f"{value!r} is not a date YYYY-MM-DD") from exc


def _time(value: str, where: str) -> time:
    try:
        parsed = time.fromisoformat(value)
    except ValueError as exc:
        raise InvalidDefinition(where, f"{value!r} is not a time of day HH:MM[:SS]") from exc
    if parsed.tzinfo is not None:
        raise InvalidDefinition(where, "a time of day without a zone (the schedule's applies)")
    return parsed


def validate_exclusions(exclusions: tuple[Exclusion, ...]) -> None:
    """Check a schedule's exclusion windows.

    Raises:
        InvalidDefinition: naming ``schedule.exclusions[i].<field>``.
    """
    if len(exclusions) > MAX_EXCLUSIONS:
        raise InvalidDefinition("schedule.exclusions", f"at most {MAX_EXCLUSIONS} windows")
    for i, w in enumerate(exclusions):
        where = f"schedule.exclusions[{i}]"
        if not (w.start_date or w.end_date or w.weekdays or w.start_time or w.end_time):
            raise InvalidDefinition(where, "set a date range, weekdays or a time-of-day range")
        start = _date(w.start_date, f"{where}.start_date") if w.start_date else None
        end = _date(w.end_date, f"{where}.end_date") if w.end_date else None
        if start is not None and end is not None and end < start:
            raise InvalidDefinition(f"{where}.end_date", "must not be before start_date")
        if end is not None and start is None:
            raise InvalidDefinition(f"{where}.start_date", "required with end_date")
        if len(w.weekdays) > MAX_WEEKDAYS:
            raise InvalidDefinition(f"{where}.weekdays", f"at most {MAX_WEEKDAYS} weekdays")
        for day in w.weekdays:
            if day not in WEEKDAYS:
                raise InvalidDefinition(f"{where}.weekdays", f"{day!r} is not one of {WEEKDAYS}")
        if w.start_time:
            _time(w.start_time, f"{where}.start_time")
        if w.end_time:
            _time(w.end_time, f"{where}.end_time")


def _in_window(w: Exclusion, local: datetime) -> bool:
    day = local.date()
    if w.start_date is not None:
        start = date.fromisoformat(w.start_date)
        end = date.fromisoformat(w.end_date) if w.end_date else start
        if not start <= day <= end:
            return False
    if w.weekdays and WEEKDAYS[local.weekday()] not in w.weekdays:
        return False
    wall = local.time().replace(tzinfo=None, fold=0)
    lo = time.fromisoformat(w.start_time) if w.start_time else None
    hi = time.fromisoformat(w.end_time) if w.end_time else None
    if lo is not None and hi is not None and hi <= lo:  # wraps past midnight
        return wall >= lo or wall < hi
    return (lo is None or wall >= lo) and (hi is None or wall < hi)


def is_excluded(schedule: Schedule, tick: datetime) -> bool:
    """Return whether ``tick`` falls in one of the schedule's exclusion windows.

    Args:
        schedule: a validated schedule (its ``timezone`` is a known zone).
        tick: the tick, an aware instant.

    Returns:
        False when the schedule has no exclusions.

    Determinism: a pure function of its arguments.
    """
    if not schedule.exclusions:
        return False
    local = tick.astimezone(ZoneInfo(schedule.timezone))  # ZoneInfo caches its instances
    return any(_in_window(w, local) for w in schedule.exclusions)
