"""The dead-letter listing of the read model: one document per TaskDeadLettered.

Keys: ``dl:<job_id>\\x00<run_id>\\x00<task>`` (a task instance is dead-lettered at most once:
its last attempt). A replay run (RunScheduled ``replay_of``) is appended to the original's
``replays``. Two indexes order them newest ``dead_lettered_at`` first: ``dlt:`` (all) and
``dlj:<job_id>`` (one job's); listings walk one of them a page at a time (``paging``), from
the ``until`` bound to the ``since`` bound, and hot-history retention deletes them with their
run (``forget``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

from cronlog import events as ev
from cronlog.time import iso, to_ms
from services.api.readmodel import paging
from services.api.readmodel.keys import inverted_ms
from services.api.readmodel.store import Batch, Store

PREFIX = b"dl:"
TIME_INDEX = b"dlt:"
"""``dlt:<inverted ms>\\x00<job_id>\\x00<run_id>\\x00<task>`` → the ``dl:`` key: newest first."""


def _inverted(instant: datetime | str, plus: int = 0) -> bytes:
    """The 13-digit inverted epoch ms of ``instant`` (newest sorts first), plus ``plus``."""
    at = datetime.fromisoformat(instant) if isinstance(instant, str) else instant
    return inverted_ms(to_ms(at) - plus)


def _job_index(job_id: str) -> bytes:
    return b"dlj:" + job_id.encode() + b"\x00"


def index_keys(doc: dict[str, Any]) -> tuple[bytes, bytes]:
    """Return the two index keys (``dlt:``, ``dlj:``) of a stored dead-letter document."""
    inv = _inverted(doc["dead_lettered_at"])
    tail = b"\x00".join((inv, doc["run_id"].encode(), doc["task"].encode()))
    job = doc["job_id"].encode()
    return TIME_INDEX + tail.replace(b"\x00", b"\x00" + job + b"\x00", 1), _job_index(
        doc["job_id"]
    ) + tail


def forget(batch: Batch, job_id: str, run_id: str, task: str) -> bool:
    """Delete the dead letter of one task instance and its index keys (pruning).

    Returns:
        True if there was one.
    """
    key = dead_letter_key(job_id, run_id, task)
    doc = batch.get_json(key)
    if doc is None:
        return False
    for index in index_keys(doc):
        batch.delete(index)
    batch.delete(key)
    return True


def dead_letter_key(job_id: str, run_id: str, task: str) -> bytes:
    """Return the key of the dead-letter document of one task instance."""
    return PREFIX + job_id.encode() + b"\x00" + run_id.encode() + b"\x00" + task.encode()


def record(
    batch: Batch, record_: ev.RunEvent, event: ev.TaskDeadLettered, run: dict[str, Any] | None
) -> None:
    """Store the dead letter of ``event`` (the run document gives its tick)."""
    key = dead_letter_key(record_.job_id, event.run_id, event.task)
    old = batch.get_json(key)  # dead-lettered again after a rerun: its old index keys go
    for index in index_keys(old) if old is not None else ():
        batch.delete(index)
    doc: dict[str, Any] = {
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
    }
    batch.put_json(key, doc)
    for index in index_keys(doc):
        batch.put(index, key)


def replayed(batch: Batch, job_id: str, event: ev.RunScheduled) -> None:
    """Note a replay run on the dead letter it replays (no-op for other runs)."""
    if event.replay_of is None or not event.tasks:
        return
    key = dead_letter_key(job_id, event.replay_of, event.tasks[0])
    doc = batch.get_json(key)
    if doc is not None and event.run_id not in doc["replays"]:
        doc["replays"].append(event.run_id)
        batch.put_json(key, doc)


def count(store: Store, visible: Callable[[dict[str, Any]], bool]) -> int:
    """Return how many dead letters ``visible`` accepts (a scan of every job's)."""
    return sum(1 for key, _ in store.scan(PREFIX) if (d := store.get_json(key)) and visible(d))


def page(
    store: Store,
    job_id: str | None,
    *,
    since: datetime | None,
    until: datetime | None,
    limit: int,
    after: bytes | None = None,
    visible: Callable[[dict[str, Any]], bool] | None = None,
) -> paging.Page:
    """Return one page of dead letters, newest ``dead_lettered_at`` first, then by job_id,
    run_id and task.

    Args:
        store: the read model's store.
        job_id: only this job's (its own index, ``dlj:``), or None for all (``dlt:``).
        since, until: aware instants; ``since <= dead_lettered_at < until`` (None: unbounded).
        limit: most documents returned.
        after: the position of a cursor (``position_shape(job_id)``), or None for the first page.
        visible: only documents it accepts (the caller's tenant's), or None for all.

    Returns:
        The page (``paging.walk``): its ``next_position`` is None at the end.
    """
    prefix = _job_index(job_id) if job_id is not None else TIME_INDEX
    start = _inverted(until, 1) if until is not None else None
    stop = _inverted(since, 1) if since is not None else None

    def load(_key: bytes, value: bytes) -> dict[str, Any] | None:
        doc = store.get_json(value)
        return doc if doc is not None and (visible is None or visible(doc)) else None

    return paging.walk(store, prefix, limit=limit, load=load, after=after, start=start, stop=stop)


def cursor_scope(job_id: str | None) -> str:
    """Return the cursor scope of a listing of ``job_id``'s dead letters (or all)."""
    return f"job:{job_id}" if job_id is not None else "all"


def position_shape(job_id: str | None) -> re.Pattern[bytes]:
    """Return the shape of a position in the index a listing of ``job_id`` (or all) walks."""
    return _JOB_POSITION if job_id is not None else _ALL_POSITION


_ALL_POSITION = re.compile(rb"\d{13}\x00[^\x00]+\x00[^\x00]+\x00[^\x00]+")
_JOB_POSITION = re.compile(rb"\d{13}\x00[^\x00]+\x00[^\x00]+")
