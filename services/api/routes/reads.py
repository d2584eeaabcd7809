"""The read routes of jobs and runs: the jobs, a job, its runs, ticks and skipped ticks, a run.

Answers come from the read model (``services/api/readmodel``), filtered by the caller's tenant
(``services/api/access/scope.py``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request

from cronlog.vocabulary import RunTrigger
from services.api.access.auth import Caller, principal
from services.api.access.scope import visible_job, visible_run
from services.api.readmodel import listings, paging
from services.api.readmodel.paging import LIMIT_DOC, MAX_PAGE, Cursor
from services.api.readmodel.reader import ReadModel
from services.api.shapes.definition import Instant
from services.api.shapes.responses import (
    JobList,
    JobOut,
    RunList,
    RunOut,
    SkippedList,
    TickList,
    documented,
)

router = APIRouter(prefix="/api/v1", dependencies=[Depends(principal)])


def read_model(request: Request) -> ReadModel:
    """Return the app's read model.

    Raises:
        HTTPException: 503 while it is not running (an app built without its lifespan).
    """
    rm: ReadModel | None = request.app.state.read_model
    if rm is None:
        raise HTTPException(503, "the read model is not running")
    return rm


@router.get("/jobs", response_model=JobList, responses=documented(503))
def list_jobs(
    request: Request,
    caller: Caller,
    status: Annotated[str | None, Query(pattern="^(active|paused|deleted|done)$")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description=LIMIT_DOC)] = 100,
    cursor: Cursor = None,
) -> Any:
    """The caller's tenant's jobs (deleted ones included, with ``status: deleted``), ordered by
    job_id, a page at a time: ``next_cursor`` (null on the last page) goes in ``cursor``."""
    rm = read_model(request)
    after = paging.position_of(cursor, "jobs", "", listings.JOB_POSITION)
    page = listings.jobs_page(
        rm.store, limit=limit, after=after, status=status, visible=caller.sees
    )
    return {"jobs": page.rows, "next_cursor": paging.next_cursor(page, "jobs", "")}


@router.get("/jobs/{job_id}", response_model=JobOut, responses=documented(404, 503))
def get_job(job_id: str, request: Request, caller: Caller) -> Any:
    """One job: definition, status, next_run_at, counts, last run."""
    return visible_job(read_model(request), caller, job_id)


@router.get("/jobs/{job_id}/runs", response_model=RunList, responses=documented(404, 503))
def list_runs(
    job_id: str,
    request: Request,
    caller: Caller,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description=LIMIT_DOC)] = 20,
    cursor: Cursor = None,
    state: Annotated[
        listings.RunState | None, Query(description="Only runs in this state.")
    ] = None,
    trigger: Annotated[RunTrigger | None, Query(description="Only runs this started.")] = None,
    since: Annotated[Instant | None, Query(description="scheduled_for at or after.")] = None,
    until: Annotated[Instant | None, Query(description="scheduled_for before.")] = None,
) -> Any:
    """A job's runs, newest scheduled_for first (ties by run_id), a page of at most ``limit``
    at a time: ``next_cursor`` (null on the last page) goes in ``cursor``. Filters: ``state``,
    ``trigger``, ``since <= scheduled_for < until`` (ISO-8601 with an offset). A filtered page
    may hold fewer than ``limit`` runs and still carry a ``next_cursor``. Runs pruned by the hot
    history retention (``CRONLOG_HISTORY_HOT_DAYS``) are not listed."""
    rm = read_model(request)
    visible_job(rm, caller, job_id)
    after = paging.position_of(cursor, "runs", job_id, listings.RUN_POSITION)
    where = listings.RunFilter(
        state=state, trigger=trigger.value if trigger else None, since=since, until=until
    )
    page = listings.runs_page(rm.store, job_id, limit=limit, after=after, where=where)
    return {
        "job_id": job_id,
        "runs": page.rows,
        "next_cursor": paging.next_cursor(page, "runs", job_id),
    }


@router.get("/jobs/{job_id}/ticks", response_model=TickList, responses=documented(404, 503))
def list_ticks(
    job_id: str,
    request: Request,
    caller: Caller,
    count: Annotated[int, Query(ge=1, le=1000)] = 10,
    after: Annotated[Instant | None, Query()] = None,
) -> Any:
    """Preview: the job's next ``count`` ticks strictly after ``after`` (default: now).

    Computed from the job's current definition with the scheduler's own functions (``H``
    hashed on the job_id, the job's DST policies), each as ``{utc, local}`` where ``local``
    is the wall time in the job's zone with its offset. A once job previews its ``run_at`` if
    after ``after``; manual and deleted jobs preview nothing; a paused job's ticks are shown.
    """
    rm = read_model(request)
    visible_job(rm, caller, job_id)
    ticks = rm.ticks(job_id, after or datetime.now(UTC), count)
    if ticks is None:
        raise HTTPException(404, f"job {job_id!r} not found")
    return {"job_id": job_id, "ticks": ticks}


@router.get("/jobs/{job_id}/skipped", response_model=SkippedList, responses=documented(404, 503))
def list_skipped(
    job_id: str,
    request: Request,
    caller: Caller,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Any:
    """A job's skipped ticks (TickSkipped: scheduled_for, reason, at), newest first."""
    rm = read_model(request)
    visible_job(rm, caller, job_id)
    return {"job_id": job_id, "skipped": rm.skipped(job_id, limit)}


@router.get("/runs/{run_id}", response_model=RunOut, responses=documented(404, 503))
def get_run(run_id: str, request: Request, caller: Caller) -> Any:
    """One run: state, attempt, lease, exit code, output tail, timings, trigger lag."""
    return visible_run(read_model(request), caller, run_id)
