"""Write endpoints: each produces commands and answers after the read model has seen their events.

Outcomes: the effect event → 200/201; ``CommandRejected`` → 404/409/422 by its reason (422 for
``invalid_definition`` naming the field, and for ``idempotency_conflict``: the Idempotency-Key
was used for another command, as the API's own guard answers); no event within
``api_write_timeout_s`` → 202 with a Location to poll. Validation happens before anything
is produced, so a bad request never reaches the log.
"""

from __future__ import annotations

import logging
import uuid
from contextlib import nullcontext
from dataclasses import replace
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, HTTPException, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.errors import InvalidDefinition
from cronlog.ids import (
    command_digest,
    conflict_key,
    event_id,
    run_id_for_trigger,
    step_idem_key,
)
from cronlog.model import JobSpec
from cronlog.tenants import DEFAULT_TENANT
from cronlog.time import iso
from cronlog.validation import validate_spec
from cronlog.vocabulary import RejectReason
from services.api.access import idempotency
from services.api.access.auth import PLATFORM, Caller, Principal, Role, principal, require
from services.api.access.scope import visible_job
from services.api.readmodel.projection import is_conflict, names_another_command
from services.api.readmodel.reader import ReadModel
from services.api.routes.sender import CommandNotSent, CommandSender
from services.api.shapes.definition import JobDefinition, JobIn
from services.api.shapes.mapping import definition_field, merge_patch, spec_to_json, to_spec
from services.api.shapes.record_budget import RecordTooLarge, check_record_budget
from services.api.shapes.requests import Accepted, JobCreated, JobPatch, RunTriggered
from services.api.shapes.responses import JobOut, documented

log = logging.getLogger("cronlog.api")
router = APIRouter(prefix="/api/v1", dependencies=[Depends(principal), Depends(idempotency.guard)])
IdemKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        max_length=200,
        pattern=r"^[!-~]+$",
        description="the command's idem_key (printable ASCII); a retry of the same "
        "request with the same key changes nothing; the key reused for another request "
        "(method, path or body) is a 422",
    ),
]
_STATUS = {
    RejectReason.UNKNOWN_JOB: 404,
    RejectReason.INVALID_DEFINITION: 422,
    RejectReason.IDEMPOTENCY_CONFLICT: 422,
}
_ANSWERS = documented(400, 404, 409, 413, 429, 503, accepted=True)


def _iso(instant: datetime | None) -> str | None:
    return iso(instant) if instant is not None else None


def _invalid(field: str, reason: str) -> RequestValidationError:
    loc = ("body", *field.split(".")) if field else ("body",)
    return RequestValidationError([{"type": "invalid_definition", "loc": loc, "msg": reason}])


def validated_spec(body: JobDefinition, job_id: str | None = None) -> JobSpec:
    """Return the core spec of ``body`` (of job ``job_id``) after the core's own validation.

    Raises:
        RequestValidationError: 422 whose ``loc`` names the field (``schedule.expression``,
            ``schedule.timezone``, ...), in FastAPI's usual shape; also when the job's record
            could outgrow the fold's limit (``record_budget``: ``max_active_runs`` or the body).
    """
    try:
        spec = to_spec(body)
        validate_spec(spec, job_id=job_id)
        check_record_budget(job_id or "j" * 128, spec)  # an unchosen id: its longest form
    except InvalidDefinition as exc:
        raise _invalid(definition_field(body, exc.field), exc.reason) from exc
    except RecordTooLarge as exc:
        raise _invalid(exc.field, exc.reason) from exc
    return spec


def _parts(request: Request) -> tuple[ReadModel, CommandSender]:
    rm, sender = request.app.state.read_model, request.app.state.sender
    if rm is None or sender is None:
        raise HTTPException(503, "the API is not connected to Kafka")
    return rm, sender


def _known_job(
    rm: ReadModel, caller: Principal, job_id: str, *, live: bool = True
) -> dict[str, Any]:
    """Return job ``job_id`` if ``caller`` may see it; 404 otherwise (another tenant's job is
    not found, never forbidden); 409 for a deleted job when ``live``."""
    job = visible_job(rm, caller, job_id)
    if live and job["status"] == "deleted":
        raise HTTPException(409, f"job {job_id!r} was deleted")
    return job


async def _command(
    request: Request, job_id: str, idem_key: str, command: cmd.Command, tenant: str
) -> list[ev.RunEvent]:
    """Produce one command of ``tenant`` (the job's; unless its idem_key was applied already)
    and await its events."""
    rm, sender = _parts(request)
    settings = request.app.state.settings
    idempotency.remember(request)  # the header's first use (a reuse was refused by guard)
    prior = answer_of(rm.events_for(idem_key, job_id), idem_key, job_id, command)
    if prior:  # a retried Idempotency-Key: answer as the first time, produce nothing
        return prior
    try:
        await sender.send(
            cmd.Envelope(idem_key=idem_key, job_id=job_id, command=command, tenant=tenant),
            settings.api_delivery_timeout_s,
        )
    except CommandNotSent as exc:
        raise HTTPException(503, str(exc)) from exc
    events = await rm.wait_for(idem_key, settings.api_write_timeout_s, job_id=job_id)
    events = answer_of(events, idem_key, job_id, command)
    log.info(
        "command answered",
        extra={
            "action": "api.command",
            "job_id": job_id,
            "idem_key": idem_key,
            "command": type(command).__name__,
            "events": [type(e.event).__name__ for e in events],
        },
    )
    return events


def answer_of(
    events: list[ev.RunEvent], idem_key: str, job_id: str, command: cmd.Command | None = None
) -> list[ev.RunEvent]:
    """Return the events that answer ``command`` sent under ``idem_key`` for ``job_id``.

    The events of an idem_key are those of the first command applied under it, and the
    refusals (``idempotency_conflict``) of other commands that re-used it. ``command``'s own
    refusal, if there is one, is the answer; the refusals of other commands are not.

    Args:
        events: what ``events_for(idem_key, job_id)`` holds.
        idem_key, job_id: the command's.
        command: the command this request sent; None drops every refusal of a re-use.
    """
    if command is not None:
        key = conflict_key(idem_key, command_digest(command))
        mine = [e for e in events if is_conflict(e) and e.event_id == event_id(key, job_id, 0)]
        if mine:
            return mine
    return [e for e in events if not names_another_command(e)]


def _check(events: list[ev.RunEvent], *tolerated: RejectReason) -> None:
    """Raise the HTTP error of a CommandRejected in ``events``, unless its reason is tolerated."""
    for record in events:
        rej = record.event
        if isinstance(rej, ev.CommandRejected) and rej.reason is RejectReason.WRONG_TENANT:
            # another tenant took the id meanwhile (the read model had not seen it): answer as
            # for any taken id or unknown job, never saying whose it is
            if rej.command == "RegisterJob":
                raise HTTPException(409, f"job {record.job_id!r} already exists")
            raise HTTPException(404, f"job {record.job_id!r} not found")
        if isinstance(rej, ev.CommandRejected) and rej.reason not in tolerated:
            if rej.reason is RejectReason.INVALID_DEFINITION:
                field, _, reason = rej.detail.partition(": ")
                raise _invalid(field, reason or rej.detail)
            if rej.reason is RejectReason.IDEMPOTENCY_CONFLICT:  # the guard's shape
                raise RequestValidationError(
                    [
                        {
                            "type": rej.reason.value,
                            "loc": ("header", idempotency.HEADER),
                            "msg": rej.detail,
                        }
                    ]
                )
            raise HTTPException(_STATUS.get(rej.reason, 409), f"{rej.reason}: {rej.detail}")


def _accepted(job_id: str, idem_key: str, location: str, run_id: str | None = None) -> Response:
    body = Accepted(job_id=job_id, idem_key=idem_key, run_id=run_id, location=location)
    return JSONResponse(body.model_dump(), status_code=202, headers={"Location": location})


def _owner(caller: Principal, asked: str | None) -> str:
    """Return the tenant a new job gets: the caller's; a platform caller names one."""
    if caller.tenant == PLATFORM:
        return asked or DEFAULT_TENANT
    if asked is not None and asked != caller.tenant:
        raise _invalid("tenant", f"you act for tenant {caller.tenant!r}; leave tenant out")
    return caller.tenant


@router.post(
    "/jobs",
    status_code=201,
    response_model=JobCreated,
    responses=_ANSWERS,
    dependencies=[require(Role.ADMIN)],
)
async def register_job(
    body: JobIn,
    request: Request,
    response: Response,
    caller: Caller,
    idempotency_key: IdemKey = None,
) -> Any:
    """Register a job (RegisterJob) → 201 ``{job_id, next_run_at}``; 409 if the id is live
    (job ids are unique across tenants: the 409 says only that the id is taken)."""
    tenant = _owner(caller, body.tenant)
    spec = replace(validated_spec(body, body.job_id), tenant=tenant)
    rm, _ = _parts(request)
    _same_tenant_upstream(rm, spec)
    job_id = body.job_id or f"job-{uuid.uuid4().hex[:12]}"
    idem_key = idempotency_key or str(uuid.uuid4())
    known = rm.job(job_id)
    if known and known["tenant"] != tenant:
        raise HTTPException(409, f"job {job_id!r} already exists")
    if known and known["status"] != "deleted" and not rm.events_for(idem_key, job_id):
        raise HTTPException(409, f"job {job_id!r} already exists")
    new_job = not (known and known["status"] != "deleted")  # else a retried registration
    admission = request.app.state.admission
    with admission.job_slot(rm, tenant) if new_job else nullcontext():
        events = await _command(request, job_id, idem_key, cmd.RegisterJob(spec=spec), tenant)
    location = f"/api/v1/jobs/{job_id}"
    if not events:
        return _accepted(job_id, idem_key, location)
    _check(events)
    registered = next(e.event for e in events if isinstance(e.event, ev.JobRegistered))
    response.headers["Location"] = location
    return JobCreated(job_id=job_id, next_run_at=_iso(registered.next_fire_at))


def _same_tenant_upstream(rm: ReadModel, spec: JobSpec) -> None:
    """Refuse an ``after`` schedule naming a job of another tenant (422 at schedule.job_id).

    A job not (yet) known is accepted, as before tenants: a downstream job may be registered
    first. The answer is the same as for an id another tenant holds at registration: the
    id is taken, nothing more (docs/tenants.md).
    """
    upstream = spec.schedule.after_job_id
    if upstream is None:
        return
    doc = rm.stored_job(upstream)
    if doc is not None and doc.get("tenant", DEFAULT_TENANT) != spec.tenant:
        raise _invalid(
            "schedule.job_id", f"job {upstream!r} is not a job of tenant {spec.tenant!r}"
        )


def _patched_spec(rm: ReadModel, job: dict[str, Any], patch: dict[str, Any]) -> JobSpec | None:
    # the job's tenant is kept (a patch cannot name one: JobPatch has no such field)
    """Return the new spec if the merge-patch changes the definition, else None."""
    current = {k: job[k] for k in JobDefinition.model_fields if k in job}  # older docs lack some
    try:
        body = JobDefinition.model_validate(merge_patch(current, patch))
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_context=False)
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in errors]) from exc
    spec = replace(validated_spec(body, job.get("job_id")), tenant=job["tenant"])
    _same_tenant_upstream(rm, spec)
    return spec if spec_to_json(spec) != current else None


@router.patch(
    "/jobs/{job_id}",
    response_model=JobOut,
    responses=_ANSWERS,
    dependencies=[require(Role.OPERATOR)],
)
async def patch_job(
    job_id: str, body: JobPatch, request: Request, caller: Caller, idempotency_key: IdemKey = None
) -> Any:
    """Pause/resume (``paused``, with ``catchup`` on resume; operator) and/or change the
    definition (JSON merge-patch; admin) → the job."""
    rm, _ = _parts(request)
    job = _known_job(rm, caller, job_id)
    patch = body.model_dump(exclude_unset=True)
    paused = patch.pop("paused", None)
    catchup = patch.pop("catchup", None)
    if catchup is not None and paused is not False:
        raise _invalid("catchup", "only with paused: false (a resume)")
    steps: list[tuple[str, cmd.Command]] = []
    if patch and caller.role < Role.ADMIN:
        raise HTTPException(403, "role operator may not change a definition; needs admin")
    spec = _patched_spec(rm, job, patch) if patch else None
    if spec is not None:
        steps.append(("update", cmd.UpdateJob(spec=spec)))
    if paused is not None:
        steps.append(
            ("pause", cmd.PauseJob())
            if paused
            else ("resume", cmd.ResumeJob(catchup=bool(catchup)))
        )
    base = idempotency_key or str(uuid.uuid4())
    for suffix, command in steps:
        idem_key = step_idem_key(base, suffix)
        events = await _command(request, job_id, idem_key, command, job["tenant"])
        if not events:
            return _accepted(job_id, idem_key, f"/api/v1/jobs/{job_id}")
        _check(events, RejectReason.ALREADY_IN_STATE)
    return rm.job(job_id)


@router.delete(
    "/jobs/{job_id}",
    response_model=JobOut,
    responses=_ANSWERS,
    dependencies=[require(Role.ADMIN)],
)
async def delete_job(
    job_id: str, request: Request, caller: Caller, idempotency_key: IdemKey = None
) -> Any:
    """Delete a job (DeleteJob): no new runs; it and its runs stay readable. Idempotent."""
    rm, _ = _parts(request)
    job = _known_job(rm, caller, job_id, live=False)
    if job["status"] == "deleted":
        return job
    idem_key = idempotency_key or str(uuid.uuid4())
    events = await _command(request, job_id, idem_key, cmd.DeleteJob(), job["tenant"])
    if not events:
        return _accepted(job_id, idem_key, f"/api/v1/jobs/{job_id}")
    _check(events, RejectReason.JOB_DELETED)
    return rm.job(job_id)


@router.post(
    "/jobs/{job_id}/trigger",
    status_code=201,
    response_model=RunTriggered,
    responses=_ANSWERS,
    dependencies=[require(Role.OPERATOR)],
)
async def trigger_job(
    job_id: str,
    request: Request,
    response: Response,
    caller: Caller,
    idempotency_key: IdemKey = None,
) -> Any:
    """Start one manual run now (TriggerJob) → 201 ``{job_id, run_id, scheduled_for}``."""
    rm, _ = _parts(request)
    job = _known_job(rm, caller, job_id)
    idem_key = idempotency_key or str(uuid.uuid4())
    run_id = run_id_for_trigger(job_id, idem_key)
    if not rm.events_for(idem_key, job_id):  # a retried trigger starts nothing new
        request.app.state.admission.admit_manual_runs(job["tenant"])
    location = f"/api/v1/runs/{run_id}"
    events = await _command(request, job_id, idem_key, cmd.TriggerJob(), job["tenant"])
    if not events:
        return _accepted(job_id, idem_key, location, run_id)
    _check(events)
    scheduled = next((e.event for e in events if isinstance(e.event, ev.RunScheduled)), None)
    response.headers["Location"] = location
    return RunTriggered(
        job_id=job_id,
        run_id=run_id,
        scheduled_for=_iso(scheduled.scheduled_for if scheduled else None),
    )
