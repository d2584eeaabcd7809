"""Benchmark: the API read model's history, in process (no broker): projection rate with the
v5 time indexes, a deep page of runs, and pruning.

Usage: ``.venv/bin/python bench/history.py [--runs 20000]``

One job gets ``--runs`` one-task runs (RunScheduled, TaskReady, TaskClaimed, TaskSucceeded,
RunSucceeded: five run-events each, applied 500 per RocksDB batch as the consumer does).
Printed: run-events applied per second; the time of the first page and of the last page of
100 runs (the last reached by cursor: a seek, not a scan of what comes before); how long one
pruning pass takes to delete the older half of the runs with their events, and its rate.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cronlog import events as ev  # noqa: E402
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task  # noqa: E402
from cronlog.time import to_ms  # noqa: E402
from cronlog.vocabulary import RunTrigger  # noqa: E402
from services.api.readmodel import listings, paging  # noqa: E402
from services.api.readmodel.keys import inverted_ms  # noqa: E402
from services.api.readmodel.projection import apply  # noqa: E402
from services.api.readmodel.pruner import HistoryPruner  # noqa: E402
from services.api.readmodel.reader import ReadModel  # noqa: E402
from services.api.readmodel.store import Batch  # noqa: E402
from services.api.settings import ApiSettings  # noqa: E402
from tests.run_records import claimed, record, scheduled, succeeded  # noqa: E402

T0 = datetime(2026, 1, 1, tzinfo=UTC)
JOB = "bench-history"
SPEC = JobSpec("bench", Schedule(ScheduleKind.MANUAL), main_task(("true",)))


def _record(key: str, index: int, event: ev.Event, at: datetime) -> ev.RunEvent:
    return record(key, index, event, at=at, job_id=JOB)


def _run_events(i: int) -> list[ev.RunEvent]:
    tick = T0 + timedelta(minutes=i)
    rid = f"r{i:08d}"
    end = tick + timedelta(seconds=1)
    grant = claimed(
        rid,
        tick,
        expires_at=end,
        worker="w",
        command=SPEC.task_specs[0].command,
        timeout=SPEC.timeout,
    )
    return [
        _record(f"s{i}", 0, scheduled(rid, tick, trigger=RunTrigger.MANUAL), tick),
        _record(
            f"s{i}", 1, ev.TaskReady(run_id=rid, task="main", attempt=1, scheduled_for=tick), tick
        ),
        _record(f"c{i}", 0, grant, tick),
        _record(f"d{i}", 0, succeeded(rid, worker="w", started_at=tick, finished_at=end), end),
        _record(f"d{i}", 1, ev.RunSucceeded(run_id=rid), end),
    ]


def run_once(runs: int, state_dir: Path) -> dict[str, float]:
    """Build, page and prune a read model of ``runs`` runs; return the figures."""
    settings = ApiSettings(api_state_dir=state_dir)
    rm = ReadModel(settings, settings.state_path())
    try:
        records = [_record("reg", 0, ev.JobRegistered(spec=SPEC, next_fire_at=None), T0)]
        for i in range(runs):
            records += _run_events(i)
        started = time.perf_counter()
        for n in range(0, len(records), 500):
            batch = Batch(rm.store)
            for r in records[n : n + 500]:
                apply(batch, r)
            batch.commit()
        apply_s = time.perf_counter() - started
        started = time.perf_counter()
        first = listings.runs_page(rm.store, JOB, limit=100)
        first_s = time.perf_counter() - started
        newer = T0 + timedelta(minutes=100)  # the page after run 100 holds runs 99..0
        position = inverted_ms(to_ms(newer)) + b"\x00r%08d" % 100
        started = time.perf_counter()
        last = listings.runs_page(rm.store, JOB, limit=100, after=position)
        last_s = time.perf_counter() - started
        cutoff = to_ms(T0 + timedelta(minutes=runs // 2))
        pruner = HistoryPruner(rm, timedelta(0), clock=lambda: cutoff)
        started = time.perf_counter()
        pruned = pruner.run_pass()
        prune_s = time.perf_counter() - started
        return {
            "events": len(records),
            "events_per_s": len(records) / apply_s,
            "first_page_rows": len(first.rows),
            "first_page_ms": first_s * 1000,
            "last_page_rows": len(last.rows),
            "last_page_ms": last_s * 1000,
            "pruned_runs": pruned.runs,
            "pruned_events": pruned.events,
            "prune_s": prune_s,
            "pruned_runs_per_s": pruned.runs / prune_s if prune_s else 0.0,
            "scan_budget": paging.SCAN_BUDGET,
        }
    finally:
        rm.store.close()


def main() -> None:
    """Run the benchmark and print its figures."""
    args = argparse.ArgumentParser(description=__doc__)
    args.add_argument("--runs", type=int, default=20000)
    opts = args.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        figures = run_once(opts.runs, Path(tmp) / "rm")
    print(f"applied {figures['events']} run-events: {figures['events_per_s']:,.0f}/s")
    print(
        f"first page: {figures['first_page_rows']} runs in {figures['first_page_ms']:.1f} ms; "
        f"last page (by cursor): {figures['last_page_rows']} runs in "
        f"{figures['last_page_ms']:.1f} ms"
    )
    print(
        f"pruned {figures['pruned_runs']} runs and {figures['pruned_events']} events in "
        f"{figures['prune_s']:.2f} s ({figures['pruned_runs_per_s']:,.0f} runs/s)"
    )


if __name__ == "__main__":
    main()
