"""The dead-letter listing of the read model: one document per TaskDeadLettered.

Keys: ``dl:<job_id>\\x00<run_id>\\x00<task>`` (a task instance is dead-lettered at most once:
its last attempt). A replay run (RunScheduled ``replay_of``) is appended to the original's
``replays``. Listing scans one job's prefix, or every job's for an unfiltered request, and
filters by ``dead_lettered_at``; the listing is bounded by ``limit``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from cronlog import events as ev
from cronlog.time import iso
from services.api.store import Batch, Store

PREFIX = b"dl:"


def dead_letter_key(job_id: str, run_id: str, task: str) -> bytes:
    """Return the key of the dead-letter document of one task instance."""
    return PREFIX + job_id.encode() + b"\x00" + run_id.encode() + b"\x00" + task.encode()


def record(
    batch: Batch, record_: ev.RunEvent, event: ev.TaskDeadLettered, run: dict[str, Any] | None
) -> None:
    """Store the dead letter of ``event`` (the run document gives its tick)."""
    key = dead_letter_key(record_.job_id, event.run_id, event.task)
    batch.put_json(
        key,
        {
            "job_id": record_.job_id,
            "run_id": event.run_id,
            "task": event.task,
            "attempt": event.attempt,
            "failure_kind": event.failure_kind.value,
            "exit_code": event.exit_code,
            "output_tail": event.output_tail,
            "scheduled_for": run["scheduled_for"] if run else None,
            "dead_lettered_at": iso(record_.at),
            "replays": [],
        },
    )


def replayed(batch: Batch, job_id: str, event: ev.RunScheduled) -> None:
    """Note a replay run on the dead letter it replays (no-op for other runs)."""
    if event.replay_of is None or not event.tasks:
        return
    key = dead_letter_key(job_id, event.replay_of, event.tasks[0])
    doc = batch.get_json(key)
    if doc is not None and event.run_id not in doc["replays"]:
        doc["replays"].append(event.run_id)
        batch.put_json(key, doc)


def listing(
    store: Store,
    job_id: str | None,
    since: datetime | None,
    until: datetime | None,
    limit: int,
    visible: Callable[[dict[str, Any]], bool] | None = None,
) -> list[dict[str, Any]]:
    """Return dead letters, newest ``dead_lettered_at`` first, at most ``limit``.

    Args:
        store: the read model's store.
        job_id: only this job's, or None for all.
        since, until: aware instants; ``since <= dead_lettered_at < until`` (None: unbounded).
        limit: most documents returned.
        visible: only documents it accepts (the caller's tenant's), or None for all.
    """
    prefix = PREFIX + job_id.encode() + b"\x00" if job_id is not None else PREFIX
    lo = iso(since) if since is not None else None
    hi = iso(until) if until is not None else None
    docs = []
    for key, _ in store.scan(prefix):
        doc = store.get_json(key)
        if doc is None:
            continue
        at = doc["dead_lettered_at"]
        if (
            (lo is None or at >= lo)
            and (hi is None or at < hi)
            and (visible is None or visible(doc))
        ):
            docs.append(doc)
    docs.sort(key=lambda d: (d["dead_lettered_at"], d["run_id"], d["task"]), reverse=True)
    return docs[:limit]
