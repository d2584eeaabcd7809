"""Skipped ticks in the read model: every ``TickSkipped`` of a job, newest first, bounded.

A missed tick is never silent (issue 3): the fold publishes ``TickSkipped`` with a reason, and
the API keeps the last ``KEEP`` of them per job, plus how many there ever were.

Key layout (beside ``store``'s; ``\\x00`` separates parts):

    skn:<job_id>                     how many TickSkipped the job ever had (decimal)
    sk:<job_id>\\x00<slot>            one skipped tick (JSON), slot = sequence number % KEEP

The entries form a ring: the n-th skip (0-based) lives in slot ``n % KEEP``, so the newest
``KEEP`` survive without deletes, and newest-first is a walk down from ``count - 1``. The
projection's per-event dedupe marker keeps a re-delivered event from being counted twice.
"""

from __future__ import annotations

from typing import Any

from cronlog import events as ev
from cronlog.time import iso
from services.api.readmodel.store import Batch, Store

KEEP = 1000
"""Skipped ticks kept per job (older ones are overwritten; ``skipped_count`` still counts them)."""


def _count_key(job_id: str) -> bytes:
    return b"skn:" + job_id.encode()


def _slot_key(job_id: str, seq: int) -> bytes:
    return b"sk:" + job_id.encode() + b"\x00" + b"%04d" % (seq % KEEP)


def record(batch: Batch, job_id: str, event: ev.TickSkipped, at: str) -> None:
    """Store one skipped tick of ``job_id`` in ``batch``.

    Args:
        batch: the projection's write batch (reads its own writes, so several skips of one
            poll number themselves in order).
        job_id: the job whose tick was skipped.
        event: the TickSkipped event.
        at: when the fold skipped it (the event's ``at``), ISO UTC ``Z``.
    """
    raw = batch.get(_count_key(job_id))
    seq = int(raw) if raw is not None else 0
    batch.put_json(
        _slot_key(job_id, seq),
        {
            "seq": seq,
            "scheduled_for": iso(event.scheduled_for),
            "reason": event.reason.value,
            "at": at,
        },
    )
    batch.put(_count_key(job_id), b"%d" % (seq + 1))


def count(store: Store, job_id: str) -> int:
    """Return how many ticks of ``job_id`` were ever skipped (0 if none or unknown)."""
    raw = store.get(_count_key(job_id))
    return int(raw) if raw is not None else 0


def latest(store: Store, job_id: str, limit: int) -> list[dict[str, Any]]:
    """Return the newest skipped ticks of ``job_id``, newest first, at most ``min(limit, KEEP)``.

    Returns:
        ``[{scheduled_for, reason, at}]`` in the order the fold skipped them, newest first.
    """
    total = count(store, job_id)
    out = []
    for seq in range(total - 1, max(total - min(limit, KEEP), 0) - 1, -1):
        entry = store.get_json(_slot_key(job_id, seq))
        if entry is not None and entry.pop("seq") == seq:  # else overwritten since `count`
            out.append(entry)
    return out
