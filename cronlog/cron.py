"""The cron dialect: reads an expression into the sets of wall-clock values it matches.

croniter expands each field (cronlog.cronfields, which rewrites what croniter reads
differently from docs/schedules.md); this module assembles the fields and the rules between
them: macros, Vixie cron's day-of-month/day-of-week rule, and which jobs are fixed-time.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from cronlog.cronfields import (
    FIELD,
    HASH,
    NAMES_5,
    dow_specials,
    plain_values,
    split_specials,
)
from cronlog.errors import InvalidDefinition

HASH_SEED = "cronlog"
"""What Jenkins ``H`` hashes when no job_id is given (previews, validation without a job)."""
MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
"""Vixie cron's nicknames (crontab(5)); always these fixed values, never hashed as croniter's."""
_HAS_HASH = re.compile(r"(?:^|[\s,])h", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class CronSpec:
    """What a cron expression matches, field by field, in wall-clock terms.

    Attributes:
        seconds: matching seconds, ascending (``(0,)`` for 5 fields).
        minutes: matching minutes, ascending.
        hours: matching hours, ascending.
        months: matching months, 1-12.
        days: plain matching days of the month, 1-31.
        last_day: ``L``: the last day of the month matches.
        last_weekday: ``LW``: the last Monday-Friday of the month matches.
        nearest_weekdays: ``nW``: the Monday-Friday nearest day n (same month) matches.
        weekdays: plain matching weekdays, Python numbering (Monday=0).
        nth_weekdays: ``d#n``: (Python weekday, n in 1-5) pairs.
        last_weekdays: ``dL``: Python weekdays whose last occurrence in the month matches.
        day_and: a day field starts with ``*`` (or ``?``), so both day fields must match;
            otherwise either may (Vixie cron, crontab(5)).
        every_day: every day of a matching month matches (a fast path).
        fixed_time: neither minute nor hour (nor second) starts with ``*``: DST policies apply.
    """

    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    months: frozenset[int]
    days: frozenset[int]
    last_day: bool
    last_weekday: bool
    nearest_weekdays: frozenset[int]
    weekdays: frozenset[int]
    nth_weekdays: frozenset[tuple[int, int]]
    last_weekdays: frozenset[int]
    day_and: bool
    every_day: bool
    fixed_time: bool


def parse(expression: str, hash_id: str | None = None) -> CronSpec:
    """Read a cron expression (5 fields, 6 with seconds first, or an ``@`` macro).

    Args:
        expression: the expression as the user wrote it.
        hash_id: what Jenkins ``H`` hashes (the job_id); None hashes ``HASH_SEED``.

    Returns:
        The expression's field sets; cached per (expression, hash_id).

    Raises:
        InvalidDefinition: field ``schedule.expression``; the reason names the cron field
            (``minute``, ``day_of_week``, ...) and, where it can, why it is refused.

    Determinism: ``H`` depends only on (expression, hash_id).
    """
    if hash_id is not None and not _HAS_HASH.search(expression):
        hash_id = None  # the hash cannot matter: share one cache entry across jobs
    return _parse(expression, hash_id)


@functools.lru_cache(maxsize=8192)
def _parse(expression: str, hash_id: str | None) -> CronSpec:
    fields = _fields(expression)
    names = ("second", *NAMES_5) if len(fields) == 6 else NAMES_5
    raw = dict(zip(names, fields, strict=True))
    seed = (hash_id if hash_id is not None else HASH_SEED).encode()
    times = {
        n: tuple(sorted(plain_values(n, raw[n], raw[n], seed)))
        for n in ("second", "minute", "hour")
        if n in raw
    }
    dom_text, dom_special = split_specials("day_of_month", raw["day_of_month"])
    dow_text, dow_special = split_specials("day_of_week", raw["day_of_week"])
    days = plain_values("day_of_month", dom_text, raw["day_of_month"], seed) if dom_text else set()
    weekdays = (
        {(d - 1) % 7 for d in plain_values("day_of_week", dow_text, raw["day_of_week"], seed)}
        if dow_text
        else set()
    )
    nth, last_dows = dow_specials(raw["day_of_week"], dow_special, seed)
    day_and = _starred(raw["day_of_month"]) or _starred(raw["day_of_week"])
    dom_all, dow_all = len(days) == 31, len(weekdays) == 7
    return CronSpec(
        seconds=times.get("second", (0,)),
        minutes=times["minute"],
        hours=times["hour"],
        months=frozenset(plain_values("month", raw["month"], raw["month"], seed)),
        days=frozenset(days),
        last_day="l" in dom_special,
        last_weekday="lw" in dom_special,
        nearest_weekdays=frozenset(int(t[:-1]) for t in dom_special if t not in ("l", "lw")),
        weekdays=frozenset(weekdays),
        nth_weekdays=frozenset(((d - 1) % 7, n) for d, n in nth),
        last_weekdays=frozenset((d - 1) % 7 for d in last_dows),
        day_and=day_and,
        every_day=(dom_all and dow_all) if day_and else (dom_all or dow_all),
        fixed_time=not any(_starred(raw[n]) for n in times),
    )


def _fields(expression: str) -> list[str]:
    text = expression.strip()
    if text.startswith("@"):
        macro = MACROS.get(text.lower())
        if macro is None:
            raise InvalidDefinition(
                FIELD, f"unknown macro {text!r}; expected one of {', '.join(MACROS)}"
            )
        text = macro
    fields = text.split()
    if len(fields) not in (5, 6):
        raise InvalidDefinition(
            FIELD, f"{expression!r} has {len(fields)} fields; expected 5, or 6 with seconds first"
        )
    return fields


def _starred(raw: str) -> bool:
    """Whether a field counts as starting with ``*``: ``*``, ``*/n``, ``?`` or Jenkins ``H/n``."""
    text = raw.lower()
    return text.startswith(("*", "?")) or (text.startswith("h/") and HASH.match(text) is not None)
