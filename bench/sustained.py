"""Benchmark: sustained triggers/s and trigger lag (DESIGN.md budget: 1,000 triggers/s with p99
trigger lag, scheduled_for → task started, under 1 s).

Usage: ``.venv/bin/python bench/sustained.py [--rate 1000] [--duration 60] [--workers 2]
[--slots 32]`` (needs a broker: ``KAFKA_BOOTSTRAP`` or the local one from ``ops/kafka start``).
``--json FILE`` also writes the main figures, the p99 of each 10 s window and the window from the
end of the warm-up to the last run-event (``bench/compare.py`` runs it that way).

One scheduler and ``--workers`` workers (``--slots`` each) on their own topic prefix (12
partitions). ``--rate`` jobs on ``{"type": "every", "interval_s": 1}`` schedules with one no-op
python task each (``tests.unit.tasks_for_tests:noop``), all with ``start_at`` = T0 and
``end_at`` = T0 + duration - 1 s, so exactly ``rate x duration`` ticks come due, ``rate`` on
every whole second. After a warm-up (the workers' python pools) and once everything has gone
quiet, run-events are read back from offset 0:

- trigger lag: TaskSucceeded.started_at (worker clock) - scheduled_for (of its run);
- fold lag: RunScheduled record timestamp (scheduler CreateTime) - scheduled_for;
- per 10 s window of scheduled_for: p50/p99 trigger lag, to see whether lag grows;
- kept up: every tick of the window triggered and started within the budget, lag flat;
- CPU seconds of the scheduler and worker processes over the window (pool processes aside).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (
    NOOP,
    Gauge,
    add_json_option,
    cpu_seconds,
    fold_stats_report,
    new_cluster,
    pct,
    produce_all,
    read_run_events,
    spread,
    warm_up,
    write_figures,
)
from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.model import Isolation, JobSpec, Schedule, ScheduleKind, TaskKind, main_task
from topology.kafka.config import KafkaSettings


def every_second(
    start: datetime, end: datetime, isolation: Isolation = Isolation.PROCESS
) -> JobSpec:
    """A job firing every whole second in [start, end], one no-op python task."""
    return JobSpec(
        name="sustained",
        schedule=Schedule(
            ScheduleKind.EVERY, interval=timedelta(seconds=1), start_at=start, end_at=end
        ),
        task_specs=main_task(kind=TaskKind.PYTHON, callable=NOOP, isolation=isolation),
    )


def once_noop(run_at: datetime, isolation: Isolation = Isolation.PROCESS) -> JobSpec:
    return JobSpec(
        name="warm",
        schedule=Schedule(ScheduleKind.ONCE, run_at=run_at),
        task_specs=main_task(kind=TaskKind.PYTHON, callable=NOOP, isolation=isolation),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=1000, help="jobs firing every second")
    parser.add_argument("--duration", type=int, default=60, help="seconds of ticks")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--slots", type=int, default=32)
    parser.add_argument("--drain-timeout", type=float, default=300.0)
    parser.add_argument("--bootstrap", default=KafkaSettings().bootstrap)
    parser.add_argument(
        "--isolation",
        choices=[i.value for i in Isolation],
        default="process",
        help="where the no-op python tasks run (process: the worker's pool; thread)",
    )
    add_json_option(parser)
    args = parser.parse_args()
    isolation = Isolation(args.isolation)

    cluster = new_cluster(args.bootstrap, "sust")
    gauge = Gauge(cluster.settings)
    try:
        sched = cluster.scheduler("s1", CRONLOG_FOLD_STATS_S="5")
        workers = [
            cluster.worker(f"w{w + 1}", CRONLOG_SLOTS=str(args.slots)) for w in range(args.workers)
        ]
        warm = partial(once_noop, isolation=isolation)
        base = warm_up(cluster, gauge, warm, args.workers * args.slots * 2)
        window_start = time.time()
        t0 = math.ceil(time.time() + args.rate / 500 + 8)
        start = datetime.fromtimestamp(t0, UTC)
        end = start + timedelta(seconds=args.duration - 1)
        produce_all(
            cluster,
            (
                (f"job-{i}", cmd.RegisterJob(spec=every_second(start, end, isolation)))
                for i in range(args.rate)
            ),
            "reg",
        )
        if time.time() > t0:
            print("WARNING: registration ran past T0")
        time.sleep(max(0.0, t0 - time.time()))
        procs = {
            "scheduler": sched.popen.pid,
            **{
                w.name + str(i + 1): w.popen.pid  # type: ignore[union-attr]
                for i, w in enumerate(workers)
            },
        }
        cpu0 = {k: cpu_seconds(p) for k, p in procs.items()}
        time.sleep(max(0.0, t0 + args.duration - time.time()))
        cpu1 = {k: cpu_seconds(p) for k, p in procs.items()}
        # every run's five events: RunScheduled, TaskReady, TaskClaimed, TaskSucceeded,
        # RunSucceeded (a quiet spell alone is no sign of the end under a backlog)
        target = base + args.rate * (1 + 5 * args.duration)
        if not gauge.wait_for(target, args.drain_timeout):
            print(
                f"WARNING: {target - gauge.count()} run-events short "
                f"{args.drain_timeout:.0f}s after the last tick"
            )
        drained = time.time()
        seen = read_run_events(
            cluster.settings, (ev.RunScheduled, ev.TaskSucceeded, ev.TickSkipped)
        )
        seen = [s for s in seen if s.event.job_id.startswith("job-")]
        print(
            f"read back {len(seen)} run-events in {time.time() - drained:.1f}s; all out "
            f"{drained - (t0 + args.duration):.1f}s after the last tick (±0.5 s)"
        )
        figures = report(args, seen, t0)
        print(
            f"  CPU over the {args.duration}s window (s of CPU per s): "
            + ", ".join(f"{k} {(cpu1[k] - cpu0[k]) / args.duration:.2f}" for k in procs)
        )
        print("  scheduler fold_stats (5 s periods):")
        for line in fold_stats_report(sched.log_path, t0, t0 + args.duration + 2, t0):
            print(line)
        write_figures(args.json, "sustained", (window_start, drained), figures)
    finally:
        gauge.close()
        cluster.stop_all()


def report(args: argparse.Namespace, seen: list, t0: float) -> dict[str, object]:  # type: ignore[type-arg]
    """Print the figures; return the main ones (trigger lags in seconds, nearest rank;
    ``window_p99_s``: p99 per 10 s window of scheduled_for, in order)."""
    runs = {s.event.event.run_id: s for s in seen if isinstance(s.event.event, ev.RunScheduled)}
    done = [s for s in seen if isinstance(s.event.event, ev.TaskSucceeded)]
    expected = args.rate * args.duration
    fold_lags = [s.ts - s.event.event.scheduled_for.timestamp() for s in runs.values()]
    rows = []
    for s in done:
        run = runs.get(s.event.event.run_id)
        if run is not None:
            due = run.event.event.scheduled_for.timestamp()
            rows.append((due, s.event.event.started_at.timestamp() - due))
    lags = [lag for _, lag in rows]
    print(
        f"\nsustained {args.rate} triggers/s for {args.duration}s ({expected} ticks), 1 "
        f"scheduler, {args.workers} workers x {args.slots} slots, 12 partitions, no-op python"
    )
    skipped: dict[str, int] = {}
    for s in seen:
        if isinstance(s.event.event, ev.TickSkipped):
            reason = str(s.event.event.reason)
            skipped[reason] = skipped.get(reason, 0) + 1
    print(
        f"  runs scheduled {len(runs)}/{expected}, tasks succeeded {len(done)}/{expected}, "
        f"ticks skipped {sum(skipped.values())} {skipped or ''} (job default "
        "max_active_runs 16: a tick finding 16 runs of its job active is skipped)"
    )
    print(f"  trigger lag (scheduled_for → task started): {spread(lags)}   budget p99 < 1 s")
    print(f"  fold lag (scheduled_for → RunScheduled on run-events): {spread(fold_lags)}")
    print("  by 10 s window of scheduled_for (n, p50, p99 trigger lag):")
    window_p99 = []
    for w in range(0, args.duration, 10):
        part = [lag for due, lag in rows if t0 + w <= due < t0 + w + 10]
        if part:
            window_p99.append(pct(part, 0.99))
            print(
                f"    +{w:3d}..{w + 10:3d}s  n={len(part):6d}  p50={pct(part, 0.5):6.2f}s  "
                f"p99={pct(part, 0.99):6.2f}s"
            )
    ok = len(done) == expected and bool(lags) and pct(lags, 0.99) < 1.0
    print(f"  kept up at {args.rate}/s: {'yes' if ok else 'no'}")
    return {
        "expected": expected,
        "lag_p50_s": pct(lags, 0.5),
        "lag_p99_s": pct(lags, 0.99),
        "lag_max_s": max(lags, default=math.nan),
        "window_p99_s": window_p99,
        "missing": expected - len({s.event.event.run_id for s in done}),
        "duplicates": len(done) - len({s.event.event.run_id for s in done}),
        "skipped": sum(skipped.values()),
        "fold_lag_p99_s": pct(fold_lags, 0.99),
    }


if __name__ == "__main__":
    main()
