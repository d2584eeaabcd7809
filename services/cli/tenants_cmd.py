"""``cronlog tenants``: a tenant's usage and quotas, its dead letters (paged), its limits."""

from __future__ import annotations

from functools import partial
from typing import Annotated

import typer

from services.cli import paged, render
from services.cli.client import ApiClient
from services.cli.common import DEFAULT_API, Api, Fmt, Output, call, show

tenants = typer.Typer(no_args_is_help=True, help="A tenant's usage, quotas and dead letters.")


@tenants.command("show")
def tenants_show(tenant: str, api: Api = DEFAULT_API, output: Fmt = Output.table) -> None:
    """Show a tenant's usage (jobs, active/queued runs, suspended jobs, dead letters) and
    quotas."""
    with ApiClient(api) as client:
        answer = call(lambda: client.request("GET", f"/api/v1/tenants/{tenant}"))
    show(answer, output, partial(render.fields_table, title=f"tenant {tenant}"))


@tenants.command("dead-letters")
def tenants_dead_letters(
    tenant: str,
    api: Api = DEFAULT_API,
    output: Fmt = Output.table,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Most per page.")] = 100,
    cursor: paged.CursorOpt = None,
    all_pages: paged.AllOpt = False,
) -> None:
    """List a tenant's dead letters, newest first, a page at a time (--all: every page)."""
    with ApiClient(api) as client:
        rows, next_cursor = call(
            lambda: client.listing(
                f"/api/v1/tenants/{tenant}/dead-letters",
                "dead_letters",
                {"limit": limit},
                cursor=cursor,
                follow=all_pages,
            )
        )
    show(rows, output, render.dead_letters_table)
    paged.more(next_cursor, f"cronlog tenants dead-letters {tenant}")


@tenants.command("limits")
def tenants_limits(
    tenant: Annotated[str, typer.Argument(help="A tenant, or '*' for the fleet's size.")],
    api: Api = DEFAULT_API,
    output: Fmt = Output.table,
    weight: Annotated[int, typer.Option(help="Its weight in fair sharing, 1..1000.")] = 1,
    max_running: Annotated[
        int | None, typer.Option(help="Most of its task instances running at once.")
    ] = None,
) -> None:
    """Set a tenant's cap of running tasks and its weight in the tenant ledger (a platform
    admin only; docs/tenants.md)."""
    body = {"weight": weight, "max_running_tasks": max_running}
    with ApiClient(api) as client:
        answer = call(lambda: client.request("PUT", f"/api/v1/tenants/{tenant}/limits", json=body))
    show(answer, output, partial(render.fields_table, title=f"limits of {tenant} (accepted)"))
