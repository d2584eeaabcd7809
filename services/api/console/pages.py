"""The console's pages, each also served as the fragment htmx re-fetches on a live update.

A page answers its whole HTML; the same URL asked by htmx (``HX-Request: true``) answers only
the part that changes (``Vary: HX-Request``). Every read goes through the API's own functions
(``scope.visible_job``/``visible_run``, the read model, ``operate``'s dead-letter listing,
``workers``' listing, ``logs``' attempt log), so a page shows exactly what the JSON API says.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.templating import Jinja2Templates

from services.api.access.auth import Principal, Role
from services.api.access.scope import visible_job, visible_run
from services.api.console import graph
from services.api.console.session import PageCaller
from services.api.readmodel.reader import ReadModel
from services.api.readmodel.run_changes import TERMINAL_RUN_STATES
from services.api.routes import logs, operate, workers

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=Path(__file__).parent / "templates")
templates.env.filters["when"] = graph.when
templates.env.globals.update(ran=graph.ran, task_detail=graph.task_detail)
TIMELINE_RUNS = 50
"""How many of a job's newest runs the timeline draws."""


def read_model(request: Request) -> ReadModel:
    """Return the app's read model, or 503 while it is not running.

    Its ``version`` before the page reads anything is kept for ``render``: the page's stream
    starts from it, so a change between this read and the stream's start is not missed.
    """
    rm: ReadModel | None = request.app.state.read_model
    if rm is None:
        raise HTTPException(503, "the read model is not running")
    if not hasattr(request.state, "version"):
        request.state.version = rm.version
    return rm


def render(
    request: Request, caller: Principal, page: str, status_code: int = 200, **context: Any
) -> Response:
    """Render ``<page>.html``, or ``<page>_part.html`` for htmx's re-fetch of the live part."""
    live = request.headers.get("hx-request") == "true"
    response = templates.TemplateResponse(
        request,
        f"{page}_part.html" if live else f"{page}.html",
        {
            "caller": caller,
            "role": caller.role.name.lower(),
            "can_operate": caller.role >= Role.OPERATOR,
            "platform": caller.tenant == "*",
            "version": getattr(request.state, "version", 0),
            **context,
        },
        status_code=status_code,
    )
    response.headers["Vary"] = "HX-Request"
    response.headers["Cache-Control"] = "no-store"
    return response


def error(request: Request, caller: Principal, exc: HTTPException) -> Response:
    """Render an HTTPException of the API's functions as an error page with its status."""
    return render(request, caller, "error", exc.status_code, detail=exc.detail, exc=exc)


@router.get("/")
def jobs_page(request: Request, caller: PageCaller) -> Response:
    """Every job the caller sees: status, schedule, next 3 ticks, last run, a Trigger button."""
    rm = read_model(request)
    now = datetime.now(UTC)
    jobs = [j for j in rm.jobs() if caller.sees(j["tenant"])]
    ticks = {j["job_id"]: next_ticks(rm, j, now) for j in jobs}
    return render(request, caller, "jobs", jobs=jobs, ticks=ticks)


@router.get("/jobs/{job_id}")
def job_page(job_id: str, request: Request, caller: PageCaller) -> Response:
    """One job: definition, runs timeline, queued runs and skipped ticks with their reasons."""
    rm = read_model(request)
    try:
        job = visible_job(rm, caller, job_id)
    except HTTPException as exc:
        return error(request, caller, exc)
    now = datetime.now(UTC)
    runs = rm.runs(job_id, TIMELINE_RUNS)
    bars, width, height = graph.timeline(runs, now)
    return render(
        request,
        caller,
        "job",
        job=job,
        runs=runs,
        bars=bars,
        width=width,
        height=height,
        queued=[r for r in runs if r["state"] == "queued"],
        skipped=rm.skipped(job_id, 20),
        ticks=next_ticks(rm, job, now),
    )


def next_ticks(rm: ReadModel, job: dict[str, Any], now: datetime) -> list[dict[str, str]]:
    """The next 3 ticks the job will fire: none unless it is active (a paused job fires
    nothing until resumed; ``cronlog jobs ticks`` still previews what it would fire)."""
    if job["status"] != "active":
        return []
    return rm.ticks(job["job_id"], now, 3) or []


def dag_of(run: dict[str, Any], job: dict[str, Any] | None) -> dict[str, Any]:
    """Return the drawing of ``run``'s DAG: nodes (with state and attempt), edges and size.

    The edges are the job's current ``depends_on`` between the run's tasks."""
    tasks = [ti["task"] for ti in run.get("task_instances") or []] or list(run["tasks"])
    edges = [
        (up, t["name"])
        for t in ((job or {}).get("tasks") or [])
        for up in t.get("depends_on") or []
    ]
    nodes, lines, width, height = graph.layout(tasks, edges)
    states = {ti["task"]: ti for ti in run.get("task_instances") or []}
    return {
        "nodes": [(n, states.get(n.task, {"state": run["state"], "attempt": 1})) for n in nodes],
        "edges": lines,
        "width": width,
        "height": height,
        "node_w": graph.NODE_W,
        "node_h": graph.NODE_H,
    }


@router.get("/runs/{run_id}")
def run_page(run_id: str, request: Request, caller: PageCaller) -> Response:
    """One run: its DAG as a graph, each task's attempts with exit codes and logs, Cancel."""
    rm = read_model(request)
    try:
        run = visible_run(rm, caller, run_id)
    except HTTPException as exc:
        return error(request, caller, exc)
    return render(
        request,
        caller,
        "run",
        run=run,
        dag=dag_of(run, rm.job(run["job_id"])),
        active=run["state"] not in TERMINAL_RUN_STATES,
    )


@router.get("/runs/{run_id}/tasks/{task}/attempts/{attempt}/log")
def log_page(
    run_id: str, task: str, attempt: int, request: Request, caller: PageCaller, raw: bool = False
) -> Any:
    """One attempt's output in a page with a way back to its run (``?raw=true``: the bare
    text): the API's own log endpoint, authenticated by the cookie."""
    if attempt < 1:
        raise HTTPException(404, f"no attempt {attempt}")
    if raw:
        return logs.attempt_log(run_id, task, request, caller, attempt, None, "text")
    try:
        answer = logs.attempt_log(run_id, task, request, caller, attempt, None, "json")
    except HTTPException as exc:
        return error(request, caller, exc)
    return render(request, caller, "log", log=json.loads(bytes(answer.body)))


@router.get("/dead-letters")
def dead_letters_page(request: Request, caller: PageCaller, job_id: str | None = None) -> Response:
    """The caller's dead letters (``job_id``: one job's), newest first, each with its output
    tail, a Replay button and, for a DAG task, Rerun with downstream; Replay all of a job."""
    rm = read_model(request)
    try:
        answer = operate.list_dead_letters(request, caller, job_id or None, None, None, 100)
    except HTTPException as exc:
        return error(request, caller, exc)
    jobs = sorted(j["job_id"] for j in rm.jobs() if caller.sees(j["tenant"]))
    letters = answer["dead_letters"]
    dags = {d["run_id"]: len((rm.run(d["run_id"]) or {}).get("tasks") or ()) > 1 for d in letters}
    return render(
        request,
        caller,
        "dead_letters",
        letters=letters,
        jobs=jobs,
        job_id=job_id or "",
        dags=dags,
        more=answer["next_cursor"] is not None,
    )


@router.get("/workers")
def workers_page(request: Request, caller: PageCaller) -> Response:
    """The workers that heartbeat (lost ones too): slots, busy slots, last heartbeat."""
    try:
        read_model(request)
        answer = workers.list_workers(request, caller, include_lost=True)
    except HTTPException as exc:
        return error(request, caller, exc)
    return render(request, caller, "workers", workers=answer["workers"])
