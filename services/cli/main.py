"""``cronlog``: the command line of cronlog (jobs, runs, ``up``), talking to the API over HTTP."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer

from cronlog.model import DstGapPolicy, DstOverlapPolicy
from services.cli import (
    doctor_cmd,
    history_cmd,
    paged,
    render,
    replay_cmd,
    runs_cmd,
    snapshot_cmd,
    tokens_cmd,
)
from services.cli.client import ApiClient, load_job_file
from services.cli.common import (
    DEFAULT_API,
    Api,
    Fmt,
    JobId,
    Output,
    call,
    instant,
    out,
    said,
    show,
    usage_error,
)
from services.cli.secure_cmd import kafka_access, secure
from services.cli.tenants_cmd import tenants
from services.logging_setup import configure_logging

app = typer.Typer(
    no_args_is_help=True, add_completion=False, help="cronlog: distributed cron on a Kafka log."
)
jobs = typer.Typer(
    no_args_is_help=True, help="Register, inspect, pause, resume, delete, trigger jobs."
)
app.add_typer(jobs, name="jobs")
schedule = typer.Typer(
    no_args_is_help=True,
    help="Schedule maths, no broker or API needed: preview the ticks of a cron expression.",
)
app.add_typer(schedule, name="schedule")
dead = typer.Typer(no_args_is_help=True, help="List and replay dead-lettered task instances.")
app.add_typer(dead, name="dead-letters")
workers = typer.Typer(
    no_args_is_help=True, help="The workers that heartbeat: slots, free slots, held leases."
)
app.add_typer(workers, name="workers")
app.add_typer(tokens_cmd.tokens, name="tokens")
app.add_typer(tenants, name="tenants")
tenants.command("kafka-access")(kafka_access)
app.add_typer(secure, name="secure")
app.add_typer(history_cmd.history, name="history")
app.add_typer(doctor_cmd.doctor, name="doctor")


@app.callback()
def _set_up_logging() -> None:
    # What cronlog's own modules log (a broker retried, a topic under-replicated) goes to
    # stderr as a logfmt line, warnings and worse unless CRONLOG_LOG_LEVEL says otherwise;
    # a host that set logging up already (a test runner) keeps its own. A bug's traceback
    # stays typer's, on the terminal.
    if not logging.getLogger().handlers:
        configure_logging("cli", default_level="warning", uncaught=False)


def _load(path: Path) -> list[dict[str, Any]]:
    return list(load_job_file(path))


@jobs.command("apply")
def jobs_apply(
    files: Annotated[
        list[Path],
        typer.Option(
            "-f", "--file", exists=True, dir_okay=False, help="YAML job file (repeatable)."
        ),
    ],
    api: Api = DEFAULT_API,
    output: Fmt = Output.table,
) -> None:
    """Create jobs from YAML files, or update the live jobs with the same job_id."""
    client = ApiClient(api)
    for path in files:
        for body in call(partial(_load, path)):
            action, answer = call(partial(client.apply, body))
            if output is Output.json:
                show({"action": action, "answer": answer}, output)
            else:
                out.print(render.applied(body, action, answer))


@jobs.command("list")
def jobs_list(
    api: Api = DEFAULT_API,
    output: Fmt = Output.table,
    status: Annotated[str | None, typer.Option(help="active, paused, deleted or done")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Most jobs per page.")] = 100,
    cursor: paged.CursorOpt = None,
    all_pages: paged.AllOpt = False,
) -> None:
    """List jobs by job_id, a page at a time (--all: every page)."""
    params = {"status": status, "limit": limit}
    rows, next_cursor = call(
        lambda: ApiClient(api).listing(
            "/api/v1/jobs", "jobs", params, cursor=cursor, follow=all_pages
        )
    )
    show(rows, output, render.jobs_table)
    paged.more(next_cursor, "cronlog jobs list" + (f" --status {status}" if status else ""))


@jobs.command("get")
def jobs_get(job_id: JobId, api: Api = DEFAULT_API, output: Fmt = Output.table) -> None:
    """Show one job: definition, status, next run, counts."""
    show(call(lambda: ApiClient(api).job(job_id)), output, render.job_table)


@jobs.command("pause")
def jobs_pause(job_id: JobId, api: Api = DEFAULT_API, output: Fmt = Output.table) -> None:
    """Pause a job: its ticks pass unfired until it is resumed."""
    said(job_id, "paused", call(lambda: ApiClient(api).patch(job_id, {"paused": True})), output)


@jobs.command("resume")
def jobs_resume(
    job_id: JobId,
    catchup: Annotated[
        bool,
        typer.Option(
            "--catchup",
            help="fire the ticks missed while paused, per the job's catch-up policy "
            "(docs/schedules.md, 'Pause and resume')",
        ),
    ] = False,
    api: Api = DEFAULT_API,
    output: Fmt = Output.table,
) -> None:
    """Resume a paused job from now on (ticks missed while paused are not fired unless
    ``--catchup``)."""
    body = {"paused": False, "catchup": True} if catchup else {"paused": False}
    said(job_id, "resumed", call(lambda: ApiClient(api).patch(job_id, body)), output)


@jobs.command("delete")
def jobs_delete(job_id: JobId, api: Api = DEFAULT_API, output: Fmt = Output.table) -> None:
    """Delete a job: no new runs; it and its runs stay readable."""
    said(job_id, "deleted", call(lambda: ApiClient(api).delete(job_id)), output)


@jobs.command("trigger")
def jobs_trigger(job_id: JobId, api: Api = DEFAULT_API, output: Fmt = Output.table) -> None:
    """Start one manual run now: prints ``JOB: triggered run RUN_ID`` (``-o json``: the answer,
    with ``run_id``)."""
    answer = call(lambda: ApiClient(api).trigger(job_id))
    if output is Output.json:
        show(answer, output)
    else:
        note = " (accepted, not visible yet)" if answer.get("status") == "accepted" else ""
        out.print(f"{job_id}: triggered run {answer['run_id']}{note}")


@jobs.command("ticks")
def jobs_ticks(
    job_id: JobId,
    api: Api = DEFAULT_API,
    output: Fmt = Output.table,
    count: Annotated[int, typer.Option(min=1, max=1000, help="How many ticks.")] = 10,
    after: Annotated[
        str | None,
        typer.Option(help="Ticks strictly after this ISO-8601 instant (with a zone); default now."),
    ] = None,
) -> None:
    """Preview a job's next ticks, as the scheduler will fire them (UTC and local)."""
    answer = call(lambda: ApiClient(api).ticks(job_id, count, after))
    if output is Output.json:
        show(answer["ticks"], output)
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
    reprocess: Annotated[
        Reprocess,
        typer.Option(
            help="none: only ticks without a run; failed: also ticks whose runs all failed; "
            "all: every tick."
        ),
    ] = Reprocess.none,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List the ticks, create nothing.")
    ] = False,
    max_runs: Annotated[
        int | None,
        typer.Option(min=1, max=1000, help="At most this many runs, oldest ticks first."),
    ] = None,
    wait: runs_cmd.Wait = None,
    api: Api = DEFAULT_API,
    output: Fmt = Output.table,
) -> None:
    """Run a job's past ticks in (start, end] (trigger backfill); idempotent."""
    body: dict[str, Any] = {
        "start": instant("--start", start).isoformat(),
        "end": instant("--end", end).isoformat(),
        "reprocess": reprocess.value,
        "dry_run": dry_run,
    }
    if max_runs is not None:
        body["max_runs"] = max_runs
    client = ApiClient(api)
    answer = call(lambda: client.backfill(job_id, body))
    if isinstance(answer, dict) and answer.get("status") == "accepted":
        said(job_id, "backfill", answer, output)
        runs_cmd.cannot_follow(wait)
        return
    show(answer, output, render.backfill_table)
    if wait and not dry_run:
        runs_cmd.wait_for(client, [r["run_id"] for r in answer["runs"] if r["run_id"]], wait)


@jobs.command("skipped")
def jobs_skipped(
    job_id: JobId,
    api: Api = DEFAULT_API,
    output: Fmt = Output.table,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Most shown.")] = 100,
) -> None:
    """List a job's skipped ticks (TickSkipped) with their reason, newest first."""
    answer = call(lambda: ApiClient(api).skipped(job_id, limit))
    show(answer, output, lambda s: render.skipped_table(s, f"skipped ticks of {job_id}"))


@schedule.command("next")
def schedule_next(
    cron: Annotated[
        str,
        typer.Option(
            "--cron", help="Cron expression: 5 fields, 6 with seconds first, or an @macro."
        ),
    ],
    tz: Annotated[str, typer.Option("--tz", help="IANA time zone of the expression.")] = "UTC",
    after: Annotated[
        str | None,
        typer.Option(help="Ticks strictly after this ISO-8601 instant (with a zone); default now."),
    ] = None,
    before: Annotated[
        str | None,
        typer.Option(
            help="Instead: ticks strictly before this instant, latest first (what catch-up "
            "looks back at)."
        ),
    ] = None,
    count: Annotated[int, typer.Option(min=1, help="How many ticks.")] = 10,
    dst_gap: Annotated[
        DstGapPolicy, typer.Option(help="Fixed-time ticks inside a spring-forward gap.")
    ] = DstGapPolicy.SHIFT,
    dst_overlap: Annotated[
        DstOverlapPolicy, typer.Option(help="Fixed-time ticks whose wall time occurs twice.")
    ] = DstOverlapPolicy.FIRST,
    job_id: Annotated[
        str | None,
        typer.Option("--job-id", help="The job_id Jenkins H hashes (default: a fixed seed)."),
    ] = None,
    output: Fmt = Output.table,
) -> None:
    """Print the ticks of a cron expression, computed locally by the scheduler's functions.

    Exit code 2 for a bad expression, zone or instant (the message names the field).
    """
    if after is not None and before is not None:
        raise usage_error("give --after or --before, not both")
    from itertools import islice

    from cronlog.errors import InvalidDefinition
    from cronlog.schedule import cron_ticks, prev_ticks, validate_cron, zone

    ticks: Iterator[datetime]
    try:
        validate_cron(cron, hash_id=job_id)
        zone(tz)
        if before is not None:
            ticks = prev_ticks(
                cron,
                tz,
                instant("--before", before),
                count,
                hash_id=job_id,
                dst_gap=dst_gap,
                dst_overlap=dst_overlap,
            )
        else:
            start = instant("--after", after) if after is not None else datetime.now(UTC)
            ticks = islice(
                cron_ticks(
                    cron, tz, start, hash_id=job_id, dst_gap=dst_gap, dst_overlap=dst_overlap
                ),
                count,
            )
        shown = [render.tick(t, tz) for t in ticks]
    except InvalidDefinition as exc:
        raise usage_error(str(exc)) from exc
    if output is Output.json:
        out.print_json(json.dumps(shown))
    else:
        title = f"{cron} ({tz}), " + (f"latest before {before}" if before else "next")
        out.print(render.ticks_table(shown, title))


runs = typer.Typer(
    cls=runs_cmd.RunsGroup,
    no_args_is_help=True,
    help="A job's runs (`cronlog runs JOB` = `cronlog runs list JOB`), or watch runs live.",
)
app.add_typer(runs, name="runs")
runs.command("list")(runs_cmd.runs)
runs.command("watch")(runs_cmd.watch_runs)
app.command("run")(runs_cmd.run)
app.command("logs")(runs_cmd.logs)
app.command("cancel")(runs_cmd.cancel)
app.command("rerun")(runs_cmd.rerun)
dead.command("list")(runs_cmd.dead_letters_list)
dead.command("replay")(runs_cmd.dead_letters_replay)

app.command("replay")(replay_cmd.replay)
app.command("snapshot")(snapshot_cmd.snapshot)


@workers.command("list")
def workers_list(
    api: Api = DEFAULT_API,
    output: Fmt = Output.table,
    include_lost: Annotated[
        bool,
        typer.Option(
            "--include-lost", help="Also list workers whose last heartbeat is past its ttl."
        ),
    ] = False,
) -> None:
    """List the workers that heartbeat (a worker stopped gracefully is not listed)."""
    with ApiClient(api) as client:
        show(call(lambda: client.workers(include_lost)), output, render.workers_table)


@app.command("up")
def up(
    examples: Annotated[bool, typer.Option("--examples", help="Apply examples/*.yaml.")] = False,
    duration: Annotated[
        float | None,
        typer.Option(help="Stop everything after this many seconds (default: run until Ctrl-C)."),
    ] = None,
    api: Annotated[
        str | None,
        typer.Option(
            "--api", help="URL the started API answers on (default from CRONLOG_API_HOST/PORT)."
        ),
    ] = None,
) -> None:
    """Start broker (unless KAFKA_BOOTSTRAP), scheduler, worker, API and relays; show runs live.

    Isolated by default: the local broker authenticates every client (CRONLOG_KAFKA_SECURE=0:
    off), a root worker's tasks run as an unprivileged user in private directories
    (CRONLOG_TASK_ISOLATION=off: off), state/ is 0700; the start lines say what is on.
    """
    from services.cli.up import run_up  # heavy imports (Kafka admin) only when needed

    raise typer.Exit(run_up(examples=examples, duration_s=duration, api_url=api))


if __name__ == "__main__":
    app()
