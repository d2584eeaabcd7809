"""The one place for UTC / epoch-millisecond / timedelta conversions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)  # built once: to_ms runs for every instant of every event


def to_ms(instant: datetime) -> int:
    """Return epoch milliseconds for an aware instant.

    Args:
        instant: a timezone-aware datetime (any zone).

    Returns:
        Milliseconds since 1970-01-01T00:00:00Z, floored.

    Raises:
        ValueError: if ``instant`` is naive.
    """
    if instant.tzinfo is None:
        raise ValueError(f"naive datetime {instant!r}: instants must be timezone-aware")
    return (instant - EPOCH) // _MS


def from_ms(ms: int) -> datetime:
    """Return the aware UTC datetime for epoch milliseconds ``ms``."""
    return EPOCH + timedelta(milliseconds=ms)


def utc(instant: datetime) -> datetime:
    """Return ``instant`` converted to UTC.

    Raises:
        ValueError: if ``instant`` is naive (a wall time without a zone is not an instant).
    """
    if instant.tzinfo is None:
        raise ValueError(f"naive datetime {instant!r}: instants must be timezone-aware")
    return instant.astimezone(UTC)


def duration_ms(duration: timedelta) -> int:
    """Return a duration in whole milliseconds."""
    return duration // _MS


def ms_duration(ms: int) -> timedelta:
    """Return the timedelta of ``ms`` milliseconds."""
    return timedelta(milliseconds=ms)


def iso(instant: datetime) -> str:
    """Return an ISO-8601 UTC string with a ``Z`` suffix and millisecond precision."""
    return utc(instant).isoformat(timespec="milliseconds").replace("+00:00", "Z")
