"""Serialisation of a job's table record (``JobState``) to bytes and back.

JSON through pydantic's TypeAdapter: deterministic for a given state, readable when debugging.
The format is versioned by the leading ``v1:`` tag; a change of meaning gets a new tag and a
rebuild from the log, never a reinterpretation of old bytes. A new field with a default keeps
the tag: old records load with the default, which must mean what those records meant.

Changes within ``v1``:

- ``applied_digests`` (issue 11): the ``command_digest`` of each user command marker in
  ``applied``, aligned with the end of ``applied`` (``JobState``), so a key re-used by another
  command is refused (``idempotency_conflict``) instead of dropped. A parallel field rather
  than ``applied`` of ``(idem_key, digest)`` pairs: ``applied`` keeps its type and meaning, so
  old records load as they are; their markers have no digest (fewer digests than markers) and
  get no conflict check until they leave the window. A process without the field drops it on
  its next write of the record (pydantic ignores unknown fields), which again only means
  "no digest". ``renewals`` (worker commands) has no digests.
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
