"""``cronlog`` commands about runs: runs list|watch, run, logs, cancel, rerun, dead-letters
list|replay.

Plain functions; ``services/cli/main.py`` registers them on the typer app.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from services.cli import paged, render
from services.cli.client import ApiClient, ApiError
from services.cli.common import (
    DEFAULT_API,
    Api,
    Fmt,
    JobId,
    Output,
    call,
    err,
    instant,
    out,
    said,
    show,
)


class RunsGroup(TyperGroup):
    """``cronlog runs``: ``list`` is the default subcommand, so ``cronlog runs JOB`` (as before
    ``watch`` existed) means ``cronlog runs list JOB``. A job named ``watch`` or ``list`` is
    listed with ``cronlog runs list NAME``."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """Insert ``list`` when the first word is not a subcommand (nor ``--help``)."""
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["list", *args]
        return super().parse_args(ctx, args)


def watch_runs(
    job_id: Annotated[
        str | None, typer.Option("--job-id", help="Only this job's runs; default: every job.")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=200, help="Most runs shown.")] = 25,
    duration: Annotated[
        float | None, typer.Option(min=0, help="Stop after this many seconds (default: Ctrl-C).")
    ] = None,
    api: Api = DEFAULT_API,
) -> None:
    """Show runs live, newest tick first, as ``./ops/up`` does: tick, trigger lag, state,
    attempt, worker, exit code; redrawn every second. Off a terminal: a line per run change."""
    client = ApiClient(api)
    # unreachable, refused, or a job not found (another tenant's too): say so, exit 1/2 at once
    call(lambda: client.job(job_id) if job_id else client.jobs())
    try:
        from services.cli import watch

        watch.watch(client, out, job_id=job_id, limit=limit, duration_s=duration)
    except KeyboardInterrupt:
        out.line()


def runs(
    job_id: JobId,
    api: Api = DEFAULT_API,
    output: Fmt = Output.table,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Most runs per page.")] = 20,
    cursor: paged.CursorOpt = None,
    all_pages: paged.AllOpt = False,
    state: Annotated[str | None, typer.Option(help="Only runs in this state.")] = None,
    trigger: Annotated[
        str | None, typer.Option(help="Only runs it started: schedule, manual, backfill, ...")
    ] = None,
    since: Annotated[str | None, typer.Option(help="scheduled_for at or after (ISO).")] = None,
    until: Annotated[str | None, typer.Option(help="scheduled_for before (ISO).")] = None,
) -> None:
    """List a job's runs, newest first, a page at a time (--all: every page)."""
    params = {
        "limit": limit,
        "state": state,
        "trigger": trigger,
        "since": instant("--since", since).isoformat() if since else None,
        "until": instant("--until", until).isoformat() if until else None,
    }
    rows, next_cursor = call(
        lambda: ApiClient(api).listing(
            f"/api/v1/jobs/{job_id}/runs", "runs", params, cursor=cursor, follow=all_pages
        )
    )
    show(rows, output, lambda rs: render.runs_table(rs, f"runs of {job_id}"))
    paged.more(next_cursor, f"cronlog runs list {job_id}")


def run(
    run_id: Annotated[str, typer.Argument(help="The run's id.")],
    api: Api = DEFAULT_API,
    output: Fmt = Output.table,
) -> None:
    """Show one run: state, timings, and each task with its dependencies, state, attempt,
    worker and duration (``-o json``: the API's run document)."""
    client = ApiClient(api)
    answer = call(lambda: client.run(run_id))
    if output is Output.json:
        show(answer, output)
        return
    try:  # only for depends_on: a run stays readable when its job cannot be
        job_tasks = client.job(answer["job_id"]).get("tasks") or []
    except ApiError:
        job_tasks = []
    out.print(render.run_table(answer))
    out.print(render.tasks_table(answer, job_tasks))


def logs(
    run_id: Annotated[str, typer.Argument(help="The run's id.")],
    task: Annotated[
        str | None,
        typer.Option(help="The task; default: the run's only task (a DAG run needs it)."),
    ] = None,
    attempt: Annotated[
        int | None, typer.Option(min=1, help="Attempt number; default: the task's latest.")
    ] = None,
    epoch: Annotated[
        int | None,
        typer.Option(min=0, help="One execution of a released attempt; default: the latest."),
    ] = None,
    api: Api = DEFAULT_API,
    output: Fmt = Output.table,
) -> None:
    """Print an attempt's full output (stdout and stderr, up to the worker's cap).

    The bytes go to stdout as they were written; whether the log is partial (attempt still
    running) or truncated at the cap is said on stderr. ``-o json`` prints the API's JSON.
    """
    client = ApiClient(api)
    if task is None or attempt is None:
        run_doc = call(lambda: client.run(run_id))
    if task is None:
        names = list(run_doc.get("tasks") or ["main"])
        if len(names) != 1:
            err.print(
                f"[red]error[/red] run {run_id} has tasks {', '.join(names)}: "
                "say which with --task",
                highlight=False,
            )
            raise typer.Exit(2)
        task = names[0]
    if attempt is None:
        tried = [a["attempt"] for a in run_doc.get("attempts", []) if a["task"] == task]
        if not tried:
            err.print(
                f"[red]error[/red] task {task!r} of run {run_id} has no attempt yet",
                highlight=False,
            )
            raise typer.Exit(1)
        attempt = max(tried)
    n, name = attempt, task
    if output is Output.json:
        show(call(lambda: client.log_json(run_id, name, n, epoch)), output)
        return
    data, info = call(lambda: client.log(run_id, name, n, epoch))
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
    if info.get("log-truncated") == "true":
        err.print(
            f"-- truncated: kept {info.get('log-bytes')} of {info.get('log-bytes-total')} "
            f"bytes (cap {info.get('log-cap-bytes')})",
            highlight=False,
        )
    if info.get("log-complete") != "true":
        err.print(
            f"-- incomplete: attempt {n} is {info.get('attempt-state') or 'unknown'}, "
            "more output may follow",
            highlight=False,
        )


def cancel(
    run_id: Annotated[str, typer.Argument(help="The run's id.")],
    task: Annotated[str | None, typer.Option(help="Cancel only this task.")] = None,
    api: Api = DEFAULT_API,
    output: Fmt = Output.table,
) -> None:
    """Cancel a run (or one task of it); its worker stops the task at its next renewal."""
    answer = call(lambda: ApiClient(api).cancel(run_id, task))
    if isinstance(answer, dict) and answer.get("status") == "accepted":
        said(run_id, "cancel", answer, output)
    else:
        show(answer, output, render.run_table)


def rerun(
    run_id: Annotated[str, typer.Argument(help="The run's id.")],
    task: Annotated[str, typer.Argument(help="The task to run again.")],
    downstream: Annotated[
        bool, typer.Option(help="Also run everything downstream of it again.")
    ] = False,
    api: Api = DEFAULT_API,
    output: Fmt = Output.table,
) -> None:
    """Run a task of a run again (a new attempt series; the run reopens if it had ended)."""
    answer = call(lambda: ApiClient(api).rerun(run_id, task, downstream))
    if isinstance(answer, dict) and answer.get("status") == "accepted":
        said(run_id, "rerun", answer, output)
    else:
        show(answer, output, render.run_table)


def dead_letters_list(
    job_id: Annotated[str | None, typer.Option("--job-id", help="Only this job's.")] = None,
    since: Annotated[str | None, typer.Option(help="Dead-lettered at or after (ISO).")] = None,
    until: Annotated[str | None, typer.Option(help="Dead-lettered before (ISO).")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Most per page.")] = 100,
    cursor: paged.CursorOpt = None,
    all_pages: paged.AllOpt = False,
    api: Api = DEFAULT_API,
    output: Fmt = Output.table,
) -> None:
    """List dead letters (task instances whose last attempt failed), newest first, a page at
    a time (--all: every page)."""
    params = {
        "job_id": job_id,
        "since": instant("--since", since).isoformat() if since else None,
        "until": instant("--until", until).isoformat() if until else None,
        "limit": limit,
    }
    rows, next_cursor = call(
        lambda: ApiClient(api).listing(
            "/api/v1/dead-letters", "dead_letters", params, cursor=cursor, follow=all_pages
        )
    )
    show(rows, output, render.dead_letters_table)
    paged.more(next_cursor, "cronlog dead-letters list" + (f" --job-id {job_id}" if job_id else ""))


def dead_letters_replay(
    run_id: Annotated[str | None, typer.Option("--run-id", help="With --task: one.")] = None,
    task: Annotated[str | None, typer.Option(help="The task of --run-id.")] = None,
    job_id: Annotated[str | None, typer.Option("--job-id", help="A job's dead letters.")] = None,
    since: Annotated[str | None, typer.Option(help="Dead-lettered at or after (ISO).")] = None,
    until: Annotated[str | None, typer.Option(help="Dead-lettered before (ISO).")] = None,
    cursor: Annotated[
        str | None, typer.Option("--cursor", help="Continue a replay that stopped at its limit.")
    ] = None,
    wait: Wait = None,
    api: Api = DEFAULT_API,
    output: Fmt = Output.table,
) -> None:
    """Run dead letters again: each becomes a new run (trigger replay), attempt 1."""
    body: dict[str, Any] = {
        "run_id": run_id,
        "task": task,
        "job_id": job_id,
        "since": instant("--since", since).isoformat() if since else None,
        "until": instant("--until", until).isoformat() if until else None,
        "cursor": cursor,
    }
    client = ApiClient(api)
    answer = call(lambda: client.replay({k: v for k, v in body.items() if v}))
    if isinstance(answer, dict) and answer.get("status") == "accepted":
        said(job_id or run_id or "dead letters", "replay", answer, output)
        cannot_follow(wait)
        return
    show(answer, output, render.replays_table)
    if answer.get("next_cursor"):
        err.print(
            f"replayed {answer['replayed']}; more were selected than one request replays: "
            f"run it again with --cursor {answer['next_cursor']}",
            highlight=False,
            soft_wrap=True,
        )
    if wait:
        wait_for(client, [r["replay_run_id"] for r in answer["replays"]], wait)


Wait = Annotated[
    float | None,
    typer.Option(
        "--wait",
        min=1,
        help="Then follow the new runs with a progress bar for at most this many seconds; "
        "exit 0 if all succeeded, 3 if one did not, 124 if one had not ended (1/2: the API "
        "refused or could not be reached, as for every command).",
    ),
]


def cannot_follow(wait: float | None) -> None:
    """With ``--wait``, an answer that lists no runs yet (202: not folded within the API's
    wait) cannot be followed: say so and exit 124, never 0 as if the runs had succeeded."""
    if wait:
        err.print("the runs are not known yet (202): nothing to follow", highlight=False)
        raise typer.Exit(124)


def wait_for(client: ApiClient, run_ids: list[str], timeout_s: float) -> None:
    """Follow ``run_ids`` to their end on stderr (``watch.follow``) and exit with
    ``watch.exit_code``; the final tally goes to stdout."""
    if not run_ids:
        return
    try:
        from services.cli import watch

        states = watch.follow(client, run_ids, err, timeout_s)
    except ApiError as exc:
        err.print(f"[red]error[/red] {exc.describe()}", highlight=False)
        raise typer.Exit(2 if exc.status == 0 else 1) from exc
    code = watch.exit_code(states)
    tally = ", ".join(
        f"{sum(s == k for s in states.values())} {k}" for k in sorted(set(states.values()))
    )
    out.print(f"{len(run_ids)} run(s): {tally}", highlight=False)
    raise typer.Exit(code)
