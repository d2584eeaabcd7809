"""Serialisation of a job's table record (``JobState``) to bytes and back.

JSON through pydantic's TypeAdapter: deterministic for a given state, readable when debugging.
The format is versioned by a leading tag (``v3:``); a change of meaning gets a new tag, and the
reader keeps reading the older tags it knows (or the store is rebuilt from the log), never
reinterpreting old bytes. A new field with a default keeps the tag: old records load with the
default, which must mean what those records meant.

``v3`` (issue 23): the definition has one shape: its tasks are in ``spec.task_specs`` (a
one-task job's one, named ``main``), and ``spec`` no longer has the job-level ``command``,
``kind``, ``shell``, ``callable``, ``http``, ``isolation`` and ``tasks``. A ``v2`` (or ``v1``)
record is still read: its ``spec`` is upcast exactly as an old Avro definition is
(``cronlog.job_level.upcast``: a spec without ``task_specs`` gets one TaskSpec per
name of its ``tasks``, running the job-level task), so a store or a changelog written before
is restored as it was meant. A ``v2`` record keeps its bytes until the fold next changes the
job (then it is written as ``v3``). A process that knows only ``v2`` cannot read a ``v3``
record (``StateDecodeError``): no downgrade past it.

``v2`` (issue 11): the dedupe markers ``applied`` and ``renewals`` hold
``cronlog.ids.idem_marker(idem_key)`` (32 hex digits), no longer the idem_keys themselves, so a
producer's long keys (up to 512 characters, 6 bytes each in JSON) cannot fill the record until
every command to the job is refused ``record_too_large``. A ``v1`` record is still read: its
markers are raw idem_keys, and each becomes ``idem_marker`` of itself on load, which is exactly
the marker ``v2`` would have kept (dedupe and conflict checks see no difference).

Changes within ``v1`` (kept by ``v2`` and ``v3``):

- ``applied_digests`` (issue 11): the ``command_digest`` of each user command marker in
  ``applied``, aligned with the end of ``applied`` (``JobState``), so a key re-used by another
  command is refused (``idempotency_conflict``) instead of dropped. A parallel field rather
  than ``applied`` of ``(idem_key, digest)`` pairs: ``applied`` keeps its type, so old records
  load as they are; their markers have no digest (fewer digests than markers) and get no
  conflict check until they leave the window. A process without the field drops it on its
  next write of the record (pydantic ignores unknown fields), which again only means "no
  digest". ``renewals`` (worker commands) has no digests.
"""

from __future__ import annotations

import json
from dataclasses import replace

from pydantic import TypeAdapter

from cronlog.errors import CronlogError
from cronlog.ids import idem_marker
from cronlog.job import JobState
from cronlog.job_level import JobLevelTask, upcast
from cronlog.ledger import LedgerState

WORST_CHAR = "\x01"
"""The character whose stored form is longest: a control character, which JSON writes as a
6-byte ``\\u`` escape (a 4-byte UTF-8 character takes 4, ``"`` and ``\\`` take 2). Worst-case
estimates of a record (``services/api/shapes/record_budget.py``) fill free text with it."""
_TAG = b"v3:"
_V2 = b"v2:"
_V1 = b"v1:"
_ADAPTER: TypeAdapter[JobState] = TypeAdapter(JobState)
_LEGACY: TypeAdapter[JobLevelTask] = TypeAdapter(JobLevelTask)
_LEDGER_TAG = b"l1:"
_LEDGER: TypeAdapter[LedgerState] = TypeAdapter(LedgerState)


class StateDecodeError(CronlogError):
    """A stored job record could not be read (wrong version tag or corrupt bytes)."""


def dump_state(state: JobState) -> bytes:
    """Return the stored form of ``state`` (``v3:`` + JSON)."""
    return _TAG + _ADAPTER.dump_json(state)


def load_state(data: bytes) -> JobState:
    """Return the JobState stored as ``data`` (a ``v3``, ``v2`` or ``v1`` record).

    Raises:
        StateDecodeError: unknown version tag or invalid content.
    """
    tag = data[: len(_TAG)]
    if tag not in (_TAG, _V2, _V1):
        raise StateDecodeError(f"job record has unknown version tag {data[:8]!r}")
    body = data[len(tag) :]
    try:
        state = _ADAPTER.validate_json(body)
        if tag != _TAG:  # the old shape of the definition: its job-level fields, then upcast
            old = _LEGACY.validate_python(json.loads(body)["spec"])
            state = replace(state, spec=upcast(state.spec, old))
    except ValueError as exc:
        raise StateDecodeError(f"corrupt job record: {exc}") from exc
    return _from_v1(state) if tag == _V1 else state


def is_current(data: bytes) -> bool:
    """Return whether a stored job record is of the format ``dump_state`` writes (``v3``)."""
    return data[: len(_TAG)] == _TAG


def _from_v1(state: JobState) -> JobState:
    """Return a ``v1`` record's state with its idem_keys turned into ``v2`` markers."""
    return replace(
        state,
        applied=tuple(map(idem_marker, state.applied)),
        renewals=tuple(map(idem_marker, state.renewals)),
    )


def is_ledger(data: bytes) -> bool:
    """Return whether a stored record is the tenant ledger's (``cronlog.ledger``), not a job's."""
    return data[: len(_LEDGER_TAG)] == _LEDGER_TAG


def dump_ledger(state: LedgerState) -> bytes:
    """Return the stored form of the tenant ledger (``l1:`` + JSON)."""
    return _LEDGER_TAG + _LEDGER.dump_json(state)


def load_ledger(data: bytes) -> LedgerState:
    """Return the tenant ledger stored as ``data``.

    Raises:
        StateDecodeError: not an ``l1`` record, or invalid content.
    """
    if not is_ledger(data):
        raise StateDecodeError(f"tenant ledger record has unknown version tag {data[:8]!r}")
    try:
        return _LEDGER.validate_json(data[len(_LEDGER_TAG) :])
    except ValueError as exc:
        raise StateDecodeError(f"corrupt tenant ledger record: {exc}") from exc
