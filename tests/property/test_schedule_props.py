"""Property tests of cron ticks against a brute-force walk of real instants (issue 3).

The reference knows nothing of cronlog's algorithm: it walks every real minute of a year in
the zone (every second in an hour whose UTC offset changes), reads the local wall time with
zoneinfo, and applies the rules of docs/schedules.md directly. Expressions are generated
with the sets they mean, so the reference does not parse cron either.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from hypothesis import given, settings
from hypothesis import strategies as st

from cronlog.model import DstGapPolicy, DstOverlapPolicy
from cronlog.schedule import cron_ticks, prev_ticks

ZONES = [
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",  # Lord Howe: 30-minute DST
    "Asia/Kolkata",
    "Asia/Kathmandu",  # half-hour and 45-minute offsets, no DST
    "America/St_Johns",
    "Australia/Adelaide",
    "Pacific/Chatham",  # half-hour/45-min with DST
    "Europe/Dublin",  # negative DST in tzdata
    "America/Havana",
    "America/Santiago",  # transitions at local midnight
    "Africa/Casablanca",  # two transitions a year around Ramadan
    "UTC",
]
EPOCH_DAY = date(1970, 1, 1).toordinal()


@dataclass(frozen=True)
class Expr:
    """A generated cron expression and the sets it means."""

    text: str
    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # cron numbering, Sunday = 0
    day_and: bool
    fixed_time: bool

    def day_matches(self, day: date) -> bool:
        if day.month not in self.months:
            return False
        dom, dow = day.day in self.days, (day.weekday() + 1) % 7 in self.weekdays
        return (dom and dow) if self.day_and else (dom or dow)

    def matches(self, wall: int) -> bool:
        """Whether wall time ``wall`` (seconds since 1970-01-01T00:00 local) matches."""
        days, clock = divmod(wall, 86_400)
        return (
            clock // 3600 in self.hours
            and clock // 60 % 60 in self.minutes
            and clock % 60 in self.seconds
            and self.day_matches(date.fromordinal(days + EPOCH_DAY))
        )


def _values(lo: int, hi: int, a: int, b: int, step: int) -> set[int]:
    """What a-b/step means: a..b, or a..hi then lo..b when a > b, every step-th value."""
    cycle = list(range(a, b + 1)) if a <= b else [*range(a, hi + 1), *range(lo, b + 1)]
    return set(cycle[::step])


@st.composite
def field(
    draw: st.DrawFn,
    domain: tuple[int, int],
    lo: int | None = None,
    hi: int | None = None,
    *,
    star: bool = True,
    min_step: int = 2,
    max_items: int = 3,
) -> tuple[str, set[int]]:
    """A field over ``domain`` whose values are drawn from [lo, hi] (default: the domain)."""
    lo, hi = domain[0] if lo is None else lo, domain[1] if hi is None else hi
    kind = draw(st.sampled_from(["star", "step", "list"] if star else ["step", "list"]))
    if kind == "star":
        return "*", set(range(lo, hi + 1))
    if kind == "step":
        n = draw(st.integers(min_step, max(min_step, (hi - lo + 1) // 2)))
        text = f"*/{n}" if (lo, hi) == domain else f"{lo}-{hi}/{n}"
        return text, set(range(lo, hi + 1, n))
    texts, values = [], set()
    for _ in range(draw(st.integers(1, max_items))):
        a = draw(st.integers(lo, hi))
        if draw(st.booleans()):
            texts.append(str(a))
            values.add(a)
            continue
        b, step = draw(st.integers(lo, hi)), draw(st.sampled_from([1, 1, 2, 3, 7]))
        if a > b and (lo, hi) != domain:
            a, b = b, a  # a wrapping range would leave [lo, hi]
        texts.append(f"{a}-{b}" + (f"/{step}" if step > 1 else ""))
        values |= _values(*domain, a, b, step)
    return ",".join(texts), values


@st.composite
def expressions(draw: st.DrawFn) -> Expr:
    six = draw(st.booleans())
    # Keep a year's ticks in the tens of thousands: the reference walks every minute anyway.
    if six:
        sec_text, secs = draw(field((0, 59), star=False, min_step=20, max_items=2))
        min_text, mins = draw(field((0, 59), star=False, min_step=20, max_items=2))
    else:
        sec_text, secs = "", {0}
        min_text, mins = draw(field((0, 59), star=False, min_step=10))
    # Hours 0-4 often: where most zones change their offset.
    hour_text, hours = draw(st.one_of(field((0, 23)), field((0, 23), 0, 4, star=False)))
    dom_text, doms = draw(st.one_of(st.just(("*", set(range(1, 32)))), field((1, 31))))
    mon_text, mons = draw(st.one_of(st.just(("*", set(range(1, 13)))), field((1, 12))))
    dow_text, dows = draw(st.one_of(st.just(("*", set(range(7)))), field((0, 6))))
    fields = [sec_text] if six else []
    fields += [min_text, hour_text, dom_text, mon_text, dow_text]
    starts = [f.startswith("*") for f in fields]
    return Expr(
        text=" ".join(fields),
        seconds=frozenset(secs),
        minutes=frozenset(mins),
        hours=frozenset(hours),
        days=frozenset(doms),
        months=frozenset(mons),
        weekdays=frozenset(dows),
        day_and=dom_text.startswith("*") or dow_text.startswith("*"),
        fixed_time=not any(starts[: 3 if six else 2]),
    )


def _offset_fn(tz: str) -> Callable[[int], int]:
    zone = ZoneInfo(tz)

    def offset(ts: int) -> int:
        delta = datetime.fromtimestamp(ts, UTC).astimezone(zone).utcoffset()
        assert delta is not None
        return int(delta.total_seconds())

    return offset


def reference(
    expr: Expr, tz: str, start: int, end: int, gap: DstGapPolicy, overlap: DstOverlapPolicy
) -> list[int]:
    """The ticks in [start, end) (epoch seconds) by walking every real instant."""
    offset = _offset_fn(tz)
    real: list[tuple[int, int]] = []  # (instant, wall) of every matching real instant
    shifted: set[int] = set()
    prev_wall = start + offset(start) - 1

    def arrive(ts: int, wall: int) -> None:
        nonlocal prev_wall
        if (
            wall > prev_wall + 1
            and expr.fixed_time
            and gap is DstGapPolicy.SHIFT
            and any(expr.matches(w) for w in range(prev_wall + 1, wall))
        ):
            shifted.add(ts)  # wall times were skipped: a fixed-time one fires right after
        prev_wall = wall

    for hour in range(start, end, 3600):
        first, last = offset(hour), offset(hour + 3599)
        if first == last:  # one offset all hour: minute by minute
            arrive(hour, hour + first)
            assert first % 60 == 0  # so each real minute is one wall minute
            for ts in range(hour, hour + 3600, 60):
                wall = ts + first
                if wall // 60 % 60 in expr.minutes:
                    real += [(ts + s, wall + s) for s in expr.seconds if expr.matches(wall + s)]
            prev_wall = hour + 3599 + first
        else:  # the offset changes inside this hour: second by second
            for ts in range(hour, hour + 3600):
                wall = ts + offset(ts)
                arrive(ts, wall)
                if expr.matches(wall):
                    real.append((ts, wall))
    if not expr.fixed_time or overlap is DstOverlapPolicy.BOTH:
        kept = {ts for ts, _ in real}
    else:
        by_wall: dict[int, list[int]] = {}
        for ts, wall in real:
            by_wall.setdefault(wall, []).append(ts)
        pick = min if overlap is DstOverlapPolicy.FIRST else max
        kept = {pick(instants) for instants in by_wall.values()}
    return sorted(kept | shifted)


def _ticks(
    expr: Expr, tz: str, start: int, end: int, gap: DstGapPolicy, overlap: DstOverlapPolicy
) -> list[int]:
    after = datetime.fromtimestamp(start - 1, UTC)
    got = cron_ticks(expr.text, tz, after, dst_gap=gap, dst_overlap=overlap)
    return [int(t.timestamp()) for t in itertools.takewhile(lambda t: t.timestamp() < end, got)]


@settings(max_examples=12, deadline=None)
@given(
    expr=expressions(),
    tz=st.sampled_from(ZONES),
    year=st.integers(2021, 2026),
    gap=st.sampled_from(list(DstGapPolicy)),
    overlap=st.sampled_from(list(DstOverlapPolicy)),
)
def test_ticks_equal_a_brute_force_walk_through_a_year(
    expr: Expr, tz: str, year: int, gap: DstGapPolicy, overlap: DstOverlapPolicy
) -> None:
    start = int(datetime(year, 1, 1, tzinfo=UTC).timestamp())
    end = int(datetime(year + 1, 1, 1, tzinfo=UTC).timestamp())
    got = _ticks(expr, tz, start, end, gap, overlap)
    assert got == reference(expr, tz, start, end, gap, overlap)
    assert all(a < b for a, b in itertools.pairwise(got))  # strictly increasing, no repeats


@settings(max_examples=60, deadline=None)
@given(
    expr=expressions(),
    tz=st.sampled_from(ZONES),
    year=st.integers(2021, 2026),
    gap=st.sampled_from(list(DstGapPolicy)),
    overlap=st.sampled_from(list(DstOverlapPolicy)),
)
def test_ticks_increase_and_match_their_wall_time_around_transitions(
    expr: Expr, tz: str, year: int, gap: DstGapPolicy, overlap: DstOverlapPolicy
) -> None:
    offset = _offset_fn(tz)
    start = int(datetime(year, 3, 1, tzinfo=UTC).timestamp())
    got = list(
        itertools.islice(
            cron_ticks(
                expr.text, tz, datetime.fromtimestamp(start, UTC), dst_gap=gap, dst_overlap=overlap
            ),
            400,
        )
    )
    instants = [int(t.timestamp()) for t in got]
    assert all(a < b for a, b in itertools.pairwise(instants))
    assert len(set(instants)) == len(instants)
    for ts in instants:
        wall = ts + offset(ts)
        if not expr.matches(wall):  # only a fixed-time tick shifted out of a gap may differ
            assert expr.fixed_time and gap is DstGapPolicy.SHIFT
            assert offset(ts - 1) < offset(ts)
            assert any(expr.matches(w) for w in range(ts - 1 + offset(ts - 1) + 1, wall))
    if got:  # the same ticks, latest first, looking back from just after the last
        back = prev_ticks(
            expr.text,
            tz,
            got[-1] + timedelta(seconds=1),
            len(got),
            dst_gap=gap,
            dst_overlap=overlap,
        )
        assert list(back) == got[::-1]


@settings(max_examples=60, deadline=None)
@given(
    tz=st.sampled_from(ZONES),
    year=st.integers(2021, 2026),
    six=st.booleans(),
    hour=st.integers(0, 23),
    minute=st.integers(0, 59),
    second=st.integers(0, 59),
)
def test_a_fixed_time_daily_job_fires_once_per_local_day_by_default(
    tz: str, year: int, six: bool, hour: int, minute: int, second: int
) -> None:
    expression = f"{minute} {hour} * * *"
    if six:
        expression = f"{second} {expression}"
    zone = ZoneInfo(tz)
    first_day, last_day = date(year, 1, 2), date(year, 12, 30)
    after = datetime(year, 1, 1, tzinfo=UTC)
    local_days = []
    for tick in cron_ticks(expression, tz, after):
        day = tick.astimezone(zone).date()
        if day > last_day:
            break
        if day >= first_day:
            local_days.append(day)
    expected = [first_day + timedelta(days=i) for i in range((last_day - first_day).days + 1)]
    assert local_days == expected
