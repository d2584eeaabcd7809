"""Reads of the projection: the job and run documents as the API serves them."""

from __future__ import annotations

from typing import Any

from cronlog import events as ev
from services.api.projection import events_prefix, job_key, job_runs_prefix, run_key
from services.api.store import Store
from services.api.stored import load_run_event


def job_view(store: Store, doc: dict[str, Any]) -> dict[str, Any]:
    """Return the API shape of a stored job document.

    Returns:
        ``{job_id, <definition fields>, status, next_run_at, created_at, updated_at,
        deleted_at, counts: {runs, active, succeeded, failed}, last_run}``; ``next_run_at`` is
        null unless the job is active (a paused job fires nothing); ``last_run`` is a short
        summary of the newest run, or null.
    """
    last = store.get_json(run_key(doc["last_run_id"])) if doc.get("last_run_id") else None
    done = doc["succeeded"] + doc["failed"]
    return {
        "job_id": doc["job_id"],
        **doc["definition"],
        "status": doc["status"],
        "next_run_at": doc["next_fire_at"] if doc["status"] == "active" else None,
        "created_at": doc["created_at"],
        "updated_at": doc.get("updated_at"),
        "deleted_at": doc.get("deleted_at"),
        "counts": {"runs": doc["runs"], "active": doc["runs"] - done,
                   "succeeded": doc["succeeded"], "failed": doc["failed"]},
        "last_run": {k: last[k] for k in ("run_id", "scheduled_for", "state", "exit_code")}
        if last else None,
    }


def get_job(store: Store, job_id: str) -> dict[str, Any] | None:
    """Return the API shape of job ``job_id`` (deleted jobs included), or None if unknown."""
    doc = store.get_json(job_key(job_id))
    return job_view(store, doc) if doc is not None else None


def list_jobs(store: Store, status: str | None = None) -> list[dict[str, Any]]:
    """Return every job (optionally only those with ``status``), ordered by job_id."""
    docs = (store.get_json(key) for key, _ in store.scan(b"job:"))
    return [job_view(store, d) for d in docs if d and (status is None or d["status"] == status)]


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
        RunEvents in (job_id, index) order; empty if none has been applied yet.
    """
    return [load_run_event(v) for _, v in store.scan(events_prefix(idem_key, job_id))]
