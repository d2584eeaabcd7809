"""``POST /jobs/{job_id}/backfill``: runs for a job's past ticks (BackfillJob), answered after
read-your-writes like every write (``writes``); the plan of ticks is ``backfill``'s."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Request

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.ids import run_id_for_tick
from cronlog.time import iso
from cronlog.vocabulary import Reprocess
from services.api.access import idempotency
from services.api.access.auth import Caller, Role, principal, require
from services.api.routes import backfill_plan as bf
from services.api.routes.writes import (
    _ANSWERS,
    IdemKey,
    _accepted,
    _check,
    _command,
    _invalid,
    _known_job,
    answer_of,
)
from services.api.shapes.requests import Backfilled, BackfillIn

router = APIRouter(prefix="/api/v1", dependencies=[Depends(principal), Depends(idempotency.guard)])


def _backfilled(job_id: str, events: list[ev.RunEvent]) -> dict[str, Any]:
    runs = [e.event for e in events if isinstance(e.event, ev.RunScheduled)]
    return {
        "job_id": job_id,
        "dry_run": False,
        "runs": [{"scheduled_for": iso(r.scheduled_for), "run_id": r.run_id} for r in runs],
    }


@router.post(
    "/jobs/{job_id}/backfill",
    response_model=Backfilled,
    responses=_ANSWERS,
    dependencies=[require(Role.OPERATOR)],
)
async def backfill_job(
    job_id: str,
    body: BackfillIn,
    request: Request,
    caller: Caller,
    idempotency_key: IdemKey = None,
) -> Any:
    """Create runs (trigger ``backfill``) for the job's ticks in (start, end] (BackfillJob).

    Idempotent: with ``reprocess: none`` a tick that has a run is left alone, so a second
    backfill of the same range creates nothing; ``failed`` / ``all`` run ticks again (new
    run_ids). ``dry_run`` lists the ticks and creates nothing. → 200 ``{job_id, runs:
    [{scheduled_for, run_id}], dry_run}``; 409 for a deleted job; 422 naming ``end`` for
    more than 1000 runs (fewer for a job of many tasks: ``backfill.most_runs``) without
    ``max_runs``, or naming ``max_runs`` above that.
    """
    rm = request.app.state.read_model
    if rm is None:
        raise HTTPException(503, "the read model is not running")
    job = _known_job(rm, caller, job_id)
    doc = rm.stored_job(job_id)
    if doc is None:
        raise HTTPException(404, f"job {job_id!r} not found")
    if body.end <= body.start:
        raise _invalid("end", "must be after start")
    if idempotency_key and not body.dry_run:
        prior = answer_of(rm.events_for(idempotency_key, job_id), idempotency_key, job_id)
        if prior:  # a retried request: answer as the first time
            _check(prior)
            return _backfilled(job_id, prior)
    reprocess = Reprocess(body.reprocess)
    try:
        planned = bf.plan(
            rm.store,
            doc,
            body.start.astimezone(UTC),
            body.end.astimezone(UTC),
            reprocess,
            body.max_runs,
            datetime.now(UTC),
        )
    except bf.TooManyTicks as exc:
        raise _invalid(exc.field, exc.reason) from exc
    if body.dry_run or not planned:
        plain = reprocess is Reprocess.NONE
        return {
            "job_id": job_id,
            "dry_run": body.dry_run,
            "runs": [
                {
                    "scheduled_for": iso(p.tick),
                    "run_id": (
                        run_id_for_tick(job_id, p.tick, doc.get("incarnation", 0))
                        if plain
                        else None
                    ),
                }
                for p in planned
            ],
        }
    idem_key = idempotency_key or str(uuid.uuid4())
    request.app.state.admission.admit_manual_runs(job["tenant"], len(planned))
    events = await _command(
        request,
        job_id,
        idem_key,
        cmd.BackfillJob(ticks=tuple(p.tick for p in planned), reprocess=reprocess),
        job["tenant"],
    )
    if not events:
        return _accepted(job_id, idem_key, f"/api/v1/jobs/{job_id}/runs")
    _check(events)
    return _backfilled(job_id, events)
