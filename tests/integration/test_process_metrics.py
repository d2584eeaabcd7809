"""The scheduler's and the worker's Prometheus metrics, read from their /metrics on a real broker.

Each value is driven by what the test makes happen (jobs run, a task exits 3, a second
scheduler takes partitions) and compared with the run-events of the same facts.
"""

from __future__ import annotations

import urllib.request
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cronlog import commands as cmd
from cronlog import events as ev
from tests.integration.harness import Cluster, EventLog, Proc
from tests.integration.helpers import once_job, wait_for

pytestmark = pytest.mark.broker

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(proc: Proc) -> Samples:
    """Every sample of ``proc``'s /metrics, by (name, labels)."""
    with urllib.request.urlopen(proc.metrics_url(), timeout=10) as response:  # noqa: S310
        text = response.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample ``name{labels}`` (0 when absent, as Prometheus treats a missing counter)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def series(samples: Samples, name: str) -> dict[frozenset[tuple[str, str]], float]:
    """Every series of ``name``, by labels."""
    return {labels: v for (n, labels), v in samples.items() if n == name}


def of_worker(events: EventLog, kind: type, worker_id: str) -> int:
    return sum(1 for e in events.of_type(kind) if getattr(e.event, "worker_id", "") == worker_id)


def test_scheduler_and_worker_metrics_follow_the_fold_and_the_tasks(
    cluster: Cluster, events: EventLog
) -> None:
    s1 = cluster.scheduler("s1")
    worker = cluster.worker("w1", CRONLOG_SLOTS="3")
    wid = f"{cluster.settings.topic_prefix}w1"
    run_at = datetime.now(UTC) + timedelta(seconds=3)
    for i in range(6):
        cluster.send(f"ok{i}", cmd.RegisterJob(spec=once_job(run_at)))
    # renewed every lease_ttl / 6 = 0.5 s while it sleeps
    slow = replace(once_job(run_at, ("sleep", "2")), lease_ttl=timedelta(seconds=3))
    cluster.send("slow", cmd.RegisterJob(spec=slow))
    cluster.send("fails", cmd.RegisterJob(spec=once_job(run_at, ("sh", "-c", "exit 3"))))
    assert events.wait_until(
        lambda log: len(log.of_type(ev.RunSucceeded)) == 7 and log.of_type(ev.RunFailed), 120
    )

    # -- the worker ------------------------------------------------------------------------
    def idle() -> Samples | None:  # an attempt's slot frees just after its completion is sent
        w = scrape(worker)
        return w if value(w, "cronlog_worker_slots_busy") == 0 else None

    w = wait_for(idle, 10, "every slot free")
    assert value(w, "cronlog_worker_slots") == 3
    succeeded = of_worker(events, ev.TaskSucceeded, wid)
    assert succeeded == 7
    assert value(w, "cronlog_worker_tasks_total", outcome="succeeded") == succeeded
    assert value(w, "cronlog_worker_tasks_total", outcome="failed") == 1
    assert value(w, "cronlog_worker_tasks_total", outcome="lost") == 0
    claims = of_worker(events, ev.TaskClaimed, wid)
    assert claims == 8
    assert value(w, "cronlog_worker_claim_seconds_count") >= claims
    renewed = of_worker(events, ev.LeaseRenewed, wid)
    assert renewed >= 2
    assert value(w, "cronlog_worker_lease_renewals_total", result="ok") == renewed
    assert value(w, "cronlog_worker_lease_renewals_total", result="refused") == 0

    # -- one scheduler owns every partition --------------------------------------------------
    def lag_of_all(proc: Proc) -> Samples | None:
        s = scrape(proc)
        return s if len(series(s, "cronlog_consumer_lag_records")) == 4 else None

    s = wait_for(lambda: lag_of_all(s1), 30, "the lag of 4 partitions")
    assert value(s, "cronlog_scheduler_up") == 1
    assert value(s, "cronlog_fold_records_total") > 0
    assert value(s, "cronlog_fold_decisions_total") >= 8  # one per command of a job, at least
    assert value(s, "cronlog_fold_batch_records_count") > 0
    assert value(s, "cronlog_fold_batch_records_sum") == value(s, "cronlog_fold_records_total")
    assert value(s, "cronlog_fold_commit_seconds_count") == value(
        s, "cronlog_fold_batch_records_count"
    )
    assert value(s, "cronlog_partitions_owned") == 4
    assert value(s, "cronlog_partition_ownership_changes_total", change="assigned") >= 1
    assert value(s, "cronlog_partition_ownership_changes_total", change="revoked") == 0
    assert value(s, "cronlog_due_index_jobs") == 0  # every once job ran: nothing is due
    lags = series(s, "cronlog_consumer_lag_records")
    assert {dict(labels)["partition"] for labels in lags} == {"0", "1", "2", "3"}
    assert all(0 <= lag < 50 for lag in lags.values()), lags  # only Ticks arrive now

    # -- a second scheduler takes some -------------------------------------------------------
    s2 = cluster.scheduler("s2")

    def shared() -> tuple[Samples, Samples] | None:
        a, b = scrape(s1), scrape(s2)
        owned = value(a, "cronlog_partitions_owned"), value(b, "cronlog_partitions_owned")
        return (a, b) if min(owned) >= 1 and sum(owned) == 4 else None

    a, b = wait_for(shared, 90, "two schedulers sharing the 4 partitions")
    assert value(a, "cronlog_partition_ownership_changes_total", change="revoked") >= 1
    assert value(b, "cronlog_partition_ownership_changes_total", change="assigned") >= 1
    assert value(b, "cronlog_partition_ownership_changes_total", change="revoked") == 0
    s1_lag = {dict(k)["partition"] for k in series(scrape(s1), "cronlog_consumer_lag_records")}
    assert len(s1_lag) <= value(a, "cronlog_partitions_owned")  # revoked partitions' series go


def test_a_cancelled_run_counts_a_refused_renewal_and_a_cancelled_task(
    cluster: Cluster, events: EventLog
) -> None:
    cluster.scheduler()
    worker = cluster.worker("w1")
    wid = f"{cluster.settings.topic_prefix}w1"
    spec = replace(
        once_job(datetime.now(UTC) + timedelta(seconds=2), ("sleep", "60")),
        lease_ttl=timedelta(seconds=3),
    )
    cluster.send("long", cmd.RegisterJob(spec=spec))
    assert events.wait_until(lambda log: log.of_type(ev.TaskClaimed, "long"), 90)
    wait_for(  # the grant reaches the worker about when the test sees it on run-events
        lambda: value(scrape(worker), "cronlog_worker_slots_busy") == 1 or None, 10, "busy slot"
    )
    run_id = events.of_type(ev.TaskClaimed, "long")[0].event.run_id
    cluster.send("long", cmd.CancelRun(run_id=run_id))

    def ended() -> Samples | None:
        w = scrape(worker)
        return w if value(w, "cronlog_worker_tasks_total", outcome="cancelled") else None

    w = wait_for(ended, 30, "the cancelled task counted")
    assert value(w, "cronlog_worker_tasks_total", outcome="cancelled") == 1
    assert value(w, "cronlog_worker_lease_renewals_total", result="refused") >= 1
    assert value(w, "cronlog_worker_slots_busy") == 0
    for outcome in ("succeeded", "failed", "timeout", "released", "lost"):
        assert value(w, "cronlog_worker_tasks_total", outcome=outcome) == 0
    events.poll(1)
    assert value(w, "cronlog_worker_lease_renewals_total", result="ok") == of_worker(
        events, ev.LeaseRenewed, wid
    )
