"""Tenants on a real broker: the API process answers another tenant's resources 404 and
sends commands as the job's tenant; a command produced straight onto Kafka for another
tenant's job is refused by the fold (``wrong_tenant``) and changes nothing."""

from __future__ import annotations

import httpx
import pytest

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.commands import Envelope
from cronlog.vocabulary import RejectReason
from tests.integration.harness import Cluster, EventLog
from tests.integration.helpers import start_api, wait_for
from topology.wire.codec import encode_command

pytestmark = pytest.mark.broker

JOB = "team-a-nightly"
BODY = {
    "job_id": JOB,
    "name": "a's job",
    "schedule": {"type": "manual"},
    "command": ["sh", "-c", "echo from-a"],
}


def test_tenants_are_isolated_in_the_api_and_in_the_fold(
    cluster: Cluster, events: EventLog
) -> None:
    cluster.scheduler()
    cluster.worker()
    a = start_api(cluster, tenant="team-a", role="admin")
    b = httpx.Client(
        base_url=str(a.base_url),
        timeout=30,
        headers={"Authorization": f"Bearer {cluster.token('team-b', 'admin')}"},
    )
    cluster.clients.append(b)

    assert a.post("/api/v1/jobs", json=BODY).status_code == 201
    run_id = a.post(f"/api/v1/jobs/{JOB}/trigger").json()["run_id"]
    wait_for(
        lambda: a.get(f"/api/v1/runs/{run_id}").json().get("state") == "succeeded",
        60,
        "a's run succeeded",
    )
    assert events.wait_until(lambda log: bool(log.of_type(ev.JobRegistered, JOB)), 30)
    registered = events.of_type(ev.JobRegistered, JOB)
    assert [r.event.spec.tenant for r in registered] == ["team-a"]  # type: ignore[attr-defined]

    # B, through the API: not found everywhere, and nothing listed
    for method, path in [
        ("GET", f"/api/v1/jobs/{JOB}"),
        ("GET", f"/api/v1/jobs/{JOB}/runs"),
        ("GET", f"/api/v1/runs/{run_id}"),
        ("GET", f"/api/v1/runs/{run_id}/tasks/main/attempts/1/log"),
        ("POST", f"/api/v1/jobs/{JOB}/trigger"),
        ("PATCH", f"/api/v1/jobs/{JOB}"),
        ("DELETE", f"/api/v1/jobs/{JOB}"),
        ("POST", f"/api/v1/runs/{run_id}/cancel"),
    ]:
        answer = b.request(method, path, json={"paused": True} if method == "PATCH" else None)
        assert answer.status_code == 404, (method, path, answer.text)
    assert b.get("/api/v1/jobs").json() == {"jobs": [], "next_cursor": None}
    assert a.get("/api/v1/jobs").json()["jobs"][0]["tenant"] == "team-a"
    assert httpx.get(f"{a.base_url}/api/v1/jobs").status_code == 401

    # B, straight onto Kafka: the fold refuses, A's job goes on unpaused
    forged = Envelope(idem_key="b-pause-1", job_id=JOB, command=cmd.PauseJob(), tenant="team-b")
    cluster.send_raw(JOB.encode(), encode_command(forged))
    assert events.wait_until(lambda log: bool(log.of_type(ev.CommandRejected, JOB)), 60)
    (refused,) = [r.event for r in events.of_type(ev.CommandRejected, JOB)]
    assert refused.reason is RejectReason.WRONG_TENANT  # type: ignore[attr-defined]
    assert refused.detail == "job 'team-a-nightly' does not belong to tenant 'team-b'"  # type: ignore[attr-defined]
    assert events.of_type(ev.JobPaused, JOB) == []
    assert a.get(f"/api/v1/jobs/{JOB}").json()["status"] == "active"
