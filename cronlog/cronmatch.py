"""Wall-clock matching of a parsed cron expression: the next or previous matching wall time.

A wall time here is a whole number of seconds since 0001-01-01T00:00 on the proleptic
Gregorian calendar, with no zone (plain ints keep the fold's hot path cheap); which wall times
exist in a time zone, and when, is cronlog.dst's business.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from datetime import date, timedelta

from cronlog.cron import CronSpec

DAY = 86_400
"""Seconds per calendar day (wall time has no leap seconds, as POSIX time has none)."""
_ONE_DAY = timedelta(days=1)
_MONTH_DAYS = (0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_YEARS_OF_DAYS_CYCLE = 400
"""The Gregorian calendar (weekdays included) repeats every 400 years."""


def month_length(year: int, month: int) -> int:
    """Return the number of days of ``month`` in ``year``."""
    if month == 2 and year % 4 == 0 and (year % 100 != 0 or year % 400 == 0):
        return 29
    return _MONTH_DAYS[month]


def _weekday_near(year: int, month: int, day: int, length: int) -> int | None:
    """Quartz ``dayW``: the Monday-Friday nearest ``day``, never leaving the month."""
    if day > length:
        return None
    weekday = date(year, month, day).weekday()
    if weekday == 5:  # Saturday: the Friday before, or Monday the 3rd if that leaves the month
        return day - 1 if day > 1 else day + 2
    if weekday == 6:  # Sunday: the Monday after, or the Friday before at the month's end
        return day + 1 if day < length else day - 2
    return day


def day_matches(spec: CronSpec, day: date) -> bool:
    """Whether ``day`` is a matching day (month, day of month, day of week)."""
    if day.month not in spec.months:
        return False
    if spec.every_day:
        return True
    length = month_length(day.year, day.month)
    dom = (
        day.day in spec.days
        or (spec.last_day and day.day == length)
        or (spec.last_weekday and day.day == _weekday_near(day.year, day.month, length, length))
        or any(
            _weekday_near(day.year, day.month, n, length) == day.day for n in spec.nearest_weekdays
        )
    )
    if dom and not spec.day_and:
        return True
    if not dom and spec.day_and:
        return False
    weekday = day.weekday()
    return (
        weekday in spec.weekdays
        or (weekday, (day.day - 1) // 7 + 1) in spec.nth_weekdays
        or (weekday in spec.last_weekdays and day.day + 7 > length)
    )


def _next_day(spec: CronSpec, day: date, last: date) -> date | None:
    """First matching day in [day, last], or None."""
    while day <= last:
        if day.month not in spec.months:
            day = date(day.year + 1, 1, 1) if day.month == 12 else date(day.year, day.month + 1, 1)
            continue
        if day_matches(spec, day):
            return day
        day += _ONE_DAY
    return None


def _prev_day(spec: CronSpec, day: date, first: date) -> date | None:
    """Last matching day in [first, day], or None."""
    while day >= first:
        if day.month not in spec.months:
            day = date(day.year, day.month, 1) - _ONE_DAY
            continue
        if day_matches(spec, day):
            return day
        day -= _ONE_DAY
    return None


def _next_time(spec: CronSpec, hour: int, minute: int, second: int) -> tuple[int, int, int] | None:
    """Earliest matching time of day at or after hour:minute:second, or None."""
    hours, minutes, seconds = spec.hours, spec.minutes, spec.seconds
    i = bisect_left(hours, hour)
    if i < len(hours) and hours[i] == hour:
        j = bisect_left(minutes, minute)
        if j < len(minutes) and minutes[j] == minute:
            k = bisect_left(seconds, second)
            if k < len(seconds):
                return hour, minute, seconds[k]
            j += 1
        if j < len(minutes):
            return hour, minutes[j], seconds[0]
        i += 1
    if i < len(hours):
        return hours[i], minutes[0], seconds[0]
    return None


def _prev_time(spec: CronSpec, hour: int, minute: int, second: int) -> tuple[int, int, int] | None:
    """Latest matching time of day at or before hour:minute:second, or None."""
    hours, minutes, seconds = spec.hours, spec.minutes, spec.seconds
    i = bisect_right(hours, hour) - 1
    if i >= 0 and hours[i] == hour:
        j = bisect_right(minutes, minute) - 1
        if j >= 0 and minutes[j] == minute:
            k = bisect_right(seconds, second) - 1
            if k >= 0:
                return hour, minute, seconds[k]
            j -= 1
        if j >= 0:
            return hour, minutes[j], seconds[-1]
        i -= 1
    if i >= 0:
        return hours[i], minutes[-1], seconds[-1]
    return None


def next_match(spec: CronSpec, first: int, last: int) -> int | None:
    """Return the earliest matching wall time in [first, last] (wall seconds), or None."""
    first_day, clock = divmod(first, DAY)
    found = _next_day(spec, date.fromordinal(first_day), date.fromordinal(last // DAY))
    while found is not None:
        ordinal = found.toordinal()
        if ordinal == first_day:
            hms = _next_time(spec, clock // 3600, clock // 60 % 60, clock % 60)
        else:
            hms = spec.hours[0], spec.minutes[0], spec.seconds[0]
        if hms is not None:
            wall = ordinal * DAY + hms[0] * 3600 + hms[1] * 60 + hms[2]
            return wall if wall <= last else None
        if ordinal >= last // DAY:
            return None
        found = _next_day(spec, found + _ONE_DAY, date.fromordinal(last // DAY))
    return None


def prev_match(spec: CronSpec, first: int, last: int) -> int | None:
    """Return the latest matching wall time in [first, last] (wall seconds), or None."""
    last_day, clock = divmod(last, DAY)
    found = _prev_day(spec, date.fromordinal(last_day), date.fromordinal(first // DAY))
    while found is not None:
        ordinal = found.toordinal()
        if ordinal == last_day:
            hms = _prev_time(spec, clock // 3600, clock // 60 % 60, clock % 60)
        else:
            hms = spec.hours[-1], spec.minutes[-1], spec.seconds[-1]
        if hms is not None:
            wall = ordinal * DAY + hms[0] * 3600 + hms[1] * 60 + hms[2]
            return wall if wall >= first else None
        if ordinal <= first // DAY:
            return None
        found = _prev_day(spec, found - _ONE_DAY, date.fromordinal(first // DAY))
    return None


def ever_matches(spec: CronSpec) -> bool:
    """Whether any day matches at all (one Gregorian cycle decides it for good)."""
    start = date(2001, 1, 1)
    return _next_day(spec, start, date(start.year + _YEARS_OF_DAYS_CYCLE, 1, 1)) is not None
