"""Operator endpoints: cancel a run or a task, list and replay dead letters.

Each write answers after read-your-writes like ``writes`` does: the effect event → 200,
``CommandRejected`` → 404/409, no event in time → 202.
"""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, Field

from cronlog import commands as cmd
from cronlog.ids import run_id_for_replay, step_idem_key
from services.api.access import idempotency
from services.api.access.auth import Caller, Role, principal, require
from services.api.access.scope import job_tenant, sees_job, visible_job, visible_run
from services.api.readmodel import dead_letters, paging
from services.api.readmodel.paging import Cursor, PageLimit
from services.api.readmodel.reader import ReadModel
from services.api.readmodel.run_changes import TERMINAL_RUN_STATES
from services.api.routes.reads import read_model
from services.api.routes.writes import IdemKey, _accepted, _check, _command, _invalid
from services.api.shapes.definition import Instant
from services.api.shapes.responses import RunOut, documented

router = APIRouter(prefix="/api/v1", dependencies=[Depends(principal), Depends(idempotency.guard)])
_ANSWERS = documented(400, 404, 409, 413, 503, accepted=True)
MAX_REPLAYS = 100
"""At most this many dead letters are replayed per request."""


class CancelIn(BaseModel):
    """``POST /runs/{run_id}/cancel``: the whole run, or only ``task``."""

    task: str | None = Field(default=None, min_length=1, max_length=200)


class RerunIn(BaseModel):
    """``POST /runs/{run_id}/tasks/{task}/retry``: also reset everything downstream?"""

    downstream: bool = False


class DeadLetterOut(BaseModel):
    """A task instance whose last attempt failed (TaskDeadLettered)."""

    job_id: str
    run_id: str
    task: str
    attempt: int
    failure_kind: str
    exit_code: int | None
    output_tail: str
    scheduled_for: str | None
    dead_lettered_at: str
    replays: list[str]
    """Runs started by replays of it, oldest first."""


class DeadLetterList(BaseModel):
    """``GET /dead-letters``: one page, newest dead_lettered_at first, ties by job_id, run_id,
    task."""

    dead_letters: list[DeadLetterOut]
    next_cursor: str | None = None
    """Pass as ``cursor`` for the next page; null when this page is the last."""


class ReplayIn(BaseModel):
    """``POST /dead-letters/replay``: one task instance (``run_id`` + ``task``), one job's
    dead letters (``job_id``), or those in ``[since, until)`` (with or without ``job_id``)."""

    run_id: str | None = None
    task: str | None = None
    job_id: str | None = None
    since: Instant | None = None
    until: Instant | None = None
    cursor: str | None = Field(default=None, max_length=2048)
    """A selection by job_id or since/until: continue after this (the ``next_cursor`` of the
    previous answer)."""


class Replayed(BaseModel):
    """One replay: the dead letter and the new run that runs it again."""

    job_id: str
    run_id: str
    task: str
    replay_run_id: str


class ReplayList(BaseModel):
    """``POST /dead-letters/replay``'s answer."""

    replays: list[Replayed]
    replayed: int = 0
    """How many dead letters this request replayed (``len(replays)``)."""
    next_cursor: str | None = None
    """The selection had more than one request replays (``MAX_REPLAYS``): send the same body
    with this ``cursor`` to replay the next ones; null when every selected one was replayed."""


def _tenant(rm: ReadModel, job_id: str) -> str:
    tenant = job_tenant(rm, job_id)
    if tenant is None:  # a run whose job the read model lost: nothing to act for
        raise HTTPException(404, f"job {job_id!r} not found")
    return tenant


@router.post(
    "/runs/{run_id}/cancel",
    response_model=RunOut,
    responses=_ANSWERS,
    dependencies=[require(Role.OPERATOR)],
)
async def cancel_run(
    run_id: str,
    request: Request,
    caller: Caller,
    body: CancelIn | None = None,
    idempotency_key: IdemKey = None,
) -> Any:
    """Cancel a run (RunCancelled) or one of its tasks (TaskCancelled) → the run.

    A queued run (waiting for a slot under ``max_active_runs``) is cancelled as a whole: it
    leaves the queue and never starts. 404: unknown run (or task); 409: the run (or task)
    already ended, or a task of a queued run (it has no task instances yet). The holding
    worker stops the task at its next lease renewal.
    """
    rm = read_model(request)
    task = body.task if body is not None else None
    run = visible_run(rm, caller, run_id)
    if task is not None and run["state"] == "queued":
        raise HTTPException(409, f"run {run_id!r} is queued: cancel the whole run")
    if task is not None and task not in run["tasks"]:
        raise HTTPException(404, f"run {run_id!r} has no task {task!r}")
    idem_key = idempotency_key or str(uuid.uuid4())
    if run["state"] in TERMINAL_RUN_STATES and not rm.events_for(idem_key, run["job_id"]):
        raise HTTPException(409, f"run {run_id!r} already ended ({run['state']})")
    events = await _command(
        request,
        run["job_id"],
        idem_key,
        cmd.CancelRun(run_id=run_id, task=task),
        _tenant(rm, run["job_id"]),
    )
    if not events:
        return _accepted(run["job_id"], idem_key, f"/api/v1/runs/{run_id}", run_id)
    _check(events)
    return rm.run(run_id)


@router.post(
    "/runs/{run_id}/tasks/{task}/retry",
    response_model=RunOut,
    responses=_ANSWERS,
    dependencies=[require(Role.OPERATOR)],
)
async def rerun_task(
    run_id: str,
    task: str,
    request: Request,
    caller: Caller,
    body: RerunIn | None = None,
    idempotency_key: IdemKey = None,
) -> Any:
    """Run a task of a run again (RerunTask), with ``downstream: true`` everything below it
    too: a new attempt series in the same run, reopened if it had ended → the run.

    404: unknown run or task; 409: the task (or a downstream one) has not ended yet, the
    run is still queued, the job no longer defines the task, or the run is archived (past
    the hot history: its new events would reach a read model that no longer holds it). The
    old attempts stay in the run's history.
    """
    rm = read_model(request)
    run = visible_run(rm, caller, run_id)
    if run.get("archived"):
        raise HTTPException(
            409, f"run {run_id!r} is archived (older than the hot history): it cannot be rerun"
        )
    if run["state"] == "queued":
        raise HTTPException(409, f"run {run_id!r} is queued: it has not started")
    if task not in run["tasks"]:
        raise HTTPException(404, f"run {run_id!r} has no task {task!r}")
    snapshot = tuple(
        cmd.TaskSnapshot(
            task=ti["task"],
            state=ti["state"],
            attempt=int(ti["attempt"]),
            epoch=int(ti["epoch"] or 0),
        )
        for ti in run.get("task_instances", [])
    )
    command = cmd.RerunTask(
        run_id=run_id,
        task=task,
        downstream=body.downstream if body is not None else False,
        scheduled_for=datetime.fromisoformat(run["scheduled_for"]),
        trigger=run["trigger"],
        tasks=snapshot,
    )
    idem_key = idempotency_key or str(uuid.uuid4())
    events = await _command(request, run["job_id"], idem_key, command, _tenant(rm, run["job_id"]))
    if not events:
        return _accepted(run["job_id"], idem_key, f"/api/v1/runs/{run_id}", run_id)
    _check(events)
    return rm.run(run_id)


@router.get("/dead-letters", response_model=DeadLetterList, responses=documented(404, 503))
def list_dead_letters(
    request: Request,
    caller: Caller,
    job_id: str | None = None,
    since: Annotated[Instant | None, Query()] = None,
    until: Annotated[Instant | None, Query()] = None,
    limit: PageLimit = 100,
    cursor: Cursor = None,
) -> Any:
    """The caller's tenant's dead letters (filters: job_id, ``since <= dead_lettered_at <
    until``), newest first (ties by job_id, run_id, task), a page at a time: ``next_cursor``
    (null on the last page) goes in ``cursor``. 404: ``job_id`` names no job of the caller's
    tenant."""
    rm = read_model(request)
    if job_id is not None:
        visible_job(rm, caller, job_id)
    rows, next_cursor = _listing(rm, caller, job_id, since, until, limit, cursor)
    return {"dead_letters": rows, "next_cursor": next_cursor}


def _listing(
    rm: ReadModel,
    caller: Caller,
    job_id: str | None,
    since: datetime | None,
    until: datetime | None,
    limit: int,
    cursor: str | None,
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of the dead letters the caller may see (its tenant's jobs), newest first,
    and the cursor of the next (None at the end).

    Raises:
        RequestValidationError: 422 naming ``cursor`` for a cursor of another listing.
    """
    seen: dict[str, bool] = {}

    def visible(doc: dict[str, Any]) -> bool:
        job = doc["job_id"]
        if job not in seen:
            seen[job] = sees_job(rm, caller, job)
        return seen[job]

    scope = dead_letters.cursor_scope(job_id)
    shape = dead_letters.position_shape(job_id)
    after = paging.position_of(cursor, "dead-letters", scope, shape)
    page = dead_letters.page(
        rm.store, job_id, since=since, until=until, limit=limit, after=after, visible=visible
    )
    return page.rows, paging.next_cursor(page, "dead-letters", scope)


def _selected(
    request: Request, caller: Caller, body: ReplayIn
) -> tuple[list[dict[str, Any]], str | None]:
    rm = read_model(request)
    if body.job_id is not None:
        visible_job(rm, caller, body.job_id)
    if body.run_id is not None or body.task is not None:
        if body.run_id is None or body.task is None:
            raise _invalid("task" if body.task is None else "run_id", "run_id and task go together")
        run = rm.run(body.run_id)
        run = run if run is not None and sees_job(rm, caller, run["job_id"]) else None
        doc = (
            rm.store.get_json(dead_letters.dead_letter_key(run["job_id"], body.run_id, body.task))
            if run
            else None
        )
        if doc is None:
            raise HTTPException(404, f"no dead letter {body.run_id}/{body.task}")
        return [doc], None
    if body.job_id is None and body.since is None and body.until is None:
        raise _invalid("run_id", "give run_id and task, job_id, or since/until")
    try:
        return _listing(rm, caller, body.job_id, body.since, body.until, MAX_REPLAYS, body.cursor)
    except RequestValidationError as exc:  # the cursor is in the body here
        raise _invalid("cursor", "not a next_cursor of this selection") from exc


@router.post(
    "/dead-letters/replay",
    response_model=ReplayList,
    responses=_ANSWERS,
    dependencies=[require(Role.OPERATOR)],
)
async def replay_dead_letters(
    body: ReplayIn, request: Request, caller: Caller, idempotency_key: IdemKey = None
) -> Any:
    """Run dead-lettered task instances again (ReplayTask each): new runs, trigger
    ``replay``, attempt 1; the old attempts stay in their run → ``{replays: [...], replayed,
    next_cursor}``. A selection by job_id or since/until replays at most ``MAX_REPLAYS`` (100)
    newest first per request; ``next_cursor`` (null when done) continues with the same body."""
    base = idempotency_key or str(uuid.uuid4())
    replays = []
    rm = read_model(request)
    selected, next_cursor = _selected(request, caller, body)
    for tenant, count in Counter(_tenant(rm, doc["job_id"]) for doc in selected).items():
        request.app.state.admission.admit_manual_runs(tenant, count)
    for doc in selected:
        job_id, run_id, task = doc["job_id"], doc["run_id"], doc["task"]
        idem_key = step_idem_key(base, run_id, task)
        tick = datetime.fromisoformat(doc["scheduled_for"] or doc["dead_lettered_at"])
        events = await _command(
            request,
            job_id,
            idem_key,
            cmd.ReplayTask(run_id=run_id, task=task, scheduled_for=tick),
            _tenant(rm, job_id),
        )
        new_run = run_id_for_replay(job_id, run_id, task, idem_key)
        if not events:
            return _accepted(job_id, idem_key, f"/api/v1/runs/{new_run}", new_run)
        _check(events)
        replays.append({"job_id": job_id, "run_id": run_id, "task": task, "replay_run_id": new_run})
    return {"replays": replays, "replayed": len(replays), "next_cursor": next_cursor}
