"""The paged listings of runs and jobs (``GET /jobs/{job_id}/runs``, ``GET /jobs``).

Runs walk the job's run index (``jr:``, newest ``scheduled_for`` first, ties by run_id);
jobs walk ``job:`` (by job_id). Both page with ``paging``'s cursors.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from cronlog.time import to_ms
from services.api.readmodel import paging, views
from services.api.readmodel.keys import inverted_ms, job_runs_prefix, run_key
from services.api.readmodel.store import Store

RunState = Literal[
    "scheduled",
    "buffered",
    "queued",
    "ready",
    "running",
    "retrying",
    "succeeded",
    "failed",
    "cancelled",
]
"""The states of a run document (``answers.RunOut.state``)."""
RUN_POSITION = re.compile(rb"\d{13}\x00[^\x00]+")
JOB_POSITION = re.compile(rb"[^\x00]+")


@dataclass(frozen=True, slots=True)
class RunFilter:
    """Which of a job's runs a listing shows (every field None: all)."""

    state: str | None = None
    """Only runs in this state."""
    trigger: str | None = None
    """Only runs with this trigger (``schedule``, ``catchup``, ``manual``, ...)."""
    since: datetime | None = None
    """Only runs with ``scheduled_for >= since`` (aware)."""
    until: datetime | None = None
    """Only runs with ``scheduled_for < until`` (aware)."""

    def accepts(self, run: dict[str, Any]) -> bool:
        """True when ``run`` passes the state and trigger filters (the bounds are seeks)."""
        return (self.state is None or run["state"] == self.state) and (
            self.trigger is None or run["trigger"] == self.trigger
        )


def runs_page(
    store: Store,
    job_id: str,
    *,
    limit: int,
    after: bytes | None = None,
    where: RunFilter | None = None,
    lookup: Callable[[str], dict[str, Any] | None] | None = None,
) -> paging.Page:
    """Return one page of a job's runs, newest ``scheduled_for`` first, ties by run_id.

    Args:
        store: the read model's store.
        job_id: the job.
        limit: most runs.
        after: a cursor's position (``RUN_POSITION``), or None for the first page.
        where: filters; the ``since``/``until`` bounds seek in the index, no scan.
        lookup: reads a run document by run_id (default: the store's).

    Returns:
        The page (``paging.walk``); a run whose document is gone (pruned meanwhile) is left out.
    """
    where = where or RunFilter()
    read = lookup or (lambda run_id: store.get_json(run_key(run_id)))
    start = inverted_ms(to_ms(where.until) - 1) if where.until is not None else None
    stop = inverted_ms(to_ms(where.since) - 1) if where.since is not None else None

    def load(key: bytes, _value: bytes) -> dict[str, Any] | None:
        run = read(key.rsplit(b"\x00", 1)[1].decode())
        return run if run is not None and where.accepts(run) else None

    prefix = job_runs_prefix(job_id)
    return paging.walk(store, prefix, limit=limit, load=load, after=after, start=start, stop=stop)


def jobs_page(
    store: Store,
    *,
    limit: int,
    after: bytes | None = None,
    status: str | None = None,
    visible: Callable[[str], bool] | None = None,
) -> paging.Page:
    """Return one page of jobs (the API's shape, ``views.job_view``), ordered by job_id.

    Args:
        store: the read model's store.
        limit: most jobs.
        after: a cursor's position (``JOB_POSITION``: a job_id), or None for the first page.
        status: only jobs with this status.
        visible: only jobs of tenants it accepts (the caller's), or None for all.
    """

    def load(_key: bytes, value: bytes) -> dict[str, Any] | None:
        doc = json.loads(value)
        if status is not None and doc["status"] != status and status != "done":
            return None  # "done" is derived from an active job's runs (views.status_of)
        view = views.job_view(store, doc)
        if status is not None and view["status"] != status:
            return None
        return view if visible is None or visible(view["tenant"]) else None

    return paging.walk(store, b"job:", limit=limit, load=load, after=after)
