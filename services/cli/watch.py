"""Following runs from the terminal: ``cronlog runs watch``, ``./ops/up``'s table, ``--wait``.

Everything here reads the API (``ApiClient``) once a second; nothing talks to Kafka. On a
terminal a rich ``Live`` table is redrawn in place; off a terminal (a pipe, CI, ``nohup``) a line
is printed per run that appears or changes state instead, since a live table would show nothing
until exit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from services.cli import render
from services.cli.client import ApiClient, ApiError

ENDED = frozenset({"succeeded", "failed", "cancelled"})
"""Run states a run never leaves (``RunOut.state``)."""
POLL_S = 1.0


def recent_runs(client: ApiClient, job_id: str | None, limit: int) -> tuple[list[Any], int]:
    """Return the ``limit`` newest runs (by tick) of ``job_id``, or of every job the caller
    sees, and how many runs those jobs have queued.

    Raises:
        ApiError: the API refused or could not be reached.
    """
    jobs = [client.job(job_id)] if job_id else client.jobs()
    runs: list[dict[str, Any]] = []
    for job in jobs:
        runs.extend(client.runs(job["job_id"], limit=limit))
    runs.sort(key=lambda r: r["scheduled_for"], reverse=True)
    return runs[:limit], sum(job["counts"].get("queued", 0) for job in jobs)


def snapshot(
    client: ApiClient, job_id: str | None, limit: int, note: str, caption: RenderableType = ""
) -> Group:
    """Return the runs table once (an API error is shown in its place, in red)."""
    try:
        runs, queued = recent_runs(client, job_id, limit)
        body: RenderableType = render.runs_table(
            runs, f"runs of {job_id or 'every job'} (api {client.base_url}, {queued} queued{note})"
        )
    except ApiError as exc:
        body = Text(f"API: {exc.describe()}", "red")
    return Group(body, caption)


def watch(
    client: ApiClient,
    console: Console,
    *,
    job_id: str | None = None,
    limit: int = 25,
    duration_s: float | None = None,
    note: str = "",
    check: Callable[[], Any] = lambda: None,
    caption: Callable[[], RenderableType] = lambda: "",
) -> None:
    """Show runs live until ``duration_s`` passes (None: until interrupted).

    Args:
        client: the API.
        console: where to draw.
        job_id: one job's runs; None: every job the caller sees.
        limit: most runs shown.
        duration_s: seconds to watch; None: until Ctrl-C.
        note: appended to the table's title (``./ops/up``: how to stop).
        check: called once a second (``./ops/up``: its supervisor's check of the services).
        caption: the line under the table (``./ops/up``: each service's state).
    """
    end = time.monotonic() + duration_s if duration_s is not None else None
    if not console.is_terminal:
        print_changes(client, console, job_id, end, check)
        return
    with Live(console=console, auto_refresh=False) as live:
        while True:
            live.update(snapshot(client, job_id, limit, note, caption()), refresh=True)
            if end is not None and time.monotonic() >= end:
                break
            time.sleep(POLL_S)
            check()
    console.line()


def print_changes(
    client: ApiClient,
    console: Console,
    job_id: str | None,
    end: float | None,
    check: Callable[[], Any] = lambda: None,
) -> None:
    """Print one line each time a run appears or changes state, until ``end`` (monotonic s)."""
    seen: dict[str, str] = {}
    while True:
        try:
            runs, _ = recent_runs(client, job_id, 25)
            for run in reversed(runs):
                if seen.get(run["run_id"]) != run["state"]:
                    console.print(_change(run), highlight=False, soft_wrap=True)
            seen = {run["run_id"]: run["state"] for run in runs}  # bounded: the runs shown
        except ApiError as exc:
            console.print(f"API: {exc.describe()}", highlight=False)
        check()
        if end is not None and time.monotonic() >= end:
            return
        time.sleep(POLL_S)


def _change(run: dict[str, Any]) -> str:
    lag = run.get("trigger_lag_s")
    return (
        f"{run['scheduled_for']}  {run['job_id']}  {run['run_id']}  {run['state']}"
        + (f"  lag {lag:.3f}s" if lag is not None else "")
        + (f"  exit {render.outcome(run)}" if run.get("exit_code") else "")
    )


def follow(
    client: ApiClient, run_ids: Iterable[str], console: Console, timeout_s: float
) -> dict[str, str]:
    """Wait for runs to end, with a progress bar (runs ended of all), at most ``timeout_s``.

    A run the API does not know yet (its command not folded) counts as not ended; an API that
    cannot be reached is asked again within the budget (the runs go on without it).

    Returns:
        Each run's last state seen (``unknown`` for one never seen).

    Raises:
        ApiError: the API refused (not 404: a run not known yet).
    """
    states = dict.fromkeys(run_ids, "unknown")
    end = time.monotonic() + timeout_s
    columns = (
        TextColumn("runs ended"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task("", total=len(states))
        while True:
            note = ""
            try:
                for run_id, state in states.items():
                    if state not in ENDED:
                        states[run_id] = _state(client, run_id)
            except ApiError as exc:
                if exc.status != 0:
                    raise
                note = " (API unreachable, asking again)"
            done = sum(s in ENDED for s in states.values())
            bar.update(task, completed=done, description=_tally(states) + note)
            if done == len(states) or time.monotonic() >= end:
                return states
            time.sleep(POLL_S)


def _state(client: ApiClient, run_id: str) -> str:
    try:
        return str(client.run(run_id)["state"])
    except ApiError as exc:
        if exc.status == 404:
            return "unknown"
        raise


def _tally(states: dict[str, str]) -> str:
    counts: dict[str, int] = {}
    for s in states.values():
        counts[s] = counts.get(s, 0) + 1
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))


RUN_NOT_SUCCEEDED = 3
"""``--wait``'s exit code when a run ended otherwise than succeeded (1 and 2 are the CLI's
codes for an API that refused or could not be reached)."""


def exit_code(states: dict[str, str]) -> int:
    """0 when every run succeeded, ``RUN_NOT_SUCCEEDED`` when one ended otherwise, 124 when
    one had not ended (the ``timeout`` command's code)."""
    if any(s not in ENDED for s in states.values()):
        return 124
    return 0 if all(s == "succeeded" for s in states.values()) else RUN_NOT_SUCCEEDED
