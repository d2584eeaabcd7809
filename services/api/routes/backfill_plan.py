"""Backfill planning: which ticks of a job in (start, end] get a run (``POST .../backfill``).

The fold keeps only active runs, so the API (whose read model keeps every run) decides which
ticks need one and sends them in one ``BackfillJob``. Ticks come from the job's current
definition with the fold's own function (``firing.schedule_tick``: Jenkins ``H`` hashed on the
job_id, the job's DST policies, ``start_at``), so cron, every and once schedules alike; ticks
after ``end_at`` and excluded ticks are not the schedule's, so they are not backfilled.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from cronlog.commands import MAX_BACKFILL_TICKS
from cronlog.exclusions import is_excluded
from cronlog.firing import schedule_tick
from cronlog.limits import MAX_BACKFILL_TASK_INSTANCES
from cronlog.model import JobSpec, Schedule
from cronlog.vocabulary import Reprocess
from services.api.readmodel.keys import run_key, tick_runs_prefix
from services.api.readmodel.store import Store
from services.api.readmodel.views import stored_definition
from services.api.shapes.definition import JobDefinition
from services.api.shapes.mapping import to_spec

MAX_SCANNED_TICKS = 100_000
"""At most this many ticks of (start, end] are looked at per request (already-run ones too)."""
REPROCESSABLE = frozenset({"failed", "cancelled"})
"""Run states that ``reprocess=failed`` runs again (when every run of the tick is in one)."""


class TooManyTicks(Exception):
    """The request would create more runs than one backfill may, or scan too many ticks."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Planned:
    """A tick that will get a run, and the runs it had before (newest first)."""

    tick: datetime
    earlier: tuple[dict[str, Any], ...]


def job_spec(doc: dict[str, Any]) -> JobSpec:
    """Return the core JobSpec of a stored job document (its DST policies included)."""
    return to_spec(JobDefinition.model_validate(stored_definition(doc)))


def job_schedule(doc: dict[str, Any]) -> Schedule:
    """Return the core Schedule of a stored job document (its DST policies included)."""
    return job_spec(doc).schedule


def most_runs(spec: JobSpec) -> int:
    """Return the most runs one backfill of job ``spec`` may start.

    ``MAX_BACKFILL_TICKS``, or fewer for a job of many tasks: the fold refuses a backfill of
    more than ``MAX_BACKFILL_TASK_INSTANCES`` task instances (``record_too_large``).
    """
    return min(MAX_BACKFILL_TICKS, MAX_BACKFILL_TASK_INSTANCES // len(spec.tasks))


def _run_cap(spec: JobSpec, max_runs: int | None) -> int:
    """Return the most runs to plan; raise ``TooManyTicks`` for a ``max_runs`` past it."""
    most = most_runs(spec)
    if max_runs is not None and max_runs > most:
        raise TooManyTicks(
            "max_runs",
            f"at most {most} for this job: each run holds its {len(spec.tasks)} tasks and a "
            f"backfill may start at most {MAX_BACKFILL_TASK_INSTANCES} task instances",
        )
    return max_runs if max_runs is not None else most


def ticks_between(
    schedule: Schedule, job_id: str, start: datetime, end: datetime
) -> Iterator[datetime]:
    """Yield the schedule's ticks in (start, end], ascending, as the fold would fire them.

    Ticks after ``end_at`` and ticks in an exclusion window are left out.
    """
    if schedule.end_at is not None:
        end = min(end, schedule.end_at)
    tick = schedule_tick(schedule, start, job_id)
    while tick is not None and tick <= end:
        if not is_excluded(schedule, tick):
            yield tick
        tick = schedule_tick(schedule, tick, job_id)


def tick_runs(store: Store, job_id: str, tick: datetime) -> list[dict[str, Any]]:
    """Return every run of ``job_id`` whose scheduled_for is ``tick`` (any trigger)."""
    runs = []
    for key, _ in store.scan(tick_runs_prefix(job_id, tick)):
        run = store.get_json(run_key(key.rsplit(b"\x00", 1)[1].decode()))
        if run is not None:
            runs.append(run)
    return runs


def wanted(runs: list[dict[str, Any]], reprocess: Reprocess) -> bool:
    """Return whether a tick whose runs are ``runs`` gets a new run under ``reprocess``."""
    if reprocess is Reprocess.ALL or not runs:
        return True
    return reprocess is Reprocess.FAILED and all(r["state"] in REPROCESSABLE for r in runs)


def plan(
    store: Store,
    doc: dict[str, Any],
    start: datetime,
    end: datetime,
    reprocess: Reprocess,
    max_runs: int | None,
    now: datetime,
) -> list[Planned]:
    """Return the ticks of (start, end] that get a run, ascending, at most ``max_runs``.

    Ticks after ``now`` or at/after the schedule's cursor are the schedule's and left out
    (the fold drops them too).

    Raises:
        TooManyTicks: more than ``most_runs`` ticks need a run and ``max_runs`` is unset
            (field ``end``), ``max_runs`` is above ``most_runs`` (field ``max_runs``), or more
            than ``MAX_SCANNED_TICKS`` ticks were looked at (field ``start``).
    """
    cursor = datetime.fromisoformat(doc["next_fire_at"]) if doc.get("next_fire_at") else None
    upper = min(end, now)
    if cursor is not None:
        upper = min(upper, cursor - timedelta(microseconds=1))
    spec = job_spec(doc)
    cap = _run_cap(spec, max_runs)
    out: list[Planned] = []
    for n, tick in enumerate(ticks_between(spec.schedule, doc["job_id"], start, upper)):
        if n >= MAX_SCANNED_TICKS:
            raise TooManyTicks(
                "start", f"(start, end] holds more than {MAX_SCANNED_TICKS} ticks; narrow the range"
            )
        runs = tick_runs(store, doc["job_id"], tick)
        if not wanted(runs, reprocess):
            continue
        if len(out) >= cap:
            if max_runs is not None:
                break
            why = "" if cap == MAX_BACKFILL_TICKS else f" (runs of {len(spec.tasks)} tasks)"
            raise TooManyTicks(
                "end",
                f"more than {cap} ticks need a run{why}; narrow the range or set max_runs",
            )
        out.append(Planned(tick, tuple(runs)))
    return out
