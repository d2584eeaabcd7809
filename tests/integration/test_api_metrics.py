"""``GET /metrics`` of a real API against the run-events of the same cluster (issue 15).

The system is driven into each condition (schedulers down past the misfire grace, a task that
always fails, a worker killed mid-task) and every counter is compared with the events that
caused it, read from the run-events topic: exact equality, once the read model caught up.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.vocabulary import RunTrigger, SkipReason
from tests.integration.harness import Cluster, EventLog
from tests.integration.helpers import (
    Samples,
    platform,
    register,
    sample,
    scrape,
    start_api,
    wait_for,
)

pytestmark = pytest.mark.broker


def total(samples: Samples, name: str) -> float:
    return sum(samples.get(name, {}).values())


def settles(
    api: httpx.Client, events: EventLog, check: Callable[[Samples, EventLog], bool], what: str
) -> Samples:
    """Poll events and metrics until ``check`` holds (the read model lags the topic a little)."""

    def probe() -> Samples | None:
        events.poll(0.3)
        samples = scrape(api)
        return samples if check(samples, events) else None

    return wait_for(probe, 30, what, every=0.5)


def every_2s(job_id: str, catchup: str, tags: list[str]) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "name": f"every 2 s, catch-up {catchup}",
        "schedule": {
            "type": "every",
            "interval_s": 2,
            "catchup": catchup,
            "misfire_grace_s": 1,
        },
        "command": ["true"],
        "tags": tags,
    }


def runs(
    events: EventLog, job_id: str | None, trigger: RunTrigger | None = None
) -> list[ev.RunScheduled]:
    """The RunScheduled events (of one job, or all), of one trigger or any."""
    scheduled = [e.event for e in events.of_type(ev.RunScheduled, job_id)]
    return [
        e
        for e in scheduled
        if isinstance(e, ev.RunScheduled) and (trigger is None or e.trigger is trigger)
    ]


def has(log: EventLog, kind: type, job_id: str | None = None) -> bool:
    return bool(log.of_type(kind, job_id))


def test_missed_ticks_critical_jobs_trigger_lag_and_claim_latency_match_the_events(
    cluster: Cluster, events: EventLog
) -> None:
    scheduler = cluster.scheduler()
    cluster.worker()
    api = start_api(cluster)
    register(api, every_2s("m-all", "all", ["critical", "payments"]))
    register(api, every_2s("m-latest", "latest", []))
    assert api.get("/api/v1/jobs/m-all").json()["tags"] == ["critical", "payments"]
    assert events.wait_until(
        lambda log: all(len(runs(log, j)) >= 2 for j in ("m-all", "m-latest")), 60
    ), "the jobs never ran"

    scheduler.stop()  # every scheduler is down: nothing folds, ticks pass their grace
    time.sleep(8)
    restarted = datetime.now(UTC)
    cluster.scheduler("s2")
    assert events.wait_until(
        lambda log: all(
            any(e.scheduled_for > restarted + timedelta(seconds=2) for e in runs(log, j))
            for j in ("m-all", "m-latest")
        ),
        90,
    ), "no on-time tick after the restart"
    for job in ("m-all", "m-latest"):
        cluster.send(job, cmd.PauseJob())
    assert events.wait_until(
        lambda log: all(has(log, ev.JobPaused, j) for j in ("m-all", "m-latest")), 30
    )

    def caught_up(log: EventLog) -> int:
        return len(runs(log, "m-all", RunTrigger.CATCHUP))

    def skipped(log: EventLog) -> int:
        return sum(
            isinstance(e.event, ev.TickSkipped) and e.event.reason is SkipReason.CATCHUP_POLICY
            for e in log.of_type(ev.TickSkipped, "m-latest")
        )

    def finished(log: EventLog) -> bool:  # every run ended: its trigger lag was observed
        return len(log.of_type(ev.RunSucceeded)) == len(runs(log, None))

    def agrees(samples: Samples, log: EventLog) -> bool:
        return (
            finished(log)
            and sample(samples, "cronlog_ticks_missed_total", job="m-all", reason="caught_up")
            == caught_up(log)
            and sample(
                samples, "cronlog_ticks_missed_total", job="m-latest", reason="catchup_policy"
            )
            == skipped(log)
            and total(samples, "cronlog_trigger_lag_seconds_count")
            == len(log.of_type(ev.RunSucceeded))
            and sample(samples, "cronlog_claim_latency_seconds_count")
            == len(log.of_type(ev.TaskClaimed))
        )

    samples = settles(platform(cluster, api), events, agrees, "metrics agree with the run-events")
    assert caught_up(events) >= 2, "the downtime did not make ticks late"
    assert skipped(events) >= 1
    assert sample(samples, "cronlog_ticks_missed_total", job="m-all", reason="caught_up") == (
        caught_up(events)
    )
    assert sample(
        samples, "cronlog_ticks_missed_total", job="m-latest", reason="catchup_policy"
    ) == skipped(events)
    assert samples["cronlog_job_critical"] == {(("job", "m-all"),): 1.0}
    claims = len(events.of_type(ev.TaskClaimed))
    assert sample(samples, "cronlog_claim_latency_seconds_count") == claims
    assert total(samples, "cronlog_trigger_lag_seconds_count") == len(runs(events, None))
    catchup_lags = sample(samples, "cronlog_trigger_lag_seconds_count", trigger="catchup")
    assert catchup_lags == caught_up(events) + len(runs(events, "m-latest", RunTrigger.CATCHUP))


def test_dead_letters_and_lease_reclaims_match_the_events(
    cluster: Cluster, events: EventLog, tmp_path: Path
) -> None:
    cluster.scheduler()
    worker = cluster.worker()
    api = start_api(cluster)
    wait_for(lambda: "worker started" in worker.log_tail(200), 60, "worker started")
    register(
        api,
        {
            "job_id": "always-fails",
            "name": "exits 1, no retry",
            "schedule": {"type": "manual"},
            "command": ["false"],
            "retry_policy": {"max_attempts": 1},
        },
    )
    assert api.post("/api/v1/jobs/always-fails/trigger").status_code in (200, 201, 202)
    assert events.wait_until(lambda log: has(log, ev.TaskDeadLettered, "always-fails"), 60)

    register(
        api,
        {
            "job_id": "sleeper",
            "name": "sleeps past its lease once its worker dies",
            "schedule": {"type": "manual"},
            "command": ["sleep", "60"],
            "lease_ttl_s": 3,
            "timeout_s": 120,
        },
    )
    assert api.post("/api/v1/jobs/sleeper/trigger").status_code in (200, 201, 202)
    assert events.wait_until(lambda log: has(log, ev.TaskClaimed, "sleeper"), 60)
    worker.kill9()
    assert events.wait_until(lambda log: has(log, ev.LeaseExpired, "sleeper"), 60)

    def agrees(samples: Samples, log: EventLog) -> bool:
        return sample(samples, "cronlog_lease_expired_total") == len(
            log.of_type(ev.LeaseExpired)
        ) and sample(samples, "cronlog_dead_letters_total", job="always-fails") == len(
            log.of_type(ev.TaskDeadLettered, "always-fails")
        )

    samples = settles(platform(cluster, api), events, agrees, "metrics agree with the run-events")
    assert sample(samples, "cronlog_lease_expired_total") >= 1
    assert sample(samples, "cronlog_dead_letters_total", job="always-fails") == 1
    assert "cronlog_job_critical" not in samples  # no job is tagged critical
