"""Benchmark: how long the pure core takes to decide a large BackfillJob (issue 11). No broker.

Usage: ``.venv/bin/python bench/backfill_refusal.py [--ticks 1000] [--tasks 200 3 1]``

For each task count, registers a cron job of that many independent tasks and times
``cronlog.decide.handle`` on one BackfillJob of ``--ticks`` past hourly ticks, then
``dump_state`` of the resulting record, and prints what the fold would do: refuse the
command (decide's bound, ``MAX_BACKFILL_TASK_INSTANCES``), refuse the record (larger than
``MAX_RECORD_BYTES``), or write it. Measured before the bound: 1000 ticks x 200 tasks took
12-20 s in ``handle`` (evolving 200,000 TaskReady events) before the fold refused the 33 MB
record; with it, ~0.01 s.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cronlog import commands as cmd  # noqa: E402
from cronlog import events as ev  # noqa: E402
from cronlog.decide import handle  # noqa: E402
from cronlog.job import JobState  # noqa: E402
from cronlog.model import JobSpec, Schedule, ScheduleKind, TaskSpec  # noqa: E402
from cronlog.vocabulary import JobStatus  # noqa: E402
from topology.fold.folder import MAX_RECORD_BYTES  # noqa: E402
from topology.wire.state_codec import dump_state  # noqa: E402

JOB = "bench-backfill"
T0 = datetime(2024, 1, 1, tzinfo=UTC)
NOW = T0 + timedelta(days=60)


def measure(ticks: int, tasks: int) -> str:
    """Return one line of figures for a backfill of ``ticks`` ticks on a ``tasks``-task job."""
    names = tuple(f"t{i:03d}" for i in range(tasks))
    spec = JobSpec(
        "bench",
        Schedule(ScheduleKind.CRON, expression="0 * * * *"),
        task_specs=tuple(TaskSpec(n, ("true",)) for n in names),
        max_active_runs=1,
        max_active_tasks=tasks,
    )
    state = JobState(JOB, spec, JobStatus.ACTIVE, NOW, next_fire_at=NOW + timedelta(hours=1))
    backfill = cmd.BackfillJob(ticks=tuple(NOW - timedelta(hours=h) for h in range(1, ticks + 1)))
    started = time.perf_counter()
    new, events = handle(state, cmd.Envelope(idem_key="bf", job_id=JOB, command=backfill), NOW)
    decide_s = time.perf_counter() - started
    started = time.perf_counter()
    size = len(dump_state(new)) if new is not None else 0
    dump_s = time.perf_counter() - started
    first = events[0]
    if isinstance(first, ev.CommandRejected):
        verdict = f"refused by decide: {first.reason.value}: {first.detail}"
    elif size > MAX_RECORD_BYTES:
        verdict = f"{len(events)} events, record {size} bytes: refused by the fold"
    else:
        verdict = f"{len(events)} events, record {size} bytes: written"
    return f"{ticks} ticks x {tasks} tasks: handle {decide_s:.3f} s, dump {dump_s:.3f} s; {verdict}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=1000)
    parser.add_argument("--tasks", type=int, nargs="+", default=[200, 3, 1])
    args = parser.parse_args()
    for tasks in args.tasks:
        print(measure(args.ticks, tasks))


if __name__ == "__main__":
    main()
