"""What the ``cronlog`` commands share: output format, options, API-call error handling."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from cronlog.errors import CronlogError
from services.cli.client import DEFAULT_API, ApiError

__all__ = [
    "DEFAULT_API",
    "Api",
    "Fmt",
    "JobId",
    "Output",
    "call",
    "err",
    "instant",
    "out",
    "said",
    "show",
    "usage_error",
]

# Off a terminal (a pipe, a file, CI) rich would cut tables to 80 columns; COLUMNS still wins.
_WIDTH = None if sys.stdout.isatty() or "COLUMNS" in os.environ else 200
out = Console(width=_WIDTH)
err = Console(stderr=True)


class Output(StrEnum):
    """How read commands print their answer."""

    table = "table"
    json = "json"


Api = Annotated[
    str, typer.Option("--api", envvar="CRONLOG_API_URL", help="Base URL of the cronlog API.")
]
Fmt = Annotated[Output, typer.Option("-o", "--output", help="table (default) or json.")]
JobId = Annotated[str, typer.Argument(help="The job's id.")]


def call(fn: Callable[[], Any]) -> Any:
    """Run an API call; print its error and exit 1 (API error) or 2 (unreachable)."""
    try:
        return fn()
    except ApiError as exc:
        err.print(f"[red]error[/red] {exc.describe()}", highlight=False)
        raise typer.Exit(2 if exc.status == 0 else 1) from exc
    except CronlogError as exc:
        err.print(f"[red]error[/red] {exc}", highlight=False)
        raise typer.Exit(1) from exc


def show(answer: Any, fmt: Output, table: Callable[[Any], Table] | None = None) -> None:
    if fmt is Output.json or table is None:
        out.print_json(json.dumps(answer))
    else:
        out.print(table(answer))


def said(job_id: str, verb: str, answer: Any, fmt: Output) -> None:
    if fmt is Output.json:
        show(answer, fmt)
    elif isinstance(answer, dict) and answer.get("status") == "accepted":
        out.print(f"{job_id}: {verb} accepted, not visible yet (see {answer['location']})")
    else:
        out.print(f"{job_id}: {verb}")


def usage_error(message: str) -> typer.Exit:
    err.print(f"[red]error[/red] {message}", highlight=False)
    return typer.Exit(2)


def instant(option: str, value: str) -> datetime:
    try:
        instant = datetime.fromisoformat(value)
    except ValueError as exc:
        raise usage_error(f"{option}: {value!r} is not an ISO-8601 instant") from exc
    if instant.tzinfo is None:
        raise usage_error(f"{option}: {value!r} has no zone; add Z or an offset like +02:00")
    return instant
