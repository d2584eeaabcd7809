"""Circuit breaking on a real broker: a job failing 100 % trips within its window, queues
its ticks while open, shows it in the API and /metrics, and resumes when an operator says so
(``cronlog jobs resume``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from cronlog import events as ev
from cronlog.vocabulary import QueueReason, SuspendReason, UnsuspendReason
from tests.integration.harness import Cluster, EventLog
from tests.integration.helpers import start_api, wait_for

pytestmark = pytest.mark.broker
ROOT = Path(__file__).resolve().parents[2]
JOB = "always-fails"


def test_a_failing_job_trips_queues_its_ticks_and_resumes(
    cluster: Cluster, events: EventLog
) -> None:
    cluster.scheduler()
    cluster.worker()
    api = start_api(cluster)
    body = {
        "job_id": JOB,
        "name": "fails",
        "schedule": {"type": "cron", "expression": "*/2 * * * * *", "timezone": "UTC"},
        "command": ["sh", "-c", "exit 3"],
        "breaker_failures": 3,
        "breaker_window_s": 120,
        "breaker_cooldown_s": 3600,  # no half-open during the test: the operator resumes
    }
    assert api.post("/api/v1/jobs", json=body).status_code == 201
    assert events.wait_until(lambda log: bool(log.of_type(ev.JobSuspended, JOB)), 90)
    (suspended,) = [r.event for r in events.of_type(ev.JobSuspended, JOB)]
    assert suspended.reason is SuspendReason.CIRCUIT_OPEN  # type: ignore[attr-defined]
    assert suspended.failed_attempts == 3  # type: ignore[attr-defined]
    assert len(events.of_type(ev.TaskFailed, JOB)) >= 3  # a run already going may end later

    # while open: ticks queue (reason suspended), no run starts
    assert events.wait_until(
        lambda log: (
            len(
                [
                    r
                    for r in log.of_type(ev.RunQueued, JOB)
                    if r.event.reason is QueueReason.SUSPENDED  # type: ignore[attr-defined]
                ]
            )
            >= 2
        ),
        30,
    )
    started_before = len(events.of_type(ev.RunScheduled, JOB))
    job = wait_for(
        lambda: (j := api.get(f"/api/v1/jobs/{JOB}").json()).get("suspended") and j, 30, "shown"
    )
    assert job["suspended"]["reason"] == "circuit_open"
    assert job["suspended"]["failed_attempts"] == 3
    platform = {"Authorization": f"Bearer {cluster.token('*', 'viewer')}"}
    assert httpx.get(f"{api.base_url}/metrics").status_code == 401
    assert api.get("/metrics").status_code == 403  # a tenant's token: other tenants' jobs
    metrics = httpx.get(f"{api.base_url}/metrics", headers=platform).text
    assert "cronlog_jobs_suspended 1.0" in metrics
    assert 'cronlog_runs_queued_total{reason="suspended"}' in metrics
    events.poll(3)
    assert len(events.of_type(ev.RunScheduled, JOB)) == started_before  # nothing started

    # the operator resumes: the circuit closes and the queued runs start
    cli = subprocess.run(
        [sys.executable, "-m", "services.cli", "jobs", "resume", JOB, "--api", str(api.base_url)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert cli.returncode == 0, cli.stderr
    assert events.wait_until(lambda log: bool(log.of_type(ev.JobUnsuspended, JOB)), 30)
    (closed,) = [r.event for r in events.of_type(ev.JobUnsuspended, JOB)]
    assert closed.reason is UnsuspendReason.OPERATOR  # type: ignore[attr-defined]
    assert events.wait_until(
        lambda log: len(log.of_type(ev.RunScheduled, JOB)) > started_before, 30
    )
