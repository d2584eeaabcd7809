"""Serialisation of a job's table record (``JobState``) to bytes and back.

JSON through pydantic's TypeAdapter: deterministic for a given state, readable when debugging.
The format is versioned by the leading ``v1:`` tag; a change of meaning gets a new tag and a
rebuild from the log, never a reinterpretation of old bytes.
"""

from __future__ import annotations

from pydantic import TypeAdapter

from cronlog.errors import CronlogError
from cronlog.job import JobState

_TAG = b"v1:"
_ADAPTER: TypeAdapter[JobState] = TypeAdapter(JobState)


class StateDecodeError(CronlogError):
    """A stored job record could not be read (wrong version tag or corrupt bytes)."""


def dump_state(state: JobState) -> bytes:
    """Return the stored form of ``state``."""
    return _TAG + _ADAPTER.dump_json(state)


def load_state(data: bytes) -> JobState:
    """Return the JobState stored as ``data``.

    Raises:
        StateDecodeError: unknown version tag or invalid content.
    """
    if not data.startswith(_TAG):
        raise StateDecodeError(f"job record has unknown version tag {data[:8]!r}")
    try:
        return _ADAPTER.validate_json(data[len(_TAG) :])
    except ValueError as exc:
        raise StateDecodeError(f"corrupt job record: {exc}") from exc
