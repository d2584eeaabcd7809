"""The archive's day rules (services/archive/days.py): filing, completeness, resume offsets."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.archive import days

T = datetime(2026, 3, 5, 10, 0, tzinfo=UTC)


def test_the_horizon_is_the_start_of_the_day_holding_now_minus_the_hot_window() -> None:
    assert days.horizon(T, timedelta(days=30)) == datetime(2026, 2, 3, tzinfo=UTC)
    assert days.horizon(T, timedelta(seconds=1)) == datetime(2026, 3, 5, tzinfo=UTC)
    just_after_midnight = datetime(2026, 3, 5, 0, 0, 0, 500000, tzinfo=UTC)
    assert days.horizon(just_after_midnight, timedelta(seconds=1)) == datetime(
        2026, 3, 4, tzinfo=UTC
    )


def test_day_of_is_the_utc_day_and_refuses_a_naive_instant() -> None:
    from zoneinfo import ZoneInfo

    late_in_new_york = datetime(2026, 3, 5, 22, 0, tzinfo=ZoneInfo("America/New_York"))
    assert days.day_of(late_in_new_york) == date(2026, 3, 6)
    with pytest.raises(ValueError, match="naive"):
        days.day_of(datetime(2026, 3, 5))


def test_nothing_is_sealed_while_a_partition_has_read_nothing() -> None:
    marks = {0: T, 1: None}
    assert days.sealed(marks, [], T + timedelta(days=1)) is None
    assert days.complete_days([T.date()], None) == []


def test_a_day_is_complete_once_every_unfinished_partition_passed_its_end() -> None:
    end_of_day = datetime(2026, 3, 6, tzinfo=UTC)
    until = datetime(2026, 3, 9, tzinfo=UTC)
    marks = {0: end_of_day + timedelta(hours=1), 1: end_of_day - timedelta(seconds=1)}
    bound = days.sealed(marks, [], until)
    assert bound == end_of_day - timedelta(seconds=1)
    assert days.complete_days([date(2026, 3, 4), date(2026, 3, 5)], bound) == [date(2026, 3, 4)]
    # partition 1 read to its end: it no longer holds the day back
    bound = days.sealed(marks, [1], until)
    assert days.complete_days([date(2026, 3, 5), date(2026, 3, 4)], bound) == [
        date(2026, 3, 4),
        date(2026, 3, 5),
    ]
    # everything finished: sealed up to the horizon, never past it
    assert days.sealed(marks, [0, 1], until) == until


def test_a_late_event_is_filed_under_its_partitions_watermark_day() -> None:
    mark = days.advance(None, datetime(2026, 3, 6, 0, 0, 1, tzinfo=UTC))
    late = datetime(2026, 3, 5, 23, 59, 59, tzinfo=UTC)
    assert days.advance(mark, late) == mark
    assert days.day_of(days.advance(mark, late)) == date(2026, 3, 6)


def test_resume_offsets_are_each_partitions_first_offset_of_a_later_day_else_its_stop() -> None:
    d1, d2, d3 = date(2026, 3, 1), date(2026, 3, 2), date(2026, 3, 3)
    first = {0: {d1: 0, d2: 7, d3: 9}, 1: {d1: 4}, 2: {}}
    assert days.next_offsets(first, {1: 6, 2: 3}, d1) == {0: 7, 1: 6, 2: 3}
    assert days.next_offsets(first, {1: 6, 2: 3}, d2) == {0: 9, 1: 6, 2: 3}
    with pytest.raises(KeyError):
        days.next_offsets(first, {}, d1)  # partition 1 is neither finished nor past d1


# -- property: a complete day never receives another event ----------------------------------

steps = st.lists(st.integers(min_value=-3600, max_value=6 * 3600), min_size=0, max_size=40)


@settings(max_examples=200, deadline=None)
@given(
    partitions=st.lists(steps, min_size=1, max_size=4),
    order=st.lists(st.integers(min_value=0, max_value=3), max_size=200),
)
def test_no_event_is_filed_under_a_day_already_complete(
    partitions: list[list[int]], order: list[int]
) -> None:
    """Partitions of events whose ``at`` mostly rises (steps in seconds, some negative: a clock
    that lags), read interleaved in any order: once a day is complete, no later read is filed
    under it, every event lands at or after its own day, and a day's resume offsets point at
    the first event of a later day."""
    base = datetime(2026, 3, 1, 20, 0, tzinfo=UTC)
    logs = []
    for deltas in partitions:
        at, log = base, []
        for d in deltas:
            at += timedelta(seconds=d)
            log.append(at)
        logs.append(log)
    until = days.day_start(date(2026, 3, 20))
    pos = [0] * len(logs)
    marks: dict[int, datetime | None] = dict.fromkeys(range(len(logs)))
    first: dict[int, dict[date, int]] = {p: {} for p in range(len(logs))}
    filed: dict[int, list[date]] = {p: [] for p in range(len(logs))}
    complete: set[date] = set()
    finished = {p for p, log in enumerate(logs) if not log}
    schedule = [p % len(logs) for p in order] + [p for p in range(len(logs)) for _ in logs[p]]
    for p in schedule:
        if pos[p] >= len(logs[p]):
            continue
        at = logs[p][pos[p]]
        marks[p] = days.advance(marks[p], at)
        day = days.day_of(marks[p])  # type: ignore[arg-type]
        assert day not in complete
        assert day >= days.day_of(at)
        first[p].setdefault(day, pos[p])
        filed[p].append(day)
        pos[p] += 1
        if pos[p] == len(logs[p]):
            finished.add(p)
        opened = {d for f in filed.values() for d in f}
        done = days.complete_days(opened, days.sealed(marks, finished, until))
        stops = {q: pos[q] for q in finished}
        for d in done:
            nxt = days.next_offsets(first, stops, d)
            for q, offset in nxt.items():
                assert all(x <= d for x in filed[q][:offset])
                assert all(x > d for x in filed[q][offset:])
        complete.update(done)
