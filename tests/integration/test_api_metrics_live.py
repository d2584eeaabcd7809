"""The API's scrape-time gauges driven into their conditions on a real cluster (issue 15):
a stalled DAG, runs waiting behind ``max_active_runs``, and an overrunning run.

Each gauge is read from ``GET /metrics`` of a real API and compared with what the cluster was
made to do: no worker (the DAG's first task waits, unclaimed, past the stall bound; the second
tick of a ``max_active_runs: 1`` job queues), then a worker (both clear), then a job whose
fourth run sleeps far longer than its first three.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.integration.harness import Cluster
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
STALL_S = 3


def until(api: httpx.Client, check: Any, what: str, timeout: float = 60) -> Samples:
    """Scrape until ``check(samples)`` holds; return those samples."""

    def probe() -> Samples | None:
        samples = scrape(api)
        return samples if check(samples) else None

    return wait_for(probe, timeout, what, every=0.5)


def job(job_id: str, cron: str, **fields: Any) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "name": job_id,
        "schedule": {"type": "cron", "expression": cron},
        "command": ["true"],
        **fields,
    }


def test_stalled_dags_and_waiting_runs_rise_without_workers_and_clear_with_one(
    cluster: Cluster,
) -> None:
    cluster.scheduler()
    api = start_api(cluster, CRONLOG_API_STALLED_DAG_S=str(STALL_S))
    prom = platform(cluster, api)
    tasks = [
        {"name": "first", "command": ["true"]},
        {"name": "second", "command": ["true"], "depends_on": ["first"]},
    ]
    register(api, {"job_id": "dag", "name": "dag", "schedule": {"type": "manual"}, "tasks": tasks})
    register(api, job("one-at-a-time", "*/2 * * * * *", max_active_runs=1))
    assert api.post("/api/v1/jobs/dag/trigger").status_code == 201

    # no worker: the DAG's first task, and the other job's one active run, wait unclaimed
    # past the bound (both runs are stalled); that job's later ticks queue
    stalled = until(
        prom,
        lambda s: (
            sample(s, "cronlog_dags_stalled") == 2
            and sample(s, "cronlog_runs_waiting", reason="max_active_runs") >= 1
        ),
        "a stalled DAG and a waiting run",
    )
    waiting = sample(stalled, "cronlog_runs_waiting", reason="max_active_runs")
    queued = api.get("/api/v1/jobs/one-at-a-time").json()["counts"]["queued"]
    assert waiting in (queued, queued - 1, queued + 1)  # a tick may land between the reads
    assert sample(stalled, "cronlog_runs_waiting", reason="suspended") == 0

    cluster.worker()  # the stall clears; the queue drains as runs end
    cleared = until(
        prom,
        lambda s: (
            sample(s, "cronlog_dags_stalled") == 0
            and sample(s, "cronlog_runs_waiting", reason="max_active_runs") == 0
        ),
        "the stall and the queue cleared",
    )
    assert sample(cleared, "cronlog_dags_stalled") == 0
    runs = api.get("/api/v1/jobs/dag/runs").json()["runs"]
    wait_for(
        lambda: api.get(f"/api/v1/runs/{runs[0]['run_id']}").json()["state"] == "succeeded",
        60,
        "the DAG run succeeded",
    )


def test_a_run_far_longer_than_its_job_recent_p99_is_overrunning(
    cluster: Cluster, api: httpx.Client
) -> None:
    register(api, job("steady", "*/3 * * * * *", command=["sleep", "0.3"]))
    wait_for(
        lambda: (
            sum(
                r["state"] == "succeeded"
                for r in api.get("/api/v1/jobs/steady/runs").json()["runs"]
            )
            >= 3
            or None
        ),
        90,
        "three short runs",
    )
    prom = platform(cluster, api)
    before = scrape(prom)
    assert sample(before, "cronlog_runs_overrunning", job="steady") == 0
    patched = api.patch("/api/v1/jobs/steady", json={"command": ["sleep", "30"]})
    assert patched.status_code in (200, 202), patched.text
    over = until(
        prom,
        lambda s: sample(s, "cronlog_runs_overrunning", job="steady") >= 1,
        "an overrunning run",
    )
    ratio = sample(over, "cronlog_run_overrun_ratio", job="steady")
    assert ratio > 2  # elapsed > twice the p99 of ~0.3 s runs
    api.patch("/api/v1/jobs/steady", json={"paused": True})
