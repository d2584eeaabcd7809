"""``cronlog``: the command line of cronlog (jobs, runs, ``up``), talking to the API over HTTP."""

from __future__ import annotations

import json
from collections.abc import Callable
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from cronlog.errors import CronlogError
from services.cli import render
from services.cli.client import DEFAULT_API, ApiClient, ApiError, load_job_file

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="cronlog: distributed cron on a Kafka log.")
jobs = typer.Typer(no_args_is_help=True, help="Register, inspect, pause, resume, delete, "
                                               "trigger jobs.")
app.add_typer(jobs, name="jobs")
out = Console()
err = Console(stderr=True)


class Output(StrEnum):
    """How read commands print their answer."""

    table = "table"
    json = "json"


Api = Annotated[str, typer.Option("--api", envvar="CRONLOG_API_URL",
                                  help="Base URL of the cronlog API.")]
Fmt = Annotated[Output, typer.Option("-o", "--output", help="table (default) or json.")]
JobId = Annotated[str, typer.Argument(help="The job's id.")]


def _call(fn: Callable[[], Any]) -> Any:
    """Run an API call; print its error and exit 1 (API error) or 2 (unreachable)."""
    try:
        return fn()
    except ApiError as exc:
        err.print(f"[red]error[/red] {exc.describe()}", highlight=False)
        raise typer.Exit(2 if exc.status == 0 else 1) from exc
    except CronlogError as exc:
        err.print(f"[red]error[/red] {exc}", highlight=False)
        raise typer.Exit(1) from exc


def _show(answer: Any, fmt: Output, table: Callable[[Any], Table] | None = None) -> None:
    if fmt is Output.json or table is None:
        out.print_json(json.dumps(answer))
    else:
        out.print(table(answer))


def _said(job_id: str, verb: str, answer: Any, fmt: Output) -> None:
    if fmt is Output.json:
        _show(answer, fmt)
    elif isinstance(answer, dict) and answer.get("status") == "accepted":
        out.print(f"{job_id}: {verb} accepted, not visible yet (see {answer['location']})")
    else:
        out.print(f"{job_id}: {verb}")


def _load(path: Path) -> list[dict[str, Any]]:
    return list(load_job_file(path))


@jobs.command("apply")
def jobs_apply(
    files: Annotated[list[Path], typer.Option("-f", "--file", exists=True, dir_okay=False,
                                              help="YAML job file (repeatable).")],
    api: Api = DEFAULT_API, output: Fmt = Output.table,
) -> None:
    """Create jobs from YAML files, or update the live jobs with the same job_id."""
    client = ApiClient(api)
    for path in files:
        for body in _call(partial(_load, path)):
            action, answer = _call(partial(client.apply, body))
            if output is Output.json:
                _show({"action": action, "answer": answer}, output)
            else:
                out.print(render.applied(body, action, answer))


@jobs.command("list")
def jobs_list(
    api: Api = DEFAULT_API, output: Fmt = Output.table,
    status: Annotated[str | None, typer.Option(help="active, paused or deleted")] = None,
) -> None:
    """List jobs."""
    _show(_call(lambda: ApiClient(api).jobs(status)), output, render.jobs_table)


@jobs.command("get")
def jobs_get(job_id: JobId, api: Api = DEFAULT_API, output: Fmt = Output.table) -> None:
    """Show one job: definition, status, next run, counts."""
    _show(_call(lambda: ApiClient(api).job(job_id)), output, render.job_table)


@jobs.command("pause")
def jobs_pause(job_id: JobId, api: Api = DEFAULT_API, output: Fmt = Output.table) -> None:
    """Pause a job: its ticks pass unfired until it is resumed."""
    _said(job_id, "paused", _call(lambda: ApiClient(api).patch(job_id, {"paused": True})), output)


@jobs.command("resume")
def jobs_resume(job_id: JobId, api: Api = DEFAULT_API, output: Fmt = Output.table) -> None:
    """Resume a paused job from now on (ticks missed while paused are not fired)."""
    _said(job_id, "resumed", _call(lambda: ApiClient(api).patch(job_id, {"paused": False})),
          output)


@jobs.command("delete")
def jobs_delete(job_id: JobId, api: Api = DEFAULT_API, output: Fmt = Output.table) -> None:
    """Delete a job: no new runs; it and its runs stay readable."""
    _said(job_id, "deleted", _call(lambda: ApiClient(api).delete(job_id)), output)


@jobs.command("trigger")
def jobs_trigger(job_id: JobId, api: Api = DEFAULT_API, output: Fmt = Output.table) -> None:
    """Start one manual run now and print its run_id."""
    answer = _call(lambda: ApiClient(api).trigger(job_id))
    if output is Output.json:
        _show(answer, output)
    else:
        note = " (accepted, not visible yet)" if answer.get("status") == "accepted" else ""
        out.print(f"{job_id}: triggered run {answer['run_id']}{note}")


@app.command("runs")
def runs(
    job_id: JobId, api: Api = DEFAULT_API, output: Fmt = Output.table,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Most runs shown.")] = 20,
) -> None:
    """List a job's runs, newest first."""
    answer = _call(lambda: ApiClient(api).runs(job_id, limit))
    _show(answer, output, lambda rs: render.runs_table(rs, f"runs of {job_id}"))


@app.command("run")
def run(run_id: Annotated[str, typer.Argument(help="The run's id.")],
        api: Api = DEFAULT_API, output: Fmt = Output.table) -> None:
    """Show one run: state, attempt, worker, lease, exit code, output tail, timings."""
    _show(_call(lambda: ApiClient(api).run(run_id)), output, render.run_table)


@app.command("up")
def up(
    examples: Annotated[bool, typer.Option("--examples", help="Apply examples/*.yaml.")] = False,
    duration: Annotated[float | None, typer.Option(
        help="Stop everything after this many seconds (default: run until Ctrl-C).")] = None,
    api: Annotated[str | None, typer.Option(
        "--api", help="URL the started API answers on (default from CRONLOG_API_HOST/PORT).")]
    = None,
) -> None:
    """Start broker (unless KAFKA_BOOTSTRAP), scheduler, worker and API; show runs live."""
    from services.cli.up import run_up  # heavy imports (Kafka admin) only when needed

    raise typer.Exit(run_up(examples=examples, duration_s=duration, api_url=api))


if __name__ == "__main__":
    app()
