"""The table of ``bench/compare.py``: which figures each workload shows, medians, ratios,
the load average and the CPU per task of every process, as markdown. Pure: no I/O.

A run is a dict (the ``--json`` file keeps them as they are)::

    {"system": "cronlog" | "celery", "workload": "burst5k", "run": 1,
     "load_at_start": [1 min, 5 min, 15 min], "tasks": tasks run,
     "figures": {name: number}, "cpu_s": {process: CPU seconds in the window},
     "error": None | "what went wrong"}
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

SYSTEMS = ("cronlog", "celery")
TIMES = "\u00d7"
"""The multiplication sign of a ratio."""
LABELS = {"cronlog": "cronlog", "celery": "Celery + Redis"}

GROW_S = 1.0
"""A 10 s window "grows" when its p99 lag is more than this above the previous window's..."""
GROW_FACTOR = 1.5
"""... and more than this many times it: a backlog building, not noise of a few ms."""


@dataclass(frozen=True, slots=True)
class Row:
    """One figure of a workload: ``key`` in a run's figures, shown times ``scale``."""

    key: str
    label: str
    scale: float = 1.0
    digits: int = 2
    ratio: bool = True


CPU_ROW = Row("cpu_ms_per_task", "CPU ms/task, every process")
ROWS = {
    "burst": (
        Row("last_started_s", "last task started, s after the due second"),
        Row("lag_p99_s", "p99 trigger lag, s"),
        Row("missing", "missing / doubled", digits=0, ratio=False),
    ),
    "sustained": (
        Row("lag_p99_s", "p99 trigger lag, s"),
        Row("lag_max_s", "max trigger lag, s"),
        Row("windows_growing", "10 s windows growing", digits=0, ratio=False),
        Row("missing", "missing / doubled", digits=0, ratio=False),
    ),
    "chain": (
        Row("hop_p50_s", "hop median, ms", scale=1000.0, digits=1),
        Row("hop_p99_s", "hop p99, ms", scale=1000.0, digits=1),
    ),
}


def windows_growing(p99s: Sequence[float | None]) -> int:
    """How many 10 s windows have a p99 lag above the previous one's by more than
    :data:`GROW_S` and :data:`GROW_FACTOR` times (``None`` windows are skipped)."""
    vals = [v for v in p99s if v is not None and not math.isnan(v)]
    return sum(1 for a, b in itertools.pairwise(vals) if b > a + GROW_S and b > a * GROW_FACTOR)


def cpu_ms_per_task(cpu_s: dict[str, float], tasks: int) -> float:
    """Milliseconds of CPU per task, all processes together (NaN for no tasks)."""
    return sum(cpu_s.values()) * 1000.0 / tasks if tasks > 0 else math.nan


def median(values: Sequence[float | None]) -> float:
    """Median of the numbers among ``values`` (NaN when there are none)."""
    nums = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(nums) if nums else math.nan


def ratio(a: Sequence[float | None], b: Sequence[float | None]) -> float:
    """median(a) / median(b); NaN when either is missing or median(b) is 0."""
    ma, mb = median(a), median(b)
    return ma / mb if not math.isnan(ma) and not math.isnan(mb) and mb != 0 else math.nan


def value(run: dict[str, Any], key: str) -> float | None:
    """A run's figure ``key`` (``cpu_ms_per_task`` is worked out; ``missing`` includes the
    doubled), or None when the run failed or lacks it."""
    if run.get("error"):
        return None
    if key == CPU_ROW.key:
        return cpu_ms_per_task(run["cpu_s"], run["tasks"])
    figures = run["figures"]
    if key == "missing":
        return float(figures.get("missing", 0) + figures.get("duplicates", 0))
    got = figures.get(key)
    return None if got is None else float(got)


def _fmt(v: float | None, row: Row) -> str:
    if v is None or math.isnan(v):
        return "—"
    return f"{v * row.scale:,.{row.digits}f}"


def _runs_text(runs: list[dict[str, Any]], row: Row) -> str:
    return ", ".join(_fmt(value(r, row.key), row) if not r.get("error") else "failed" for r in runs)


def _load_text(runs: list[dict[str, Any]]) -> str:
    tag = {"cronlog": "A", "celery": "B"}
    return " ".join(f"{tag[r['system']]} {r['load_at_start'][0]:.1f}" for r in runs)


def _cpu_text(runs: list[dict[str, Any]]) -> str:
    parts = []
    for system in SYSTEMS:
        mine = [r for r in runs if r["system"] == system and not r.get("error")]
        names = sorted({n for r in mine for n in r["cpu_s"]})
        each = ", ".join(
            f"{n} {median([r['cpu_s'].get(n, 0.0) * 1000 / r['tasks'] for r in mine]):.2f}"
            for n in names
        )
        if each:
            parts.append(f"{LABELS[system]}: {each}")
    return "; ".join(parts) or "—"


def table(runs: list[dict[str, Any]], kinds: dict[str, str]) -> str:
    """The markdown table of ``runs``, workloads in the order of ``kinds`` (workload name →
    kind: burst, sustained or chain). Runs in each cell in the order they ran; ratio = median
    cronlog / median Celery; load = 1-minute load average at each start (A cronlog, B Celery);
    CPU per process = median over the runs, ms per task."""
    head = (
        "| workload | figure | cronlog runs | Celery + Redis runs | ratio | load at each start "
        "| CPU ms/task per process (median) |\n|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for workload, kind in kinds.items():
        mine = [r for r in runs if r["workload"] == workload]
        if not mine:
            continue
        for i, row in enumerate((*ROWS[kind], CPU_ROW)):
            a = [r for r in mine if r["system"] == "cronlog"]
            b = [r for r in mine if r["system"] == "celery"]
            q = ratio([value(r, row.key) for r in a], [value(r, row.key) for r in b])
            cells = [
                workload if i == 0 else "",
                row.label,
                _runs_text(a, row),
                _runs_text(b, row),
                f"{q:.2f}{TIMES}" if row.ratio and not math.isnan(q) else "—",
                _load_text(mine) if i == 0 else "",
                _cpu_text(mine) if row is CPU_ROW else "",
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
