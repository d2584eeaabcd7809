"""The API's gauges computed at scrape time from the live-run index (``live_runs``).

A prometheus_client custom collector: each ``GET /metrics`` reads the live runs (one entry per
run not yet ended), the recent successful durations of the jobs with a running run, and the
critical jobs, and compares them with the wall clock (the API is an adapter: reading the clock
here is fine; the fold never does). Cost per scrape: one scan of the live runs plus one read
per job with a running run.

- ``cronlog_run_overrun_ratio{job}``: max over the job's running runs of elapsed (since the
  run's first claim) / p99 of its last 50 successful durations; absent without history.
- ``cronlog_runs_overrunning{job}``: the job's running runs with that ratio above 2.
- ``cronlog_runs_waiting{reason}``: runs queued now (RunQueued, not yet started or cancelled).
- ``cronlog_dags_stalled``: active runs with unfinished tasks, none claimed, and no task
  progress (nor a jitter or retry hold) for ``CRONLOG_API_STALLED_DAG_S`` seconds.
- ``cronlog_job_critical{job}``: 1 for each job tagged ``critical`` and not deleted.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from cronlog.vocabulary import QueueReason
from services.api.readmodel import live_runs, metrics
from services.api.readmodel.metrics import JobLabels
from services.api.readmodel.store import Store

OVERRUN_FACTOR = 2.0
"""A running run whose elapsed / p99 exceeds this is overrunning (``cronlog_runs_overrunning``)."""


def p99(durations: list[float]) -> float:
    """Return the 99th percentile of ``durations`` (nearest rank; the max below 100 values).

    Raises:
        ValueError: ``durations`` is empty.
    """
    if not durations:
        raise ValueError("durations: empty")
    ranked = sorted(durations)
    return ranked[max(0, math.ceil(0.99 * len(ranked)) - 1)]


class LiveCollector(Collector):
    """Computes the scrape-time gauges from a read model's store (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        labels: JobLabels,
        *,
        stalled_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Read ``store``; label jobs with ``labels``; ``clock`` returns epoch seconds.

        Args:
            store: the read model's store (its ``live:``, ``dur:`` and ``crit:`` keys).
            labels: the process's job label allocation (the cap of ``job`` values).
            stalled_s: seconds without task progress after which an active run with
                unfinished, unclaimed tasks counts as stalled.
            clock: the wall clock, epoch seconds (tests pass a fixed one).
        """
        self.store = store
        self.labels = labels
        self.stalled_s = stalled_s
        self.clock = clock

    def describe(self) -> Iterable[Any]:
        """Return nothing: the registry then never calls ``collect`` at registration."""
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Yield the gauges as of now."""
        now_ms = self.clock() * 1000
        waiting = {reason.value: 0 for reason in QueueReason}
        stalled = 0
        elapsed: dict[str, list[float]] = {}
        for run in live_runs.live_runs(self.store):
            if run["state"] == "queued":
                reason = run.get("reason") or "unknown"
                waiting[reason] = waiting.get(reason, 0) + 1
                continue
            if run["state"] in live_runs.WAITING:
                continue
            if run["started"] is not None and run.get("unfinished", 0) > 0:
                elapsed.setdefault(run["job"], []).append((now_ms - run["started"]) / 1000)
            if self._stalled(run, now_ms):
                stalled += 1
        yield _family("cronlog_runs_waiting", "Runs queued now, by reason", "reason", waiting)
        yield GaugeMetricFamily(
            "cronlog_dags_stalled",
            "Active runs with unfinished tasks, none claimed, and no task progress for "
            "CRONLOG_API_STALLED_DAG_S seconds",
            value=stalled,
        )
        yield from self._overruns(elapsed)
        yield GaugeMetricFamily(
            "cronlog_jobs_suspended",
            "Jobs whose circuit is open or half-open (their runs queue)",
            value=live_runs.suspended_jobs(self.store),
        )
        critical = {job: 1.0 for job in sorted(self.labels.critical())}
        yield _family("cronlog_job_critical", "Jobs tagged critical (1)", "job", critical)

    def _stalled(self, run: dict[str, Any], now_ms: float) -> bool:
        if run.get("unfinished", 0) == 0 or run.get("claimed", 0) > 0:
            return False
        quiet_since: int = max(run["progress"], run.get("hold") or 0)
        return now_ms - quiet_since > self.stalled_s * 1000

    def _overruns(self, elapsed: dict[str, list[float]]) -> Iterator[GaugeMetricFamily]:
        ratios: dict[str, float] = {}
        overrunning: dict[str, float] = {}
        for job, times in sorted(elapsed.items()):
            history = live_runs.durations(self.store, job)
            if not history or (bound := p99(history)) <= 0:
                continue  # no history (or only instant runs): no ratio
            label = self.labels.label(job)
            run_ratios = [t / bound for t in times]
            ratios[label] = max(ratios.get(label, 0.0), *run_ratios)
            over = sum(r > OVERRUN_FACTOR for r in run_ratios)
            overrunning[label] = overrunning.get(label, 0) + over
        yield _family(
            "cronlog_run_overrun_ratio",
            "Max over the job's running runs of elapsed / p99 of its last 50 successful "
            "run durations",
            "job",
            ratios,
        )
        yield _family(
            "cronlog_runs_overrunning",
            f"Running runs of the job with an overrun ratio above {OVERRUN_FACTOR:g}",
            "job",
            overrunning,
        )


def _family(name: str, doc: str, label: str, values: Mapping[str, float]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=[label])
    for value_of_label, value in values.items():
        family.add_metric([value_of_label], value)
    return family


def attach(
    store: Store,
    *,
    max_jobs: int,
    stalled_s: float,
    history_s: float | None = None,
    clock: Callable[[], float] = time.time,
) -> LiveCollector:
    """Serve the scrape-time gauges of ``store`` on ``GET /metrics``; call ``detach`` after.

    Also resets the job label cap to ``max_jobs``, loads the critical jobs from ``store``, and
    counts only run-events from ``history_s`` seconds before now on (None: all;
    ``metrics.NewsWindow``). ``LiveCollector`` documents the other arguments.
    """
    since_ms = 0 if history_s is None else int((clock() - history_s) * 1000)
    metrics.configure(max_jobs, live_runs.critical_jobs(store), since_ms)
    collector = LiveCollector(store, metrics.LABELS, stalled_s=stalled_s, clock=clock)
    metrics.REGISTRY.register(collector)
    return collector


def detach(collector: LiveCollector) -> None:
    """Stop serving ``collector``'s gauges (before its store closes)."""
    metrics.REGISTRY.unregister(collector)
