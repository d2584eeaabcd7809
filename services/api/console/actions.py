"""The console's forms: sign in and out, and the operator's writes (trigger, pause, resume,
cancel, rerun, replay).

Each write calls the JSON API's own route function (``writes``, ``operate``) with the console's
caller, so it is checked, produced and awaited exactly as the API does it; the answer is a 303
to the page that shows the effect (a new run's page for trigger and replay), or an error page
with the API's status and message.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import RedirectResponse

from services.api.access.auth import Principal, Unauthenticated
from services.api.console.pages import error, templates
from services.api.console.session import COOKIE, Operator, form, same_origin
from services.api.routes import operate, writes
from services.api.shapes.requests import JobPatch

router = APIRouter(include_in_schema=False)


@router.get("/login")
def login_form(request: Request) -> Response:
    """The sign-in form: paste an API token (a JWT or a static ``clt_`` token)."""
    return templates.TemplateResponse(request, "login.html", {"error": None})


@router.post("/login")
async def login(request: Request) -> Response:
    """Check the token with the API's Authenticator; keep it in an HttpOnly cookie → ``/``."""
    same_origin(request)
    token = (await form(request)).get("token", "").strip()
    try:
        request.app.state.authenticator.authenticate(token)
    except Unauthenticated as exc:
        return templates.TemplateResponse(
            request, "login.html", {"error": str(exc) if token else "paste a token"}, 401
        )
    response = RedirectResponse("/", 303)
    response.set_cookie(
        COOKIE,
        token,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    return response


@router.api_route("/logout", methods=["GET", "POST"])
def logout() -> Response:
    """Forget the token (clear the cookie) → ``/login``."""
    response = RedirectResponse("/login", 303)
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return response


async def _act(
    request: Request,
    caller: Principal,
    write: Callable[[], Awaitable[Any]],
    then: Callable[[dict[str, Any]], str],
) -> Response:
    """Run one of the API's writes; 303 to the page ``then`` names from the answer's fields,
    or the API's refusal as an error page."""
    try:
        answer = await write()
    except HTTPException as exc:
        return error(request, caller, exc)
    except RequestValidationError as exc:
        detail = "; ".join(str(e.get("msg", e)) for e in exc.errors())
        return error(request, caller, HTTPException(422, detail))
    if isinstance(answer, Response) and answer.status_code >= 400:
        return answer
    return RedirectResponse(then(_fields(answer)), 303)


def _fields(answer: Any) -> dict[str, Any]:
    """The fields of an API answer (a model, a dict, or a 202's JSON body)."""
    if isinstance(answer, Response):
        return dict(json.loads(bytes(answer.body)))
    if hasattr(answer, "model_dump"):
        return dict(answer.model_dump())
    return dict(answer or {})


def _run_page(fields: dict[str, Any]) -> str:
    return f"/runs/{quote(str(fields['run_id']), safe='')}"


@router.post("/jobs/{job_id}/trigger")
async def trigger(job_id: str, request: Request, caller: Operator) -> Response:
    """Start one manual run now (the API's ``POST /jobs/{id}/trigger``) → its run page."""
    return await _act(
        request,
        caller,
        lambda: writes.trigger_job(job_id, request, Response(), caller, None),
        _run_page,
    )


@router.post("/jobs/{job_id}/pause")
async def pause(job_id: str, request: Request, caller: Operator) -> Response:
    """Pause the job (the API's ``PATCH`` with ``paused: true``) → the job page."""
    return await _set_paused(job_id, request, caller, paused=True)


@router.post("/jobs/{job_id}/resume")
async def resume(job_id: str, request: Request, caller: Operator) -> Response:
    """Resume the job (``paused: false``; missed ticks are not caught up) → the job page."""
    return await _set_paused(job_id, request, caller, paused=False)


async def _set_paused(job_id: str, request: Request, caller: Principal, paused: bool) -> Response:
    return await _act(
        request,
        caller,
        lambda: writes.patch_job(job_id, JobPatch(paused=paused), request, caller, None),
        lambda _: f"/jobs/{quote(job_id, safe='')}",
    )


@router.post("/runs/{run_id}/cancel")
async def cancel(run_id: str, request: Request, caller: Operator) -> Response:
    """Cancel the run (the API's ``POST /runs/{id}/cancel``) → the run page."""
    return await _act(
        request,
        caller,
        lambda: operate.cancel_run(run_id, request, caller, None, None),
        lambda _: f"/runs/{quote(run_id, safe='')}",
    )


@router.post("/runs/{run_id}/tasks/{task}/rerun")
async def rerun(run_id: str, task: str, request: Request, caller: Operator) -> Response:
    """Rerun an ended task in its own run (the API's ``POST …/tasks/{task}/retry``); form
    field ``downstream`` (``1``): every task below it too → the run page."""
    fields = await form(request)
    body = operate.RerunIn(downstream=fields.get("downstream") == "1")
    return await _act(
        request,
        caller,
        lambda: operate.rerun_task(run_id, task, request, caller, body, None),
        lambda _: f"/runs/{quote(run_id, safe='')}",
    )


@router.post("/dead-letters/replay")
async def replay(request: Request, caller: Operator) -> Response:
    """Replay one dead letter (form fields ``run_id``, ``task``) → the new run's page; or
    every dead letter of a job (form field ``job_id`` alone, at most ``MAX_REPLAYS``) → the
    dead-letter page of that job."""
    fields = await form(request)
    job_id = fields.get("job_id") if not fields.get("run_id") else None
    body = operate.ReplayIn(run_id=fields.get("run_id"), task=fields.get("task"), job_id=job_id)

    async def write() -> Any:
        answer = await operate.replay_dead_letters(body, request, caller, None)
        if isinstance(answer, Response) or job_id:
            return answer
        return {"run_id": answer["replays"][0]["replay_run_id"]}

    def then(fields: dict[str, Any]) -> str:
        return f"/dead-letters?job_id={quote(job_id, safe='')}" if job_id else _run_page(fields)

    return await _act(request, caller, write, then)
