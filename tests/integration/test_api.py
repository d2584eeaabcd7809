"""The HTTP API against a real broker, scheduler and worker: read-your-writes, 4xx naming the
field, pause/resume/delete with history kept, manual triggers."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from tests.integration.harness import Cluster
from tests.integration.helpers import start_api

pytestmark = pytest.mark.broker


def wait_runs(
    api: httpx.Client, job_id: str, n: int, timeout: float = 60, **where: object
) -> list[dict]:
    deadline = time.monotonic() + timeout
    runs: list[dict] = []
    while time.monotonic() < deadline:
        runs = api.get(f"/api/v1/jobs/{job_id}/runs", params={"limit": 100}).json()["runs"]
        matching = [r for r in runs if all(r.get(k) == v for k, v in where.items())]
        if len(matching) >= n:
            return matching
        time.sleep(0.5)
    raise AssertionError(f"only {runs} after {timeout}s")


def test_job_lifecycle_through_the_api(api: httpx.Client) -> None:
    body = {
        "job_id": "api-every-2s",
        "name": "every 2 s",
        "schedule": {"type": "cron", "expression": "*/2 * * * * *", "timezone": "UTC"},
        "command": ["sh", "-c", "echo hello"],
        "timeout_s": 10,
    }
    created = api.post("/api/v1/jobs", json=body)
    assert created.status_code == 201, created.text
    assert created.json()["job_id"] == "api-every-2s"
    next_run = datetime.fromisoformat(created.json()["next_run_at"].replace("Z", "+00:00"))
    assert next_run.second % 2 == 0 and next_run > datetime.now(UTC) - timedelta(seconds=5)
    # read-your-writes: the job is visible as soon as the POST answered
    job = api.get("/api/v1/jobs/api-every-2s").json()
    assert job["status"] == "active"
    assert api.post("/api/v1/jobs", json=body).status_code == 409

    runs = wait_runs(api, "api-every-2s", 2, state="succeeded")
    run = api.get(f"/api/v1/runs/{runs[0]['run_id']}").json()
    assert run["job_id"] == "api-every-2s"
    assert run["exit_code"] == 0
    assert "hello" in run["output_tail"]

    paused = api.patch("/api/v1/jobs/api-every-2s", json={"paused": True})
    assert paused.status_code == 200, paused.text
    assert api.get("/api/v1/jobs/api-every-2s").json()["status"] == "paused"
    resumed = api.patch("/api/v1/jobs/api-every-2s", json={"paused": False})
    assert resumed.status_code == 200
    assert api.get("/api/v1/jobs/api-every-2s").json()["status"] == "active"

    assert api.delete("/api/v1/jobs/api-every-2s").status_code in (200, 204)
    deleted_at = datetime.now(UTC)
    time.sleep(3)
    after = api.get("/api/v1/jobs/api-every-2s/runs", params={"limit": 100}).json()["runs"]
    assert len(after) >= 2  # history kept
    assert api.get("/api/v1/jobs/api-every-2s").json()["status"] == "deleted"
    late = [
        r
        for r in after
        if datetime.fromisoformat(r["scheduled_for"].replace("Z", "+00:00"))
        > deleted_at + timedelta(seconds=1)
    ]
    assert late == []


def test_manual_trigger_and_failing_job(api: httpx.Client) -> None:
    body = {
        "job_id": "api-manual",
        "name": "manual",
        "schedule": {"type": "manual"},
        "command": ["sh", "-c", "echo failing; exit 3"],
    }
    assert api.post("/api/v1/jobs", json=body).status_code == 201
    trig = api.post("/api/v1/jobs/api-manual/trigger")
    assert trig.status_code in (200, 201, 202), trig.text
    run_id = trig.json()["run_id"]
    runs = wait_runs(api, "api-manual", 1, state="failed")
    assert runs[0]["run_id"] == run_id
    run = api.get(f"/api/v1/runs/{run_id}").json()
    assert run["exit_code"] == 3
    assert "failing" in run["output_tail"]


def test_bad_requests_name_the_field(api: httpx.Client) -> None:
    bad_cron = api.post(
        "/api/v1/jobs",
        json={
            "name": "x",
            "schedule": {"type": "cron", "expression": "61 * * * *"},
            "command": ["true"],
        },
    )
    assert bad_cron.status_code == 422
    assert "schedule" in str(bad_cron.json()) and "expression" in str(bad_cron.json())
    bad_tz = api.post(
        "/api/v1/jobs",
        json={
            "name": "x",
            "schedule": {"type": "cron", "expression": "* * * * *", "timezone": "Mars/Olympus"},
            "command": ["true"],
        },
    )
    assert bad_tz.status_code == 422
    assert "timezone" in str(bad_tz.json())
    assert api.get("/api/v1/jobs/nope").status_code == 404
    assert api.get("/api/v1/runs/nope").status_code == 404
    assert api.get("/openapi.json").json()["info"]["title"]


def test_an_idempotency_key_reused_for_a_delete_is_422_also_after_an_api_restart(
    api: httpx.Client, cluster: Cluster
) -> None:
    # issue 11: the DELETE used to answer 200 with the trigger's events and delete nothing
    body = {"job_id": "api-idem", "name": "idem", "schedule": {"type": "manual"}}
    assert api.post("/api/v1/jobs", json={**body, "command": ["true"]}).status_code == 201
    key = {"Idempotency-Key": "K1"}
    first = api.post("/api/v1/jobs/api-idem/trigger", headers=key)
    assert first.status_code == 201, first.text
    again = api.post("/api/v1/jobs/api-idem/trigger", headers=key)  # a retry: same answer
    assert again.status_code == 201 and again.json()["run_id"] == first.json()["run_id"]
    reused = api.delete("/api/v1/jobs/api-idem", headers=key)
    assert reused.status_code == 422, reused.text
    assert reused.json()["detail"][0]["type"] == "idempotency_key_reused"
    assert api.get("/api/v1/jobs/api-idem").json()["status"] == "active"
    [old] = [p for p in cluster.procs if p.name == "api"]
    old.stop()
    restarted = start_api(cluster)  # another port, the same state directory
    try:
        after = restarted.delete("/api/v1/jobs/api-idem", headers=key)
        assert after.status_code == 422, after.text
        assert restarted.delete("/api/v1/jobs/api-idem").status_code == 200
    finally:
        restarted.close()
