"""Benchmark: per-hop latency of a DAG chain (previous task's finish → next task's start).

Usage: ``.venv/bin/python bench/dag_chain.py [--tasks 40] [--runs 3] [--workers 1] [--slots N]
[--json FILE]`` (needs a broker: ``KAFKA_BOOTSTRAP`` or the local one from ``ops/kafka start``).
``--json`` also writes the hop median / p99 / max and the window from the registration to the
last run's end (``bench/compare.py`` runs it that way, beside Celery).

One scheduler and ``--workers`` worker processes on their own topics; a manual job whose tasks
form the chain t0 → t1 → … (kind python, ``tests.unit.tasks_for_tests:noop``) is triggered
``--runs`` times, one run after the other. Per hop, from run-events (all clocks are this machine's):

- hop: TaskSucceeded(t_i).finished_at → TaskSucceeded(t_i+1).started_at (worker clock);
- report: finished_at → CompleteTask appended (TaskSucceeded.at, broker LogAppendTime);
- fold: CompleteTask appended → TaskReady(t_i+1) produced (run-event CreateTime);
- to claim: TaskReady produced → ClaimTask appended (TaskClaimed.at): ready topic + worker poll;
- fold claim: ClaimTask appended → TaskClaimed produced;
- to start: TaskClaimed produced → started_at: replies topic + dispatch to the process pool.

Measured (2-core box shared with the broker and other test runs, 1 scheduler + 1 worker, 12
partitions, 3 runs of 40 tasks, 117 hops), by the scheduler's ``batch_within_s``:

- 10 ms (the old default): hop median 30 ms / p95 40 ms; report 1 / fold 10 / to claim 3 /
  fold claim 12 / to start 3 ms (medians); run 1.3 to 1.7 s.
- 2 ms (the default now): hop median 17 ms / p95 28 ms (budget 25 ms); fold 6 / fold claim
  6 ms; run 0.8 to 1.1 s. bench/fold.py's burst throughput was the same with both.

Each hop needs two fold passes (CompleteTask, then ClaimTask) and each waits up to
``batch_within_s`` for its batch to fill; the worker's own share is about 7 ms. What is left
is the claim round trip: having the fold grant the next task to a worker that advertised a free
slot would save one pass and the ready-topic hop.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, TopicPartition  # noqa: E402

from bench.common import add_json_option, pct, produce_all, write_figures  # noqa: E402
from cronlog import commands as cmd  # noqa: E402
from cronlog import events as ev  # noqa: E402
from cronlog.model import (  # noqa: E402
    Isolation,
    JobSpec,
    Schedule,
    ScheduleKind,
    TaskKind,
    TaskSpec,
)
from tests.integration.harness import Cluster  # noqa: E402
from topology.kafka.bootstrap import ensure_topics  # noqa: E402
from topology.kafka.config import KafkaSettings  # noqa: E402
from topology.kafka.topics import Topics  # noqa: E402
from topology.wire.codec import decode_event  # noqa: E402

NOOP = "tests.unit.tasks_for_tests:noop"
JOB = "chain"
STAGES = ("report", "fold", "to claim", "fold claim", "to start")


def chain_spec(n: int, isolation: Isolation = Isolation.PROCESS) -> JobSpec:
    """A manual job of ``n`` no-op python tasks, each depending on the one before."""
    specs = tuple(
        TaskSpec(
            f"t{i}",
            kind=TaskKind.PYTHON,
            callable=NOOP,
            depends_on=(f"t{i - 1}",) if i else (),
            isolation=isolation,
        )
        for i in range(n)
    )
    return JobSpec(
        name="dag chain bench",
        schedule=Schedule(ScheduleKind.MANUAL),
        task_specs=specs,
    )


class RunEvents:
    """run-events read from the start, each with its record timestamp (epoch seconds)."""

    def __init__(self, settings: KafkaSettings) -> None:
        topic = Topics.of(settings).run_events
        self.consumer = Consumer(settings.consumer_config(f"chain-{uuid.uuid4().hex}"))
        parts = self.consumer.list_topics(topic, timeout=10).topics[topic].partitions
        self.consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        self.seen: list[tuple[float, ev.RunEvent]] = []

    def until(self, done: type, count: int, timeout_s: float) -> None:
        """Read until ``count`` events of type ``done`` were seen (or raise after timeout)."""
        deadline = time.monotonic() + timeout_s
        while sum(isinstance(e.event, done) for _, e in self.seen) < count:
            if time.monotonic() > deadline:
                raise SystemExit(f"no {done.__name__} #{count} within {timeout_s} s")
            msg = self.consumer.poll(0.2)
            if msg is not None and not msg.error():
                self.seen.append((msg.timestamp()[1] / 1000, decode_event(msg.value())))


def hops(seen: list[tuple[float, ev.RunEvent]], run_id: str, n: int) -> list[list[float]]:
    """Return, per hop of run ``run_id``, [hop, *STAGES] in seconds."""
    by: dict[tuple[str, str], tuple[float, ev.RunEvent]] = {}
    for ts, e in seen:
        if getattr(e.event, "run_id", None) == run_id and hasattr(e.event, "task"):
            by.setdefault((type(e.event).__name__, e.event.task), (ts, e))

    def sec(d: datetime) -> float:
        return d.timestamp()

    out = []
    for i in range(n - 1):
        a, b = f"t{i}", f"t{i + 1}"
        _, done = by[("TaskSucceeded", a)]
        ready_ts, _ = by[("TaskReady", b)]
        claim_ts, claim = by[("TaskClaimed", b)]
        _, nxt = by[("TaskSucceeded", b)]
        finished, started = sec(done.event.finished_at), sec(nxt.event.started_at)
        out.append(
            [
                started - finished,
                sec(done.at) - finished,
                ready_ts - sec(done.at),
                sec(claim.at) - ready_ts,
                claim_ts - sec(claim.at),
                started - claim_ts,
            ]
        )
    return out


def summary(values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return f"median {statistics.median(ordered) * 1000:6.1f} ms  p95 {p95 * 1000:6.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=40)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--slots", type=int, default=None, help="per worker (default: its own)")
    parser.add_argument("--bootstrap", default=KafkaSettings().bootstrap)
    parser.add_argument(
        "--isolation",
        choices=[i.value for i in Isolation],
        default="process",
        help="where the no-op python tasks run (process: the worker's pool; thread)",
    )
    add_json_option(parser)
    args = parser.parse_args()
    settings = KafkaSettings(
        bootstrap=args.bootstrap, topic_prefix=f"bench{uuid.uuid4().hex[:6]}.", partitions=12
    )
    ensure_topics(settings)
    tmp = ROOT / ".cache" / "bench" / settings.topic_prefix
    tmp.mkdir(parents=True, exist_ok=True)
    cluster = Cluster(settings, tmp)
    log = RunEvents(settings)
    try:
        cluster.scheduler("bench")
        slots = {} if args.slots is None else {"CRONLOG_SLOTS": str(args.slots)}
        for w in range(args.workers):
            cluster.worker("bench-w" + (str(w + 1) if w else ""), **slots)
        # produce_all waits up to 60 s for delivery (cluster.send 10 s): a fresh broker loads
        # its coordinators for longer than that on a busy box, and the command was lost
        spec = chain_spec(args.tasks, Isolation(args.isolation))
        produce_all(cluster, [(JOB, cmd.RegisterJob(spec=spec))], "register")
        log.until(ev.JobRegistered, 1, 120)
        window_start = time.time()
        rows: list[list[float]] = []
        for r in range(args.runs):
            produce_all(cluster, [(JOB, cmd.TriggerJob())], f"trigger-{uuid.uuid4().hex}")
            log.until(ev.RunSucceeded, r + 1, 300)
            run = [e for _, e in log.seen if isinstance(e.event, ev.RunScheduled)][r].event
            ended = [ts for ts, e in log.seen if isinstance(e.event, ev.RunSucceeded)][r]
            first = next(
                ts
                for ts, e in log.seen
                if isinstance(e.event, ev.RunScheduled) and e.event.run_id == run.run_id
            )
            run_hops = hops(log.seen, run.run_id, args.tasks)
            rows += run_hops
            print(
                f"run {r + 1}: {args.tasks} tasks, RunScheduled → RunSucceeded "
                f"{ended - first:.2f} s; hop {summary([h[0] for h in run_hops])}"
            )
        window = (window_start, time.time())
        print(
            f"all {len(rows)} hops (finish of t_i → start of t_i+1): "
            f"{summary([h[0] for h in rows])}   budget: p50 5 ms"
        )
        for k, stage in enumerate(STAGES, 1):
            print(f"  {stage:<10} {summary([h[k] for h in rows])}")
        hop = [h[0] for h in rows]
        figures = {
            "tasks": args.tasks,
            "runs": args.runs,
            "hop_p50_s": statistics.median(hop),
            "hop_p99_s": pct(hop, 0.99),
            "hop_max_s": max(hop),
        }
        write_figures(args.json, "dag_chain", window, figures)
    finally:
        log.consumer.close()
        cluster.stop_all()


if __name__ == "__main__":
    main()
