"""Cron ticks as real instants: wall-clock matches mapped through a zone's UTC offsets.

Real time is cut into segments over which the zone's offset is constant. Inside one, wall
time and instant differ by that offset, so every matching wall time there is one real tick.
Transitions add the DST rules of docs/schedules.md: a spring-forward gap's wall times never
occur (a fixed-time job may shift to the gap's end), a fall-back overlap's occur twice (a
fixed-time job keeps one pass or both, per policy). Instants are whole epoch seconds and wall
times whole wall seconds (cronlog.cronmatch): plain ints keep the fold's hot path cheap.
"""

from __future__ import annotations

import functools
from bisect import bisect_right
from datetime import UTC, date, datetime
from typing import NamedTuple
from zoneinfo import ZoneInfo

from cronlog.cron import CronSpec
from cronlog.cronmatch import DAY, next_match, prev_match
from cronlog.model import DstGapPolicy, DstOverlapPolicy

EPOCH_WALL = date(1970, 1, 1).toordinal() * DAY
"""Wall seconds of 1970-01-01T00:00: wall = instant + offset + EPOCH_WALL."""
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_PROBE = 3 * 3600
"""Offsets are sampled this often (seconds) to find transitions; none are closer together."""
HORIZON_YEARS = 100
"""A tick search gives up after this many years without a match (a valid expression matches
within 40 years: the rarest is a 29 February on a given weekday)."""
_HORIZON = HORIZON_YEARS * 366 * DAY


class Segment(NamedTuple):
    """A stretch [start, end) of real time (epoch seconds) with one UTC offset (seconds).

    ``offset_before``/``offset_after`` are the offsets just before ``start`` and from ``end``
    on; they equal ``offset`` where the boundary is not a transition.
    """

    start: int
    end: int
    offset: int
    offset_before: int
    offset_after: int


class Policy(NamedTuple):
    """How ticks meet DST transitions: whether the job is fixed-time, and its two policies."""

    fixed_time: bool
    gap: DstGapPolicy
    overlap: DstOverlapPolicy


def _year_of(instant: int) -> int:
    return date.fromordinal(instant // DAY + _EPOCH_ORDINAL).year


def _epoch(year: int) -> int:
    return (date(year, 1, 1).toordinal() - _EPOCH_ORDINAL) * DAY


_FIRST_INSTANT, _LAST_INSTANT = _epoch(3), _epoch(9996)
"""Searches stay inside these years, so every datetime the zone maths builds exists."""


def _offset(zone: ZoneInfo, instant: int) -> int:
    offset = datetime.fromtimestamp(instant, UTC).astimezone(zone).utcoffset()
    return 0 if offset is None else offset.days * DAY + offset.seconds


@functools.lru_cache(maxsize=4096)
def _year_transitions(tz: str, year: int) -> tuple[tuple[int, int, int], ...]:
    """(instant, offset before, offset after) of each offset change in (1 Jan, 1 Jan next]."""
    zone = ZoneInfo(tz)
    t, end = _epoch(year), _epoch(year + 1)
    before = _offset(zone, t)
    found = []
    while t < end:
        probe = min(t + _PROBE, end)
        if _offset(zone, probe) == before:
            t = probe
            continue
        lo, hi = t, probe  # offset(lo) == before != offset(hi): bisect to the second
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if _offset(zone, mid) == before else (lo, mid)
        after = _offset(zone, hi)
        found.append((hi, before, after))
        t, before = hi, after  # scan on from the change: a second one may follow
    return tuple(found)


@functools.lru_cache(maxsize=4096)
def _window(tz: str, year: int) -> tuple[tuple[int, ...], tuple[tuple[int, int, int], ...], int]:
    """Transitions of years year-1 .. year+1, their instants, and the offset at the start."""
    items = tuple(x for y in (year - 1, year, year + 1) for x in _year_transitions(tz, y))
    return tuple(x[0] for x in items), items, _offset(ZoneInfo(tz), _epoch(year - 1))


def segment_at(tz: str, instant: int) -> Segment:
    """Return the segment of zone ``tz`` holding ``instant`` (epoch seconds).

    Without a transition within a year of ``instant`` the segment ends (or starts) at a
    1 January instead: harmless, as the offsets on both sides of such a boundary are equal.
    """
    year = _year_of(instant)
    instants, items, opening = _window(tz, year)
    i = bisect_right(instants, instant)
    if i > 0:
        start, before, offset = items[i - 1]
    else:
        start, before, offset = _epoch(year - 1), opening, opening
    if i < len(items):
        end, after = items[i][0], items[i][2]
    else:
        end, after = _epoch(year + 2), offset
    return Segment(start, end, offset, before, after)


def _walls(seg: Segment, first: int, last: int, policy: Policy) -> tuple[int, int]:
    """The wall window of instants [first, last] in ``seg``, less the passes the policy drops."""
    shift = seg.offset + EPOCH_WALL
    lo, hi = first + shift, last + shift
    if policy.fixed_time:
        if policy.overlap is DstOverlapPolicy.FIRST and seg.offset_before > seg.offset:
            lo = max(lo, seg.start + seg.offset_before + EPOCH_WALL)  # drop the second pass
        if policy.overlap is DstOverlapPolicy.LAST and seg.offset_after < seg.offset:
            hi = min(hi, seg.end + seg.offset_after + EPOCH_WALL - 1)  # drop the first pass
    return lo, hi


def _gap_fires(spec: CronSpec, seg: Segment, policy: Policy) -> bool:
    """Whether ``seg`` opens after a spring-forward gap holding a wall time that shifts to it."""
    if not (policy.fixed_time and policy.gap is DstGapPolicy.SHIFT):
        return False
    if seg.offset <= seg.offset_before:
        return False
    first = seg.start + seg.offset_before + EPOCH_WALL
    return next_match(spec, first, seg.start + seg.offset + EPOCH_WALL - 1) is not None


def next_after(spec: CronSpec, tz: str, after: int, policy: Policy) -> int | None:
    """Return the first tick (epoch seconds) after second ``after``, or None within the horizon.

    Args:
        spec: the parsed expression.
        tz: the IANA zone its wall times are read in.
        after: the last excluded epoch second: ticks are at ``after + 1`` or later.
        policy: fixed-time or not, and the job's DST policies.
    """
    t = after + 1
    stop = min(after + _HORIZON, _LAST_INSTANT)
    while t < stop:
        seg = segment_at(tz, t)
        if seg.start == t and _gap_fires(spec, seg, policy):
            return t
        lo, hi = _walls(seg, t, seg.end - 1, policy)
        if lo <= hi and (wall := next_match(spec, lo, hi)) is not None:
            return wall - seg.offset - EPOCH_WALL
        t = seg.end
    return None


def prev_before(spec: CronSpec, tz: str, before: int, policy: Policy) -> int | None:
    """Return the last tick (epoch seconds) before second ``before``, or None within the horizon.

    Args:
        spec: the parsed expression.
        tz: the IANA zone its wall times are read in.
        before: the first excluded epoch second: ticks are at ``before - 1`` or earlier.
        policy: fixed-time or not, and the job's DST policies.
    """
    t = before - 1
    stop = max(before - _HORIZON, _FIRST_INSTANT)
    while t >= stop:
        seg = segment_at(tz, t)
        lo, hi = _walls(seg, seg.start, t, policy)
        if lo <= hi and (wall := prev_match(spec, lo, hi)) is not None:
            return wall - seg.offset - EPOCH_WALL
        if _gap_fires(spec, seg, policy):
            return seg.start
        t = seg.start - 1
    return None
