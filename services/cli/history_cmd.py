"""``cronlog history``: export run-events to the cold archive; query the whole history (DuckDB).

Operator-level: the commands read the topic and the archive directly, every tenant's rows
(docs/history.md, "Tenant scoping"). Exit codes: 0 done; 1 the archive or topic could not be
read (the message names why); 2 bad input (invalid SQL, bad option).
"""

from __future__ import annotations

import csv
import json
import sys
from datetime import UTC, date, datetime
from typing import Annotated, Any

import typer
from rich.table import Table

from cronlog.errors import CronlogError
from services.cli.common import err, out

history = typer.Typer(
    no_args_is_help=True,
    help="The cold archive of run history: export to Parquet, query archive + topic with SQL.",
)

Dest = Annotated[
    str | None,
    typer.Option(
        "--dest", help="archive directory or s3://bucket/prefix (default: CRONLOG_ARCHIVE_DEST)"
    ),
]


def _settings(dest: str | None) -> Any:
    from pydantic import ValidationError

    from services.archive.settings import ArchiveSettings

    try:
        return ArchiveSettings() if dest is None else ArchiveSettings(archive_dest=dest)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        err.print(f"[red]error[/red] {field}: {first['msg']}", highlight=False)
        raise typer.Exit(2) from exc


@history.command("export")
def export_cmd(dest: Dest = None) -> None:
    """Archive every complete UTC day older than the hot window that is not archived yet."""
    from services.archive.export import export

    settings = _settings(dest)
    try:
        report = export(settings, datetime.now(UTC))
    except (CronlogError, TimeoutError) as exc:
        err.print(f"[red]error[/red] {exc}", highlight=False)
        raise typer.Exit(1) from exc
    days = ", ".join(d.isoformat() for d in report.days) or "none"
    out.print(
        f"archived {len(report.days)} day(s) ({days}): {report.rows} run-events, "
        f"{report.files} files, {report.bytes} bytes; {report.already} day(s) archived before",
        highlight=False,
    )
    if not report.days:
        from services.archive.days import horizon

        until = horizon(datetime.now(UTC), settings.archive_hot_window)
        out.print(
            f"only UTC days that end by {until.isoformat()} are archived (a day is archived "
            f"once it is over and older than the hot window, {settings.archive_hot_window})",
            highlight=False,
        )


@history.command("query")
def query_cmd(
    sql: Annotated[str, typer.Argument(help="SQL over the views run_events and runs")],
    as_json: Annotated[bool, typer.Option("--json", help="print rows as a JSON array")] = False,
    as_csv: Annotated[bool, typer.Option("--csv", help="print rows as CSV with a header")] = False,
    archive_only: Annotated[
        bool, typer.Option("--archive-only", help="skip the hot part (no broker needed)")
    ] = False,
    dest: Dest = None,
) -> None:
    """Run SQL (DuckDB) over the whole run history: the archive and the hot topic together.

    Views: run_events (one row per run-event, column source = archive|hot) and runs (one row
    per run, its latest state). Operator-level: every tenant's rows (docs/history.md).
    """
    import duckdb
    import pyarrow as pa

    from services.archive.query import run_query

    if as_json and as_csv:
        err.print("[red]error[/red] --json and --csv exclude each other", highlight=False)
        raise typer.Exit(2)
    settings = _settings(dest)
    try:
        table = run_query(settings, sql, hot=not archive_only)
    except duckdb.Error as exc:
        err.print(f"[red]error[/red] SQL: {exc}", highlight=False)
        raise typer.Exit(2) from exc
    except (CronlogError, TimeoutError, pa.ArrowException) as exc:
        err.print(f"[red]error[/red] {exc}", highlight=False)
        raise typer.Exit(1) from exc
    rows = table.to_pylist()
    if as_json:
        print(json.dumps([{k: _plain(v) for k, v in r.items()} for r in rows]))
    elif as_csv:
        writer = csv.writer(sys.stdout)
        writer.writerow(table.column_names)
        writer.writerows([_plain(v) for v in r.values()] for r in rows)
    else:
        grid = Table(*table.column_names)
        for r in rows:
            grid.add_row(*("" if v is None else str(_plain(v)) for v in r.values()))
        out.print(grid)
        out.print(f"{len(rows)} row(s)", highlight=False)


def _plain(value: object) -> object:
    """A JSON/CSV-ready value: instants and days as ISO-8601, the rest as they are."""
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, date):
        return value.isoformat()
    return value
