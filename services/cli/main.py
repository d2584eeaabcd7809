"""``cronlog``: the command line of cronlog (jobs, runs, ``up``), talking to the API over HTTP."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from enum import StrEnum
from functools import partial
from itertools import islice
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from cronlog.errors import CronlogError, InvalidDefinition
from cronlog.model import DstGapPolicy, DstOverlapPolicy
from cronlog.schedule import cron_ticks, prev_ticks, validate_cron, zone
from services.cli import render, replay_cmd
from services.cli.client import DEFAULT_API, ApiClient, ApiError, load_job_file

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="cronlog: distributed cron on a Kafka log.")
jobs = typer.Typer(no_args_is_help=True, help="Register, inspect, pause, resume, delete, "
                                               "trigger jobs.")
app.add_typer(jobs, name="jobs")
schedule = typer.Typer(no_args_is_help=True, help="Schedule maths, no broker or API needed: "
                                                   "preview the ticks of a cron expression.")
app.add_typer(schedule, name="schedule")
dead = typer.Typer(no_args_is_help=True, help="List and replay dead-lettered task instances.")
app.add_typer(dead, name="dead-letters")
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


@jobs.command("ticks")
def jobs_ticks(
    job_id: JobId, api: Api = DEFAULT_API, output: Fmt = Output.table,
    count: Annotated[int, typer.Option(min=1, max=1000, help="How many ticks.")] = 10,
    after: Annotated[str | None, typer.Option(
        help="Ticks strictly after this ISO-8601 instant (with a zone); default now.")] = None,
) -> None:
    """Preview a job's next ticks, as the scheduler will fire them (UTC and local)."""
    answer = _call(lambda: ApiClient(api).ticks(job_id, count, after))
    if output is Output.json:
        _show(answer["ticks"], output)
    else:
        out.print(render.ticks_table(answer["ticks"], f"next ticks of {job_id}"))


class Reprocess(StrEnum):
    """Which ticks that already had a run a backfill runs again."""

    none = "none"
    failed = "failed"
    all = "all"


@jobs.command("backfill")
def jobs_backfill(
    job_id: JobId,
    start: Annotated[str, typer.Option(help="Ticks strictly after this ISO-8601 instant.")],
    end: Annotated[str, typer.Option(help="Ticks up to this ISO-8601 instant, inclusive.")],
    reprocess: Annotated[Reprocess, typer.Option(
        help="none: only ticks without a run; failed: also ticks whose runs all failed; "
             "all: every tick.")] = Reprocess.none,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List the ticks, create nothing.")]
    = False,
    max_runs: Annotated[int | None, typer.Option(
        min=1, max=1000, help="At most this many runs, oldest ticks first.")] = None,
    api: Api = DEFAULT_API, output: Fmt = Output.table,
) -> None:
    """Run a job's past ticks in (start, end] (trigger backfill); idempotent."""
    body: dict[str, Any] = {"start": _instant("--start", start).isoformat(),
                            "end": _instant("--end", end).isoformat(),
                            "reprocess": reprocess.value, "dry_run": dry_run}
    if max_runs is not None:
        body["max_runs"] = max_runs
    answer = _call(lambda: ApiClient(api).backfill(job_id, body))
    if isinstance(answer, dict) and answer.get("status") == "accepted":
        _said(job_id, "backfill", answer, output)
    else:
        _show(answer, output, render.backfill_table)


@jobs.command("skipped")
def jobs_skipped(
    job_id: JobId, api: Api = DEFAULT_API, output: Fmt = Output.table,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Most shown.")] = 100,
) -> None:
    """List a job's skipped ticks (TickSkipped) with their reason, newest first."""
    answer = _call(lambda: ApiClient(api).skipped(job_id, limit))
    _show(answer, output, lambda s: render.skipped_table(s, f"skipped ticks of {job_id}"))


def _usage_error(message: str) -> typer.Exit:
    err.print(f"[red]error[/red] {message}", highlight=False)
    return typer.Exit(2)


def _instant(option: str, value: str) -> datetime:
    try:
        instant = datetime.fromisoformat(value)
    except ValueError as exc:
        raise _usage_error(f"{option}: {value!r} is not an ISO-8601 instant") from exc
    if instant.tzinfo is None:
        raise _usage_error(f"{option}: {value!r} has no zone; add Z or an offset like +02:00")
    return instant


@schedule.command("next")
def schedule_next(
    cron: Annotated[str, typer.Option("--cron", help="Cron expression: 5 fields, 6 with "
                                                     "seconds first, or an @macro.")],
    tz: Annotated[str, typer.Option("--tz", help="IANA time zone of the expression.")] = "UTC",
    after: Annotated[str | None, typer.Option(
        help="Ticks strictly after this ISO-8601 instant (with a zone); default now.")] = None,
    before: Annotated[str | None, typer.Option(
        help="Instead: ticks strictly before this instant, latest first (what catch-up "
             "looks back at).")] = None,
    count: Annotated[int, typer.Option(min=1, help="How many ticks.")] = 10,
    dst_gap: Annotated[DstGapPolicy, typer.Option(
        help="Fixed-time ticks inside a spring-forward gap.")] = DstGapPolicy.SHIFT,
    dst_overlap: Annotated[DstOverlapPolicy, typer.Option(
        help="Fixed-time ticks whose wall time occurs twice.")] = DstOverlapPolicy.FIRST,
    job_id: Annotated[str | None, typer.Option(
        "--job-id", help="The job_id Jenkins H hashes (default: a fixed seed).")] = None,
    output: Fmt = Output.table,
) -> None:
    """Print the ticks of a cron expression, computed locally by the scheduler's functions.

    Exit code 2 for a bad expression, zone or instant (the message names the field).
    """
    if after is not None and before is not None:
        raise _usage_error("give --after or --before, not both")
    policy = {"hash_id": job_id, "dst_gap": dst_gap, "dst_overlap": dst_overlap}
    ticks: Iterator[datetime]
    try:
        validate_cron(cron, hash_id=job_id)
        zone(tz)
        if before is not None:
            ticks = prev_ticks(cron, tz, _instant("--before", before), count, **policy)
        else:
            start = _instant("--after", after) if after is not None else datetime.now(UTC)
            ticks = islice(cron_ticks(cron, tz, start, **policy), count)
        shown = [render.tick(t, tz) for t in ticks]
    except InvalidDefinition as exc:
        raise _usage_error(str(exc)) from exc
    if output is Output.json:
        out.print_json(json.dumps(shown))
    else:
        title = f"{cron} ({tz}), " + (f"latest before {before}" if before else "next")
        out.print(render.ticks_table(shown, title))


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
    """Show one run: state, timings, and each task with its dependencies, state, attempt,
    worker and duration (``-o json``: the API's run document)."""
    client = ApiClient(api)
    answer = _call(lambda: client.run(run_id))
    if output is Output.json:
        _show(answer, output)
        return
    try:  # only for depends_on: a run stays readable when its job cannot be
        job_tasks = client.job(answer["job_id"]).get("tasks") or []
    except ApiError:
        job_tasks = []
    out.print(render.run_table(answer))
    out.print(render.tasks_table(answer, job_tasks))


@app.command("logs")
def logs(
    run_id: Annotated[str, typer.Argument(help="The run's id.")],
    task: Annotated[str | None, typer.Option(help="The task; default: the run's only task "
                                              "(a DAG run needs it).")] = None,
    attempt: Annotated[int | None, typer.Option(min=1, help="Attempt number; default: the "
                                                "task's latest.")] = None,
    epoch: Annotated[int | None, typer.Option(min=0, help="One execution of a released "
                                              "attempt; default: the latest.")] = None,
    api: Api = DEFAULT_API, output: Fmt = Output.table,
) -> None:
    """Print an attempt's full output (stdout and stderr, up to the worker's cap).

    The bytes go to stdout as they were written; whether the log is partial (attempt still
    running) or truncated at the cap is said on stderr. ``-o json`` prints the API's JSON.
    """
    client = ApiClient(api)
    if task is None or attempt is None:
        run_doc = _call(lambda: client.run(run_id))
    if task is None:
        names = list(run_doc.get("tasks") or ["main"])
        if len(names) != 1:
            err.print(f"[red]error[/red] run {run_id} has tasks {', '.join(names)}: "
                      "say which with --task", highlight=False)
            raise typer.Exit(2)
        task = names[0]
    if attempt is None:
        tried = [a["attempt"] for a in run_doc.get("attempts", []) if a["task"] == task]
        if not tried:
            err.print(f"[red]error[/red] task {task!r} of run {run_id} has no attempt yet",
                      highlight=False)
            raise typer.Exit(1)
        attempt = max(tried)
    n, name = attempt, task
    if output is Output.json:
        _show(_call(lambda: client.log_json(run_id, name, n, epoch)), output)
        return
    data, info = _call(lambda: client.log(run_id, name, n, epoch))
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
    if info.get("log-truncated") == "true":
        err.print(f"-- truncated: kept {info.get('log-bytes')} of {info.get('log-bytes-total')} "
                  f"bytes (cap {info.get('log-cap-bytes')})", highlight=False)
    if info.get("log-complete") != "true":
        err.print(f"-- incomplete: attempt {n} is {info.get('attempt-state') or 'unknown'}, "
                  "more output may follow", highlight=False)


@app.command("cancel")
def cancel(run_id: Annotated[str, typer.Argument(help="The run's id.")],
           task: Annotated[str | None, typer.Option(help="Cancel only this task.")] = None,
           api: Api = DEFAULT_API, output: Fmt = Output.table) -> None:
    """Cancel a run (or one task of it); its worker stops the task at its next renewal."""
    answer = _call(lambda: ApiClient(api).cancel(run_id, task))
    if isinstance(answer, dict) and answer.get("status") == "accepted":
        _said(run_id, "cancel", answer, output)
    else:
        _show(answer, output, render.run_table)


@app.command("rerun")
def rerun(run_id: Annotated[str, typer.Argument(help="The run's id.")],
          task: Annotated[str, typer.Argument(help="The task to run again.")],
          downstream: Annotated[bool, typer.Option(
              help="Also run everything downstream of it again.")] = False,
          api: Api = DEFAULT_API, output: Fmt = Output.table) -> None:
    """Run a task of a run again (a new attempt series; the run reopens if it had ended)."""
    answer = _call(lambda: ApiClient(api).rerun(run_id, task, downstream))
    if isinstance(answer, dict) and answer.get("status") == "accepted":
        _said(run_id, "rerun", answer, output)
    else:
        _show(answer, output, render.run_table)


@dead.command("list")
def dead_letters_list(
    job_id: Annotated[str | None, typer.Option("--job-id", help="Only this job's.")] = None,
    since: Annotated[str | None, typer.Option(help="Dead-lettered at or after (ISO).")] = None,
    until: Annotated[str | None, typer.Option(help="Dead-lettered before (ISO).")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Most shown.")] = 100,
    api: Api = DEFAULT_API, output: Fmt = Output.table,
) -> None:
    """List dead letters (task instances whose last attempt failed), newest first."""
    lo = _instant("--since", since).isoformat() if since else None
    hi = _instant("--until", until).isoformat() if until else None
    answer = _call(lambda: ApiClient(api).dead_letters(job_id, lo, hi, limit))
    _show(answer, output, render.dead_letters_table)


@dead.command("replay")
def dead_letters_replay(
    run_id: Annotated[str | None, typer.Option("--run-id", help="With --task: one.")] = None,
    task: Annotated[str | None, typer.Option(help="The task of --run-id.")] = None,
    job_id: Annotated[str | None, typer.Option("--job-id", help="A job's dead letters.")] = None,
    since: Annotated[str | None, typer.Option(help="Dead-lettered at or after (ISO).")] = None,
    until: Annotated[str | None, typer.Option(help="Dead-lettered before (ISO).")] = None,
    api: Api = DEFAULT_API, output: Fmt = Output.table,
) -> None:
    """Run dead letters again: each becomes a new run (trigger replay), attempt 1."""
    body: dict[str, Any] = {"run_id": run_id, "task": task, "job_id": job_id,
                            "since": _instant("--since", since).isoformat() if since else None,
                            "until": _instant("--until", until).isoformat() if until else None}
    answer = _call(lambda: ApiClient(api).replay({k: v for k, v in body.items() if v}))
    if isinstance(answer, dict) and answer.get("status") == "accepted":
        _said(job_id or run_id or "dead letters", "replay", answer, output)
    else:
        _show(answer, output, render.replays_table)


app.command("replay")(replay_cmd.replay)


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
