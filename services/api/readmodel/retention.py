"""Hot-history retention of the read model: the time indexes the projection keeps, and one
pruning step over them (``prune``); ``pruner.HistoryPruner`` runs the steps in a thread.

Time here is the run-events' own: ``meta:newest`` is the newest ``at`` the projection applied,
and a row is old when it is older than that minus the hot window (docs: README "History
retention"). No wall clock is read, so a read model rebuilt from offset 0 prunes as it goes,
exactly as the live one did.

Keys (beside ``store``'s):

    meta:newest                  newest applied run-event ``at``, epoch ms (decimal)
    evt:<ms %013d>\\x00<event_id>  every applied event by its ``at`` (value: its ``ev:`` key)
    end:<ms %013d>\\x00<run_id>    every ended run by its end (``finished_at``, else
                                 ``scheduled_for``; value: its job_id); a live run has none,
                                 so a live run is never pruned

Pruning an ended run deletes its document, its entry in the job's run index, its dead letters
and its task-log copies (the log store's ``lg:``/``lm:`` rows); pruning an event deletes its
``ev:`` copy and its ``eid:`` dedupe marker (the fold re-delivers an event only right after a
crash, well within any window). The job document and its counts stay.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cronlog import events as ev
from cronlog.time import to_ms
from services.api.readmodel import dead_letters
from services.api.readmodel.keys import MAX_MS, run_key, tick_runs_prefix
from services.api.readmodel.store import Batch, Store

NEWEST = b"meta:newest"
EVENTS = b"evt:"
ENDED = b"end:"
TERMINAL = frozenset({"succeeded", "failed", "cancelled"})
"""Run states after which a run may be pruned (``projection.TERMINAL_RUN_STATES``)."""

ArchiveLookup = Callable[[str], dict[str, Any] | None]
"""Where a run no longer in the read model may be found: ``run_id`` → its document, or None.

The hook the cold archive plugs into (``ReadModel.archived``); none is built yet."""


def no_archive(_run_id: str) -> dict[str, Any] | None:
    """The default ``ArchiveLookup``: there is no archive, a pruned run is not found."""
    return None


def saw(batch: Batch, record: ev.RunEvent, event_key: bytes) -> None:
    """Index an applied event by its ``at`` and move ``meta:newest`` forward.

    Args:
        batch: the projection's batch.
        record: the applied run-event.
        event_key: the key its copy is kept under (``ev:``).
    """
    at_ms = to_ms(record.at)
    batch.put(EVENTS + b"%013d\x00" % at_ms + record.event_id.encode(), event_key)
    newest = batch.get(NEWEST)
    if newest is None or int(newest) < at_ms:
        batch.put(NEWEST, b"%d" % at_ms)


def newest_ms(store: Store) -> int | None:
    """Return the newest applied run-event ``at``, epoch ms, or None before the first."""
    raw = store.get(NEWEST)
    return int(raw) if raw is not None else None


def end_key(run: dict[str, Any]) -> bytes:
    """Return the ``end:`` key of an ended run document."""
    end = datetime.fromisoformat(run["finished_at"] or run["scheduled_for"])
    run_id: str = run["run_id"]
    return ENDED + b"%013d\x00" % min(max(to_ms(end), 0), MAX_MS) + run_id.encode()


def track_run(batch: Batch, run_key: bytes) -> None:
    """Index the run at ``run_key`` by its end once it has ended (after the projection).

    Idempotency: an ended run's ``finished_at`` no longer changes, so the key is the same.
    """
    run = batch.peek_json(run_key)
    if run is not None and run["state"] in TERMINAL:
        batch.put(end_key(run), run["job_id"].encode())


def reopened(batch: Batch, run: dict[str, Any]) -> None:
    """Drop an ended run's ``end:`` key before a rerun reopens it (live again: kept)."""
    if run["state"] in TERMINAL:
        batch.delete(end_key(run))


@dataclass(slots=True)
class Pruned:
    """What one pruning step deleted (``cronlog_history_pruned_total`` by ``kind``)."""

    runs: int = 0
    dead_letters: int = 0
    events: int = 0
    log_rows: int = 0
    more: bool = False
    """True when the step stopped at its batch size with old rows left."""

    def add(self, other: Pruned) -> None:
        """Add ``other``'s counts to these (``more`` is the latest step's)."""
        self.runs += other.runs
        self.dead_letters += other.dead_letters
        self.events += other.events
        self.log_rows += other.log_rows
        self.more = other.more


def prune(store: Store, cutoff_ms: int, batch_size: int, logs: Store | None = None) -> Pruned:
    """Delete at most ``batch_size`` ended runs and ``batch_size`` events older than the cutoff.

    Args:
        store: the read model's store (the caller holds its write lock: no apply in between).
        cutoff_ms: epoch ms; runs that ended before it, and events whose ``at`` is before it,
            go.
        batch_size: most runs, and most events, deleted in this step (one write batch each).
        logs: the task-log store whose rows of pruned runs go too, or None.

    Returns:
        The counts; ``more`` says whether old rows remain (call again).
    """
    out, batch = Pruned(), Batch(store)
    log_keys: list[bytes] = []
    for key, value in _older(store, ENDED, cutoff_ms, batch_size, out):
        batch.delete(key)
        run_id = key.split(b"\x00", 1)[1].decode()
        if _forget_run(batch, value.decode(), run_id, out):
            log_keys += _log_keys(logs, run_id)
    for key, value in _older(store, EVENTS, cutoff_ms, batch_size, out):
        batch.delete(key)
        batch.delete(value)
        batch.delete(b"eid:" + key.split(b"\x00", 1)[1])
        out.events += 1
    batch.commit()
    if logs is not None and log_keys:
        logs.write(dict.fromkeys(log_keys))
        out.log_rows = len(log_keys)
    return out


def _older(
    store: Store, index: bytes, cutoff_ms: int, batch_size: int, out: Pruned
) -> Iterator[tuple[bytes, bytes]]:
    """The first ``batch_size`` rows of the time index ``index`` (keys ``index`` + epoch ms
    %013d) before ``cutoff_ms``; sets ``out.more`` when older rows remain past them."""
    stop = index + b"%013d" % max(cutoff_ms, 0)
    for n, (key, value) in enumerate(store.scan(index)):
        if key >= stop:
            return
        if n >= batch_size:
            out.more = True
            return
        yield key, value


def _forget_run(batch: Batch, job_id: str, run_id: str, out: Pruned) -> bool:
    run = batch.get_json(run_key(run_id))
    if run is None or run["state"] not in TERMINAL:
        return False  # a stale index key (reopened since, or gone): only the key goes
    scheduled_for = datetime.fromisoformat(run["scheduled_for"])
    batch.delete(run_key(run_id))
    batch.delete(tick_runs_prefix(job_id, scheduled_for) + run_id.encode())
    tasks = {t["task"] for t in run.get("task_instances", [])} | set(run.get("tasks", []))
    out.dead_letters += sum(dead_letters.forget(batch, job_id, run_id, t) for t in sorted(tasks))
    out.runs += 1
    return True


def _log_keys(logs: Store | None, run_id: str) -> list[bytes]:
    if logs is None:
        return []
    prefix = run_id.encode() + b"\x00"
    return [k for p in (b"lg:", b"lm:") for k, _ in logs.scan(p + prefix)]
