"""The ``cronlog replay`` command: options, progress bar, per-partition report, exit code.

Exit codes: 0 done (and verified, with ``--verify``); 1 ``--verify`` found a difference (the
first one is named); 2 bad input or an unreadable cluster (the message names the option).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from cronlog.errors import CronlogError

if TYPE_CHECKING:  # the replay machinery (confluent-kafka, rocksdict) loads only when it runs
    from services.cli.replay import PartitionResult, ReplayReport

out = Console(soft_wrap=True)  # a line is never broken, on a terminal or piped (issue 24)
err = Console(stderr=True, soft_wrap=True)


def parse_until(value: str) -> datetime:
    """Return the aware UTC instant of an ISO-8601 ``--until`` value.

    Raises:
        typer.Exit(2): not ISO-8601, or without a zone.
    """
    try:
        instant = datetime.fromisoformat(value)
    except ValueError as exc:
        err.print(
            f"[red]error[/red] --until: {value!r} is not an ISO-8601 instant", highlight=False
        )
        raise typer.Exit(2) from exc
    if instant.tzinfo is None:
        err.print(
            f"[red]error[/red] --until: {value!r} has no zone; add Z or an offset", highlight=False
        )
        raise typer.Exit(2)
    return instant.astimezone(UTC)


def _line(r: PartitionResult) -> str:
    span = f"records {r.start}..{r.end}" if r.start else f"{r.end} records"
    text = (
        f"partition {r.partition}: {span}, {r.jobs} jobs, {r.events} events, "
        f"state sha256 {r.digest[:12]}"
    )
    if r.events_verdict is None:
        return text
    state = "state ok" if r.state_detail is None else f"STATE DIFFERS: {r.state_detail}"
    events = ("events ok: " if r.events_verdict.ok else "EVENTS DIFFER: ") + r.events_verdict.detail
    snaps = ""
    if r.snapshot_detail is not None:
        snaps = f"; SNAPSHOT DIFFERS: {r.snapshot_detail}"
    elif r.snapshots_checked:
        snaps = f"; {r.snapshots_checked} later snapshots match"
    return f"{text}\n  at committed offset {r.acknowledged}: {state}; {events}{snaps}"


def _as_json(report: ReplayReport) -> dict[str, object]:
    return {
        "ok": report.ok,
        "state_dir": str(report.state_dir),
        "records": report.records,
        "dead_letters": report.dead_letters,
        "seconds": round(report.seconds, 3),
        "records_per_s": round(report.rate),
        "notes": report.notes,
        "snapshot_id": report.snapshot_id,
        "partitions": [
            {
                "partition": r.partition,
                "start_offset": r.start,
                "end_offset": r.end,
                "jobs": r.jobs,
                "events": r.events,
                "state_sha256": r.digest,
                "committed_offset": r.acknowledged,
                "state_ok": r.state_detail is None,
                "state_difference": r.state_detail,
                "events_ok": r.events_verdict.ok if r.events_verdict else None,
                "events_detail": r.events_verdict.detail if r.events_verdict else None,
                "snapshots_checked": r.snapshots_checked,
                "snapshot_difference": r.snapshot_detail,
            }
            for r in report.partitions
        ],
    }


def replay(
    verify: Annotated[
        bool,
        typer.Option(
            "--verify",
            help="Compare the replayed state with the live table (its changelog) and "
            "the replayed events with run-events; exit 1 on a difference.",
        ),
    ] = False,
    to_topic: Annotated[
        str | None,
        typer.Option(
            "--to-topic",
            help="Re-emit every replayed run-event to this topic (created if "
            "missing; same keys, encoding and partition count).",
        ),
    ] = None,
    until: Annotated[
        str | None,
        typer.Option(
            help="Rebuild the state as of this ISO-8601 instant: fold only records appended at "
            "or before it (LogAppendTime)."
        ),
    ] = None,
    state_dir: Annotated[
        Path | None,
        typer.Option("--state-dir", help="Where the rebuilt table goes (default: a new temp dir)."),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Reuse a non-empty --state-dir (its previous replay is removed)."
        ),
    ] = False,
    batch_size: Annotated[
        int,
        typer.Option(
            min=1, max=100_000, help="Records per fold batch (does not change the outcome)."
        ),
    ] = 500,
    from_zero: Annotated[
        bool,
        typer.Option(
            "--from-zero",
            help="Ignore the snapshots: fold every partition from offset 0 (refused once "
            "retention deleted a partition's head).",
        ),
    ] = False,
    json_output: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Rebuild the job table from cronlog.commands with the scheduler's own fold.

    Starts from the newest snapshot (cronlog snapshot) at or before the end (with
    --until: before that instant), or from offset 0 without one, and reads every partition
    to its end offset sampled at start. --verify starts from offset 0 while the log still
    holds it, else from the oldest snapshot it still covers (and says so), and checks every
    later snapshot it folds past.

    KAFKA_BOOTSTRAP and CRONLOG_TOPIC_PREFIX select the cluster.

    What --verify may legitimately find different: docs/architecture.md, "Replay".
    """
    from services.cli.broker_access import use_local_credentials
    from services.cli.replay import ReplayOptions, run_replay
    from topology.kafka.config import KafkaSettings

    opts = ReplayOptions(
        state_dir=state_dir,
        force=force,
        verify=verify,
        to_topic=to_topic,
        until=parse_until(until) if until is not None else None,
        batch_size=batch_size,
        from_zero=from_zero,
    )
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    columns = (
        TextColumn("replay"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("records"),
        TimeRemainingColumn(),
    )
    try:
        with Progress(*columns, console=err, transient=True) as bar:
            task = bar.add_task("replay", total=None)
            use_local_credentials()
            report = run_replay(
                KafkaSettings(),
                opts,
                lambda done, total: bar.update(task, completed=done, total=total),
            )
    except CronlogError as exc:
        err.print(f"[red]error[/red] {exc}", highlight=False)
        raise typer.Exit(2) from exc
    if json_output:
        out.print_json(json.dumps(_as_json(report)))
    else:
        for r in report.partitions:
            out.print(_line(r), highlight=False)
        for note in report.notes:
            out.print(f"note: {note}", highlight=False)
        out.print(
            f"replayed {report.records} records ({report.dead_letters} dead-lettered) in "
            f"{report.seconds:.2f}s, {report.rate:.0f} records/s; state in "
            f"{report.state_dir}",
            highlight=False,
        )
    if not report.ok:
        first = next(r for r in report.partitions if not r.ok)
        what = (
            first.state_detail
            or first.snapshot_detail
            or (first.events_verdict.detail if first.events_verdict else "")
        )
        err.print(f"[red]verify failed[/red] partition {first.partition}: {what}", highlight=False)
        raise typer.Exit(1)
    if verify:
        out.print("verify: every partition matches the live system", highlight=False)
