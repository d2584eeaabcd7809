"""Geometry of the console's inline SVGs: a run's DAG and a job's runs timeline. Pure functions.

The templates draw what these return; nothing here knows HTML, so the layout is unit-tested
on its own (tests/unit/test_console.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from markupsafe import Markup, escape

from cronlog.errors import CronlogError

NODE_W, NODE_H = 160, 54
"""A task node's box, pixels."""
COL_GAP, ROW_GAP, PAD = 60, 24, 10
"""Space between columns, between rows, and around the drawing, pixels."""
BAR_H, BAR_GAP, TIMELINE_W = 14, 4, 900
"""A timeline bar's height and spacing, and the drawing's width, pixels."""


@dataclass(frozen=True, slots=True)
class Node:
    """A task placed in the drawing: column ``depth``, ``row`` in it; ``x, y`` its top left."""

    task: str
    depth: int
    row: int
    x: int
    y: int


@dataclass(frozen=True, slots=True)
class Edge:
    """A line from the right middle of ``upstream``'s box to the left middle of ``task``'s."""

    upstream: str
    task: str
    x1: int
    y1: int
    x2: int
    y2: int


def depths(tasks: Sequence[str], edges: Iterable[tuple[str, str]]) -> dict[str, int]:
    """Return each task's depth: 0 without upstream tasks, else 1 + its deepest upstream's.

    Args:
        tasks: the task names, in the order rows are filled.
        edges: ``(upstream, task)`` pairs; pairs naming a task not in ``tasks`` are ignored.

    Raises:
        CronlogError: the edges make a cycle (naming a task on it).
    """
    known = set(tasks)
    ups: dict[str, list[str]] = {t: [] for t in tasks}
    for up, task in edges:
        if up in known and task in known:
            ups[task].append(up)
    out: dict[str, int] = {}
    visiting: set[str] = set()

    def depth(task: str) -> int:
        if task in out:
            return out[task]
        if task in visiting:
            raise CronlogError(f"task {task!r} is on a cycle of depends_on")
        visiting.add(task)
        out[task] = max((depth(u) + 1 for u in ups[task]), default=0)
        visiting.discard(task)
        return out[task]

    for t in tasks:
        depth(t)
    return out


def layout(
    tasks: Sequence[str], edges: Iterable[tuple[str, str]]
) -> tuple[list[Node], list[Edge], int, int]:
    """Place a DAG in layers: the tasks of depth d in column d, rows in ``tasks`` order.

    Returns:
        ``(nodes, edges, width, height)``: nodes in ``tasks`` order, the edges between known
        tasks, and the drawing's size in pixels.

    Raises:
        CronlogError: the edges make a cycle.
    """
    pairs = [(u, t) for u, t in edges if u in tasks and t in tasks]
    level = depths(tasks, pairs)
    rows: dict[int, int] = {}
    nodes = []
    for t in tasks:
        d = level[t]
        row = rows.get(d, 0)
        rows[d] = row + 1
        x, y = PAD + d * (NODE_W + COL_GAP), PAD + row * (NODE_H + ROW_GAP)
        nodes.append(Node(t, d, row, x, y))
    at = {n.task: n for n in nodes}
    lines = [
        Edge(
            u,
            t,
            at[u].x + NODE_W,
            at[u].y + NODE_H // 2,
            at[t].x,
            at[t].y + NODE_H // 2,
        )
        for u, t in pairs
    ]
    columns, most_rows = max(level.values(), default=-1) + 1, max(rows.values(), default=0)
    width = 2 * PAD + max(0, columns * (NODE_W + COL_GAP) - COL_GAP)
    height = 2 * PAD + max(0, most_rows * (NODE_H + ROW_GAP) - ROW_GAP)
    return nodes, lines, width, height


@dataclass(frozen=True, slots=True)
class Bar:
    """One run in the timeline: ``x`` and ``width`` in pixels, ``y`` its row's top."""

    run_id: str
    state: str
    start: str
    end: str | None
    x: int
    y: int
    width: int


def timeline(runs: Sequence[Mapping[str, Any]], now: datetime) -> tuple[list[Bar], int, int]:
    """Place runs as bars from their start (or creation) to their end (or ``now``).

    Args:
        runs: run documents (``run_id``, ``state``, ``created_at``, ``started_at``,
            ``finished_at`` as ISO-8601 strings), newest first; one row each, in that order.
        now: the right edge for runs not ended.

    Returns:
        ``(bars, width, height)``; a bar is at least 2 pixels wide.
    """
    spans = []
    for run in runs:
        start = str(run.get("started_at") or run["created_at"])
        end = run.get("finished_at")
        t0 = datetime.fromisoformat(start)
        t1 = datetime.fromisoformat(str(end)) if end else now
        spans.append((run, start, end, t0, max(t0, t1)))
    if not spans:
        return [], TIMELINE_W, 0
    lo, hi = min(s[3] for s in spans), max(s[4] for s in spans)
    scale = (TIMELINE_W - 2 * PAD) / max((hi - lo).total_seconds(), 1e-3)
    bars = []
    for i, (run, start, end, t0, t1) in enumerate(spans):
        x = PAD + round((t0 - lo).total_seconds() * scale)
        width = max(2, round((t1 - t0).total_seconds() * scale))
        y = PAD + i * (BAR_H + BAR_GAP)
        bars.append(
            Bar(
                str(run["run_id"]), str(run["state"]), start, str(end) if end else None, x, y, width
            )
        )
    return bars, TIMELINE_W, 2 * PAD + len(bars) * (BAR_H + BAR_GAP)


def ran(ti: Mapping[str, Any]) -> bool:
    """True if a task instance ever ran (claimed, started, or waiting to retry): only then
    does its attempt number say something (a pending or upstream_failed task has none)."""
    return bool(
        ti.get("claimed_at")
        or ti.get("started_at")
        or ti.get("state") in ("running", "retrying")
        or int(ti.get("attempt") or 1) > 1
    )


def task_detail(ti: Mapping[str, Any]) -> str:
    """The second line of a task's node: its state, and its attempt if it ran
    (``failed · attempt 2``; ``upstream failed``), short enough for a ``NODE_W`` box."""
    state = str(ti.get("state") or "").replace("_", " ")
    return f"{state} · attempt {ti.get('attempt')}" if ran(ti) else state


def when(value: str | None, empty: str = "", also: str | None = None) -> Markup:
    """An instant as the console shows it: ``<time datetime=ISO>`` reading
    ``2026-12-03 13:15:41 UTC`` (whole seconds), which ``static/times.js`` turns into a
    relative time (``3 min ago``, ``in 12 s``) with the viewer's zone and UTC on hover.

    Args:
        value: an ISO-8601 instant (``…Z`` or with an offset), or None/"" (``empty`` shown).
        empty: the text of a missing instant.
        also: more text for the hover (a tick in its job's own zone).
    """
    if not value:
        return escape(empty)
    at = datetime.fromisoformat(value)
    utc = at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    title = f"{utc} · {also}" if also else utc
    return Markup('<time datetime="{}" title="{}" data-also="{}">{}</time>').format(
        at.isoformat(), title, also or "", utc
    )
