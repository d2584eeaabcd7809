"""Reads of the projection: the job and run documents as the API serves them."""

from __future__ import annotations

from datetime import datetime, timedelta
from itertools import islice
from typing import Any

from cronlog import events as ev
from cronlog.model import DstGapPolicy, DstOverlapPolicy, ScheduleKind
from cronlog.schedule import cron_ticks, every_tick, zone
from cronlog.tenants import DEFAULT_TENANT
from cronlog.time import iso
from services.api.readmodel import skips
from services.api.readmodel.event_json import load_run_event
from services.api.readmodel.keys import job_key, job_runs_prefix, run_key
from services.api.readmodel.projection import events_prefix
from services.api.readmodel.store import Store


def job_view(store: Store, doc: dict[str, Any]) -> dict[str, Any]:
    """Return the API shape of a stored job document.

    Returns:
        ``{job_id, tenant, <definition fields>, status, next_run_at, created_at, updated_at,
        deleted_at, counts: {runs, active, queued, succeeded, failed, cancelled}, last_run,
        skipped_count, runs_remaining}``;
        ``counts.queued`` is how many runs wait for a slot under ``max_active_runs`` (state
        ``queued``); ``counts.active`` those started (or buffered) and not ended;
        ``next_run_at`` is null unless the job is active (a paused job fires nothing);
        ``last_run`` is a short summary of the newest run, or null; ``skipped_count`` is how
        many of its ticks were ever skipped (TickSkipped); ``runs_remaining`` is what is left
        of the schedule's ``max_runs`` (null when unbounded).
    """
    last = store.get_json(run_key(doc["last_run_id"])) if doc.get("last_run_id") else None
    cancelled, queued = doc.get("cancelled", 0), doc.get("queued", 0)
    done = doc["succeeded"] + doc["failed"]
    definition = stored_definition(doc)
    return {
        "job_id": doc["job_id"],
        "tenant": doc.get("tenant", DEFAULT_TENANT),
        **definition,
        "status": status_of(doc, definition, active=doc["runs"] - done),
        "next_run_at": doc["next_fire_at"] if doc["status"] == "active" else None,
        "created_at": doc["created_at"],
        "updated_at": doc.get("updated_at"),
        "deleted_at": doc.get("deleted_at"),
        "counts": {
            "runs": doc["runs"],
            "active": doc["runs"] - done - queued,
            "queued": queued,
            "succeeded": doc["succeeded"],
            "failed": doc["failed"] - cancelled,
            "cancelled": cancelled,
        },
        "last_run": {k: last[k] for k in ("run_id", "scheduled_for", "state", "exit_code")}
        if last
        else None,
        "skipped_count": skips.count(store, doc["job_id"]),
        "runs_remaining": doc.get("runs_remaining"),
        "suspended": doc.get("suspended"),
        "slots": _slots(doc),
    }


def status_of(doc: dict[str, Any], definition: dict[str, Any], *, active: int) -> str:
    """Return a stored job's status: its own (``active``, ``paused``, ``deleted``), or
    ``done`` for an active job whose schedule will fire no more (a ``once`` job that fired, a
    job whose ``max_runs`` are spent) once its last run ended (``active``: runs not ended,
    queued ones included)."""
    spent = definition["schedule"]["type"] == "once" or doc.get("runs_remaining") == 0
    fired = doc["runs"] > 0 and doc.get("next_fire_at") is None
    status: str = doc["status"]
    return "done" if status == "active" and spent and fired and active == 0 else status


def _slots(doc: dict[str, Any]) -> dict[str, int] | None:
    """Return a ledger tenant's job's slots (held, waiting), None for the default tenant."""
    if doc.get("tenant", DEFAULT_TENANT) == DEFAULT_TENANT:
        return None
    return {"held": doc.get("slots_held", 0), "waiting": doc.get("slots_waiting", 0)}


def stored_definition(doc: dict[str, Any]) -> dict[str, Any]:
    """Return the definition (the API's JSON shape) of a stored job document.

    Documents projected before the definition carried ``dst_gap``/``dst_overlap`` kept them
    beside it (``dst_policy``); they are merged in, so a PATCH does not reset them.
    """
    definition: dict[str, Any] = doc["definition"]
    if "dst_policy" not in doc:
        return definition
    return {**definition, "schedule": {**doc["dst_policy"], **definition["schedule"]}}


def get_job(store: Store, job_id: str) -> dict[str, Any] | None:
    """Return the API shape of job ``job_id`` (deleted jobs included), or None if unknown."""
    doc = store.get_json(job_key(job_id))
    return job_view(store, doc) if doc is not None else None


def list_jobs(store: Store, status: str | None = None) -> list[dict[str, Any]]:
    """Return every job (optionally only those with ``status``), ordered by job_id."""
    docs = (store.get_json(key) for key, _ in store.scan(b"job:"))
    views = (job_view(store, d) for d in docs if d)
    return [v for v in views if status is None or v["status"] == status]


def get_run(store: Store, run_id: str) -> dict[str, Any] | None:
    """Return run ``run_id`` (see ``projection._run_scheduled`` for its fields), or None."""
    return store.get_json(run_key(run_id))


def list_runs(store: Store, job_id: str, limit: int) -> list[dict[str, Any]]:
    """Return a job's runs, newest ``scheduled_for`` first, at most ``limit``; empty if none."""
    runs = []
    for key, _ in store.scan(job_runs_prefix(job_id), limit=limit):
        run = store.get_json(run_key(key.rsplit(b"\x00", 1)[1].decode()))
        if run is not None:
            runs.append(run)
    return runs


def events_for(store: Store, idem_key: str, job_id: str | None = None) -> list[ev.RunEvent]:
    """Return the events the command ``idem_key`` caused (for ``job_id``, or any job).

    Returns:
        RunEvents in (job_id, index) order; empty if none has been applied yet. The refusal of
        another command that re-used the key (``projection.is_conflict``) is among them,
        after the event of the same index.
    """
    return [load_run_event(v) for _, v in store.scan(events_prefix(idem_key, job_id))]


def list_skipped(store: Store, job_id: str, limit: int) -> list[dict[str, Any]]:
    """Return a job's skipped ticks ``{scheduled_for, reason, at}``, newest first (see skips)."""
    return skips.latest(store, job_id, limit)


def tick(instant: datetime, tz: str) -> dict[str, str]:
    """Return a tick as previews show it: ``{utc: ISO Z, local: ISO with the zone's offset}``."""
    return {
        "utc": iso(instant),
        "local": instant.astimezone(zone(tz)).isoformat(timespec="milliseconds"),
    }


def preview(doc: dict[str, Any], after: datetime, count: int) -> list[dict[str, str]]:
    """Return the next ``count`` ticks of a stored job strictly after ``after``.

    Computed from the job's current definition with the core's schedule functions, as the
    fold computes them: Jenkins ``H`` hashed on the job_id, the job's DST policies.

    Args:
        doc: the stored job document (``projection``'s ``job:<job_id>``).
        after: an aware instant, exclusive.
        count: at most this many ticks.

    Returns:
        ``[{utc, local}]`` ascending: a cron job's ticks (fewer only if none exists within a
        century); an every job's (``anchor_at + k * interval_s``, as the fold's
        ``every_tick``); a once job's ``run_at`` if it is after ``after``; nothing for a manual job
        or a deleted one. A paused job's ticks are shown: they are what it fires once resumed.
    """
    schedule = stored_definition(doc)["schedule"]
    if doc["status"] == "deleted":
        return []
    tz = schedule.get("timezone") or "UTC"
    if schedule["type"] == ScheduleKind.ONCE.value and schedule.get("run_at"):
        run_at = datetime.fromisoformat(schedule["run_at"])
        return [tick(run_at, tz)] if run_at > after and count > 0 else []
    if schedule["type"] == ScheduleKind.EVERY.value and schedule.get("interval_s"):
        return [tick(t, tz) for t in _every_ticks(schedule, after, count)]
    if schedule["type"] != ScheduleKind.CRON.value or not schedule.get("expression"):
        return []
    ticks = cron_ticks(
        schedule["expression"],
        tz,
        after,
        hash_id=doc["job_id"],
        dst_gap=DstGapPolicy(schedule.get("dst_gap") or "shift"),
        dst_overlap=DstOverlapPolicy(schedule.get("dst_overlap") or "first"),
    )
    return [tick(t, tz) for t in islice(ticks, count)]


def _every_ticks(schedule: dict[str, Any], after: datetime, count: int) -> list[datetime]:
    interval = timedelta(seconds=schedule["interval_s"])
    anchor = datetime.fromisoformat(schedule["anchor_at"]) if schedule.get("anchor_at") else None
    ticks: list[datetime] = []
    for _ in range(count):
        after = every_tick(interval, anchor, after)
        ticks.append(after)
    return ticks
