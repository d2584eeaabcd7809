"""Which UTC day a run-event is filed under, and when a day is complete (pure, no clock).

A partition's **watermark** is the largest event time (``at``) read so far in it, in offset
order. An event is filed under the UTC day of its partition's watermark, so days never go back
within a partition and a day, once every partition's watermark has passed its end, can receive
nothing more: it is **complete** and may be exported. The fold's clock follows the broker's
LogAppendTime (DESIGN.md, "Time is data"), so the watermark's day is the day of ``at`` itself
except for an event whose ``at`` lags an earlier one of its partition; that event goes to the
later day (docs/history.md, "Days").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, date, datetime, time, timedelta

ONE_DAY = timedelta(days=1)


def day_of(instant: datetime) -> date:
    """Return the UTC calendar day of an aware instant. Raises ValueError if it is naive."""
    if instant.tzinfo is None:
        raise ValueError(f"naive datetime {instant!r}: instants must be timezone-aware")
    return instant.astimezone(UTC).date()


def day_start(day: date) -> datetime:
    """Return midnight UTC at the start of ``day`` (aware)."""
    return datetime.combine(day, time(0), tzinfo=UTC)


def day_end(day: date) -> datetime:
    """Return midnight UTC at the end of ``day`` (the next day's start; exclusive)."""
    return day_start(day) + ONE_DAY


def horizon(now: datetime, hot_window: timedelta) -> datetime:
    """Return the instant before which events may be archived: the start of the UTC day that
    holds ``now - hot_window``. Days ending at or before it are old enough to export.

    Args:
        now: the current instant, aware (the caller's clock: the core has none).
        hot_window: how long events stay only on the topic (``ArchiveSettings.hot_window``).

    Returns:
        An aware UTC midnight; the archive never holds an event of a later day.
    """
    return day_start(day_of(now - hot_window))


def advance(mark: datetime | None, at: datetime) -> datetime:
    """Return a partition's watermark after reading an event at ``at`` (its running max)."""
    return at if mark is None or at > mark else mark


def sealed(
    marks: Mapping[int, datetime | None], finished: Iterable[int], until: datetime
) -> datetime | None:
    """Return the instant before which every partition has been read completely.

    Args:
        marks: partition -> watermark (None: nothing read yet in it).
        finished: partitions read to their end, or past ``until``; they seal up to ``until``.
        until: the export's horizon (``horizon``).

    Returns:
        ``min`` over unfinished partitions of their watermark, at most ``until``; None when an
        unfinished partition has read nothing yet (nothing is sealed). Every day whose
        ``day_end`` is at or before it is complete.
    """
    done = set(finished)
    bound = until
    for partition, mark in marks.items():
        if partition in done:
            continue
        if mark is None:
            return None
        bound = min(bound, mark)
    return bound


def complete_days(open_days: Iterable[date], sealed_before: datetime | None) -> list[date]:
    """Return the days of ``open_days`` that are complete, oldest first.

    A day is complete when it ends at or before ``sealed_before`` (``sealed``); None: none is.
    """
    if sealed_before is None:
        return []
    return sorted(d for d in set(open_days) if day_end(d) <= sealed_before)


def next_offsets(
    first_of_day: Mapping[int, Mapping[date, int]], stops: Mapping[int, int], day: date
) -> dict[int, int]:
    """Return partition -> the first offset filed after ``day``: where reading resumes once
    ``day`` is committed.

    Args:
        first_of_day: partition -> day -> offset of the partition's first record of that day.
        stops: partition -> first offset not read, for every finished partition.
        day: a complete day (every partition is finished or has a record of a later day).

    Returns:
        For each partition, its first offset of a later day, else its stop.

    Raises:
        KeyError: a partition is neither finished nor past ``day`` (``day`` is not complete).
    """
    out: dict[int, int] = {}
    for p, firsts in first_of_day.items():
        later = [o for d, o in firsts.items() if d > day]
        out[p] = min(later) if later else stops[p]
    return out
