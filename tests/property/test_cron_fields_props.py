"""Every spelling of the dialect against a brute-force walk of the wall clock (issue 10).

test_schedule_props.py checks the DST and overlap logic with plain numeric fields; this file
checks the field parser. Expressions are drawn item by item together with what each item
means by the rules of docs/schedules.md (``a-a``, wrapping ranges, ``a/n``, ``7`` for
Sunday, ``L`` and ``a-L``, names, ``?``, Vixie's day-field rule), so the reference neither
parses cron nor shares cronlog's or croniter's code. The reference walks every minute of
every day in a bounded window in UTC and keeps the minutes that match; ``next_tick`` must
give exactly those. A day that does not match cannot hold a matching minute, so the walk
skips it whole. The parser bugs of issue 10 (``31-L``, ``7-7``, ``7/2``) fail here.
"""

from __future__ import annotations

import calendar
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cronlog.errors import InvalidDefinition
from cronlog.model import Schedule, ScheduleKind
from cronlog.schedule import next_tick, validate_cron

DayTest = Callable[[date], bool]
MAX_TICKS = 60
WINDOW_DAYS = 4 * 366  # long enough for a 29 February and every month's 31st
DOW_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
MONTH_NAMES = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")


@dataclass(frozen=True)
class FieldSpec:
    """One field's domain: values lo..hi (the cycle), names from lo, and 7 for Sunday."""

    name: str
    lo: int
    hi: int
    names: tuple[str, ...] = ()

    @property
    def top(self) -> int:
        """The largest value that may be written (7 in day_of_week)."""
        return 7 if self.name == "day_of_week" else self.hi


MINUTE = FieldSpec("minute", 0, 59)
HOUR = FieldSpec("hour", 0, 23)
DOM = FieldSpec("day_of_month", 1, 31)
MONTH = FieldSpec("month", 1, 12, MONTH_NAMES)
DOW = FieldSpec("day_of_week", 0, 6, DOW_NAMES)


def _range(f: FieldSpec, a: int, b: int, step: int) -> set[int]:
    """docs/schedules.md: a-a is a; a > b wraps (a..max, min..b); every step-th value along.

    In day_of_week 0 and 7 are Sunday: 7 as a start is 0 (7-1 is Sunday, Monday), as an end
    it is the week's end (5-7 is Friday to Sunday, 0-7 every day).
    """
    if a == b:
        return {a % 7 if f is DOW else a}
    if f is DOW and a == 7:
        a = 0
    order = list(range(a, b + 1)) if a <= b else [*range(a, f.hi + 1), *range(f.lo, b + 1)]
    return {v % 7 if f is DOW else v for v in order[::step]}


def _start_step(f: FieldSpec, a: int, step: int) -> set[int]:
    """docs/schedules.md: a/n is a..max every n; max is Saturday in day_of_week, and 7/n is
    7..7 (Sunday alone)."""
    if f is DOW and a == 7:
        return {0}
    return set(range(a, f.hi + 1, step))


@st.composite
def _value(draw: st.DrawFn, f: FieldSpec) -> tuple[str, int]:
    """A value and its spelling: a number, or a name where the field has names."""
    v = draw(st.integers(f.lo, f.top))
    if f.names and v - f.lo < len(f.names) and draw(st.booleans()):
        name = f.names[v - f.lo]
        return (name.upper() if draw(st.booleans()) else name), v
    return str(v), v


def _in(values: set[int], f: FieldSpec) -> DayTest:
    if f is DOM:
        return lambda d: d.day in values
    if f is MONTH:
        return lambda d: d.month in values
    return lambda d: (d.weekday() + 1) % 7 in values  # cron numbering: Sunday = 0


def _last_day(d: date) -> int:
    return calendar.monthrange(d.year, d.month)[1]


@st.composite
def _item(draw: st.DrawFn, f: FieldSpec) -> tuple[str, set[int] | DayTest]:
    """One list item: what it says, and the values (or the day test) it means."""
    kinds = ["value", "range", "range_step", "start_step"]
    if f is DOM:
        kinds += ["last", "to_last", "to_last_step"]
    kind = draw(st.sampled_from(kinds))
    if kind == "last":
        return "L", lambda d: d.day == _last_day(d)
    if kind in ("to_last", "to_last_step"):  # a-L: a .. the month's last day
        a = draw(st.integers(1, 31))
        n = draw(st.integers(2, 9)) if kind == "to_last_step" else 1
        text = f"{a}-L" + (f"/{n}" if kind == "to_last_step" else "")
        return text, lambda d: a <= d.day <= _last_day(d) and (d.day - a) % n == 0
    first, a = draw(_value(f))
    if kind == "value":
        return first, {a % 7 if f is DOW else a}
    n = draw(st.sampled_from([1, 2, 3, 5, 7, 13]))
    if kind == "start_step":
        return f"{first}/{n}", _start_step(f, a, n)
    last, b = draw(st.one_of(_value(f), st.just((first, a))))  # a-a now and then
    if kind == "range":
        return f"{first}-{last}", _range(f, a, b, 1)
    return f"{first}-{last}/{n}", _range(f, a, b, n)


@st.composite
def _field(draw: st.DrawFn, f: FieldSpec, *, max_items: int = 3) -> tuple[str, DayTest | set[int]]:
    """A whole field: ``*``, ``*/n``, ``?`` (day fields), or a list of items.

    Returns the text and its meaning: a value set, or a day test when an ``L`` item is in it.
    """
    starred = ["*", "*/n"] + (["?"] if f in (DOM, DOW) else [])
    kind = draw(st.sampled_from([*starred, "list", "list"]))
    if kind in ("*", "?"):
        return kind, set(range(f.lo, f.hi + 1))
    if kind == "*/n":
        n = draw(st.integers(1, f.hi - f.lo + 1))
        return f"*/{n}", set(range(f.lo, f.hi + 1, n))
    items = draw(st.lists(_item(f), min_size=1, max_size=max_items))
    values: set[int] = set()
    tests: list[DayTest] = []
    for _, meaning in items:
        if isinstance(meaning, set):
            values |= meaning
        else:
            tests.append(meaning)
    text = ",".join(t for t, _ in items)
    if not tests:
        return text, values
    assert f is DOM
    plain = _in(values, f)
    return text, lambda d: plain(d) or any(t(d) for t in tests)


@dataclass(frozen=True)
class Expr:
    """A 5-field expression and what it means, field by field."""

    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    dom: DayTest
    month: DayTest
    dow: DayTest
    day_and: bool  # Vixie: a day field starting with * (or ?) makes both day fields required

    def day_matches(self, d: date) -> bool:
        if not self.month(d):
            return False
        dom, dow = self.dom(d), self.dow(d)
        return (dom and dow) if self.day_and else (dom or dow)


def _test(meaning: DayTest | set[int], f: FieldSpec) -> DayTest:
    return _in(meaning, f) if isinstance(meaning, set) else meaning


@st.composite
def expressions(draw: st.DrawFn) -> Expr:
    # Minute and hour fields with few items, so the ticks spread over many days.
    minute_text, minutes = draw(_field(MINUTE, max_items=2))
    hour_text, hours = draw(_field(HOUR, max_items=2))
    dom_text, dom = draw(_field(DOM))
    month_text, month = draw(_field(MONTH))
    dow_text, dow = draw(_field(DOW))
    assert isinstance(minutes, set) and isinstance(hours, set)
    return Expr(
        text=" ".join([minute_text, hour_text, dom_text, month_text, dow_text]),
        minutes=frozenset(minutes),
        hours=frozenset(hours),
        dom=_test(dom, DOM),
        month=_test(month, MONTH),
        dow=_test(dow, DOW),
        day_and=dom_text.startswith(("*", "?")) or dow_text.startswith(("*", "?")),
    )


def reference(expr: Expr, start: datetime, end: datetime) -> list[datetime]:
    """The first MAX_TICKS matching minutes strictly after ``start`` and before ``end`` (UTC)."""
    got: list[datetime] = []
    day = start.date()
    while day <= end.date() and len(got) < MAX_TICKS:
        if expr.day_matches(day):
            midnight = datetime(day.year, day.month, day.day, tzinfo=UTC)
            for minute in range(24 * 60):
                if minute // 60 not in expr.hours or minute % 60 not in expr.minutes:
                    continue
                t = midnight + timedelta(minutes=minute)
                if start < t < end:
                    got.append(t)
                    if len(got) == MAX_TICKS:
                        break
        day += timedelta(days=1)
    return got


def cronlog_ticks(text: str, start: datetime, end: datetime) -> list[datetime]:
    schedule = Schedule(ScheduleKind.CRON, text, "UTC")
    got: list[datetime] = []
    tick = next_tick(schedule, start)
    while tick is not None and tick < end and len(got) < MAX_TICKS:
        got.append(tick)
        tick = next_tick(schedule, tick)
    return got


def _never_fires(expr: Expr) -> bool:
    """Whether no day of a 400-year Gregorian cycle matches (all weekdays recur in it)."""
    first = date(2000, 1, 1)
    return not any(expr.day_matches(first + timedelta(days=i)) for i in range(146_097))


@settings(max_examples=300, deadline=None)
@given(
    expr=expressions(),
    start=st.datetimes(datetime(2020, 1, 1), datetime(2027, 12, 31), timezones=st.just(UTC)),
)
@example(  # issue 10: croniter read 31-L as every day of the month
    expr=Expr(
        "0 0 31-L * *",
        frozenset({0}),
        frozenset({0}),
        lambda d: d.day == 31,
        lambda d: True,
        lambda d: True,
        True,
    ),
    start=datetime(2024, 1, 1, tzinfo=UTC),
)
@example(  # issue 10: 7-7 became 0-7, every day; 7/2 became 0/2
    expr=Expr(
        "0 0 * * 7-7,7/2",
        frozenset({0}),
        frozenset({0}),
        lambda d: True,
        lambda d: True,
        lambda d: d.weekday() == 6,
        True,
    ),
    start=datetime(2024, 1, 1, tzinfo=UTC),
)
def test_next_tick_equals_a_minute_by_minute_walk_of_the_wall_clock(
    expr: Expr, start: datetime
) -> None:
    end = start + timedelta(days=WINDOW_DAYS)
    try:
        validate_cron(expr.text)
    except InvalidDefinition as exc:  # refused as never firing: the reference must agree
        assert "no day ever matches" in exc.reason, (expr.text, exc.reason)
        assert _never_fires(expr), expr.text
        return
    got = cronlog_ticks(expr.text, start, end)
    assert got == reference(expr, start, end), expr.text
    assert all(a < b for a, b in itertools.pairwise(got))


@pytest.mark.parametrize(
    ("field", "text", "values"),
    [
        (DOW, "7-7", {0}),
        (DOW, "0-7", set(range(7))),
        (DOW, "5-7", {5, 6, 0}),
        (DOW, "6-1", {6, 0, 1}),
        (DOW, "7-1", {0, 1}),
        (DOM, "28-2/2", {28, 30, 1}),
        (MINUTE, "50-10/15", {50, 5}),
    ],
)
def test_the_reference_reads_ranges_as_the_docs_examples(
    field: FieldSpec, text: str, values: set[int]
) -> None:
    # The reference is itself code: pin it to the examples docs/schedules.md gives.
    a, rest = text.split("-")
    b, _, step = rest.partition("/")
    assert _range(field, int(a), int(b), int(step or 1)) == values
