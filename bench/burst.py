"""Benchmark: the minute-boundary burst (DESIGN.md budget: 25,000 jobs due in the same second →
all runs on run-events within 2 s, all no-op tasks done within 5 s, one 2-core machine).

Usage: ``.venv/bin/python bench/burst.py [--jobs 25000] [--workers 2] [--slots 32]`` (needs a
broker: ``KAFKA_BOOTSTRAP`` or the local one from ``ops/kafka start``). ``--json FILE`` also
writes the main figures and the window from the end of the warm-up to the last run-event
(``bench/compare.py`` runs it that way, beside Celery).

One scheduler (``CRONLOG_FOLD_STATS_S=1``) and ``--workers`` workers with ``--slots`` slots
each, on their own topic prefix (12 partitions). ``--jobs`` ``once`` jobs, all with the same
``run_at`` (a whole second far enough ahead for the registration to finish first), each one
python task ``tests.unit.tasks_for_tests:noop``. After the burst has gone quiet, run-events are
read back from offset 0 (not while measuring: the reader would take CPU from the system):

- ledger: RunScheduled record timestamps (the scheduler's CreateTime) - the due second;
- done: TaskSucceeded record timestamps - the due second;
- trigger lag: TaskSucceeded.started_at (worker clock) - scheduled_for;
- before it, a warm-up of 2 x slots no-op runs per worker (their python pools start lazily,
  one spawned process per slot: ~10 s for the first tasks on this box);
- where the time goes: the scheduler's fold_stats lines (1 s periods), RunScheduled and
  TaskClaimed (claims granted, per worker) per second.

All clocks are this machine's.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (
    NOOP,
    Gauge,
    Seen,
    add_json_option,
    broker_pid,
    cpu_seconds,
    fold_stats_report,
    new_cluster,
    pct,
    per_second,
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

EVENTS_PER_RUN = 5
"""RunScheduled, TaskReady, TaskClaimed, TaskSucceeded, RunSucceeded."""

BUDGET_LEDGER_S = 2.0
"""DESIGN.md: every run of the burst on run-events within this many seconds of the due second."""
BUDGET_DONE_S = 5.0
"""DESIGN.md: every no-op task of the burst finished within this many seconds."""


def once_noop(run_at: datetime, isolation: Isolation = Isolation.PROCESS) -> JobSpec:
    """A one-task once job running the no-op python callable at ``run_at``."""
    return JobSpec(
        name="burst",
        schedule=Schedule(ScheduleKind.ONCE, run_at=run_at),
        task_specs=main_task(kind=TaskKind.PYTHON, callable=NOOP, isolation=isolation),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=25_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--slots", type=int, default=32)
    parser.add_argument(
        "--register-rate",
        type=float,
        default=900.0,
        help="commands/s assumed when choosing the due second (default 900)",
    )
    parser.add_argument("--timeout", type=float, default=900.0)
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

    cluster = new_cluster(args.bootstrap, "burst")
    gauge = Gauge(cluster.settings)
    try:
        sched = cluster.scheduler("s1", CRONLOG_FOLD_STATS_S="1")
        for w in range(args.workers):
            cluster.worker(f"w{w + 1}", CRONLOG_SLOTS=str(args.slots))
        # Warm-up: the workers' python pools (spawned lazily, one process per slot) and the
        # scheduler's first assignment, so the burst measures the steady system.
        warm = partial(once_noop, isolation=isolation)
        base = warm_up(cluster, gauge, warm, args.workers * args.slots * 2)
        window_start = time.time()
        due = math.ceil(time.time() + args.jobs / args.register_rate + 25)
        due_at = datetime.fromtimestamp(due, UTC)
        spec = once_noop(due_at, isolation)
        reg_started = time.time()
        produce_all(
            cluster, ((f"job-{i}", cmd.RegisterJob(spec=spec)) for i in range(args.jobs)), "reg"
        )
        if not gauge.wait_for(base + args.jobs, max(1.0, due - time.time() - 0.5)):
            print(
                f"WARNING: only {gauge.count()} of {args.jobs} JobRegistered before the due "
                "second: the burst overlaps the registration (raise --register-rate's margin)"
            )
        registered = time.time()
        print(
            f"registered {args.jobs} jobs in {registered - reg_started:.1f}s "
            f"({args.jobs / (registered - reg_started):,.0f}/s); due second {due_at:%H:%M:%S}Z, "
            f"{due - registered:.1f}s later"
        )
        time.sleep(max(0.0, due - time.time()))
        pids = {
            p.env.get("CRONLOG_WORKER_ID", "scheduler").split(".")[-1]: p.popen.pid
            for p in cluster.procs
            if p.popen is not None
        }
        broker = broker_pid()
        if broker is not None:  # on this box the broker shares the two cores
            pids["broker"] = broker
        cpu0 = {k: cpu_seconds(pid) for k, pid in pids.items()}
        # Done when every run's five events are out (RunScheduled, TaskReady, TaskClaimed,
        # TaskSucceeded, RunSucceeded): a quiet spell is no sign, since the fold of one Tick
        # that fires thousands of jobs produces nothing for seconds.
        target = base + args.jobs * (1 + EVENTS_PER_RUN)
        if not gauge.wait_for(target, args.timeout):
            print(f"WARNING: {target - gauge.count()} run-events short after {args.timeout}s")
        window = (window_start, time.time())
        cpu = {k: cpu_seconds(pid) - cpu0[k] for k, pid in pids.items()}
        cpu_wall = time.time() - due
        total = gauge.wait_quiet(quiet_s=3.0, timeout_s=60)
        quiet = time.time()
        seen = read_run_events(
            cluster.settings, (ev.RunScheduled, ev.TaskClaimed, ev.TaskSucceeded, ev.TaskFailed)
        )
        print(f"{total} run-events; read back in {time.time() - quiet:.1f}s")
        seen = [s for s in seen if s.event.job_id.startswith("job-")]
        figures = report(args, seen, due, sched.log_path)
        print(
            f"  CPU from the due second until all run-events were out ({cpu_wall:.1f}s; pool "
            "processes aside): "
            + ", ".join(f"{k} {v:.1f}s ({v / cpu_wall:.2f}/s)" for k, v in cpu.items())
        )
        print(
            f"  CPU per task, all these processes: {sum(cpu.values()) / args.jobs * 1000:.2f} ms "
            f"(a {BUDGET_DONE_S:.0f} s budget on 2 cores allows at most "
            f"{2 * BUDGET_DONE_S / args.jobs * 1000:.2f} ms)"
        )
        write_figures(args.json, "burst", window, figures)
    finally:
        gauge.close()
        cluster.stop_all()


def report(
    args: argparse.Namespace, seen: list[Seen], due: float, log_path: Path
) -> dict[str, object]:
    """Print the burst's figures; return the main ones (seconds after the due second; the
    lags are TaskSucceeded.started_at - due, nearest rank)."""
    sched = [s.ts for s in seen if isinstance(s.event.event, ev.RunScheduled)]
    done = [s for s in seen if isinstance(s.event.event, ev.TaskSucceeded)]
    failed = [s for s in seen if isinstance(s.event.event, ev.TaskFailed)]
    claims = [s for s in seen if isinstance(s.event.event, ev.TaskClaimed)]
    n = args.jobs
    started = [s.event.event.started_at.timestamp() - due for s in done]
    figures: dict[str, object] = {
        "jobs": n,
        "last_started_s": max(started, default=math.nan),
        "lag_p50_s": pct(started, 0.5),
        "lag_p99_s": pct(started, 0.99),
        "missing": n - len({s.event.job_id for s in done}),
        "duplicates": len(done) - len({s.event.job_id for s in done}),
        "ledger_last_s": max(sched) - due if sched else math.nan,
    }
    print(
        f"\nburst of {n} once jobs due at the same second; 1 scheduler, {args.workers} "
        f"workers x {args.slots} slots, 12 partitions, no-op python tasks"
    )
    if sched:
        print(
            f"  all runs on run-events (ledger): {len(sched)}/{n} RunScheduled, last "
            f"{max(sched) - due:.2f}s after the due second (first {min(sched) - due:.2f}s)"
            f"   budget {BUDGET_LEDGER_S:.0f} s"
        )
    if done:
        ends = [s.ts for s in done]
        print(
            f"  all tasks done: {len(done)}/{n} TaskSucceeded ({len(failed)} TaskFailed), "
            f"last {max(ends) - due:.2f}s after the due second   budget {BUDGET_DONE_S:.0f} s"
        )
        print(f"  trigger lag (scheduled_for → task started): {spread(started)}")
    print(f"  RunScheduled per second: {per_second(sched, due)}")
    workers = sorted({s.event.event.worker_id for s in claims})
    for w in workers:
        mine = [s.ts for s in claims if s.event.event.worker_id == w]
        span = max(mine) - min(mine) if len(mine) > 1 else 0.0
        print(
            f"  claims granted to {w}: {len(mine)} in {span:.1f}s "
            f"({len(mine) / max(span, 1e-9):,.0f}/s); per second {per_second(mine, due)}"
        )
    if claims:
        allc = [s.ts for s in claims]
        span = max(allc) - min(allc)
        print(
            f"  claims granted, all workers: {len(allc) / max(span, 1e-9):,.0f}/s over {span:.1f}s"
        )
    end = max([s.ts for s in seen] or [due]) + 2
    print("  scheduler fold_stats (1 s periods) during the burst:")
    for line in fold_stats_report(log_path, due - 1, end, due):
        print(line)
    return figures


if __name__ == "__main__":
    main()
