"""The tenant of ``after`` chains on a real broker: team-b's jobs ``after`` team-a's job, one
registered straight onto Kafka and one through the API before the upstream existed, are never
triggered by team-a's runs (the fold refuses each end, ``wrong_tenant``), while team-a's own
follower runs once per run (docs/tenants.md, "The tenant of after chains")."""

from __future__ import annotations

import time

import httpx
import pytest

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task
from cronlog.vocabulary import CommandKind, RejectReason
from tests.integration.harness import Cluster, EventLog
from tests.integration.helpers import start_api
from topology.wire.codec import encode_command

pytestmark = pytest.mark.broker

UP, A_FOLLOWER, B_KAFKA, B_EARLY = "a-up", "a-follower", "b-kafka", "b-early"


def after_up(job_id: str) -> dict[str, object]:
    return {
        "job_id": job_id,
        "name": job_id,
        "command": ["true"],
        "schedule": {"type": "after", "job_id": UP, "on": "done"},
    }


def ends(log: EventLog, job_id: str) -> set[str]:
    return {
        e.event.run_id  # type: ignore[attr-defined]
        for e in log.events(job_id)
        if isinstance(e.event, ev.RunSucceeded | ev.RunFailed | ev.RunCancelled)
    }


def refusals(log: EventLog, job_id: str) -> list[ev.CommandRejected]:
    return [
        e.event  # type: ignore[misc]
        for e in log.of_type(ev.CommandRejected, job_id)
        if e.event.command is CommandKind.UPSTREAM_RUN_ENDED  # type: ignore[attr-defined]
    ]


def test_another_tenants_after_job_is_never_triggered_while_a_same_tenant_one_is(
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

    # before a-up exists, the API cannot tell whose it will be: accepted
    assert b.post("/api/v1/jobs", json=after_up(B_EARLY)).status_code == 201
    assert (
        a.post("/api/v1/jobs", json={**after_up(UP), "schedule": {"type": "manual"}}).status_code
        == 201
    )
    assert a.post("/api/v1/jobs", json=after_up(A_FOLLOWER)).status_code == 201
    assert b.post("/api/v1/jobs", json=after_up(B_KAFKA)).status_code == 422  # the API knows
    # ... but straight onto Kafka the fold cannot know: registered
    spec = JobSpec(
        B_KAFKA,
        Schedule(ScheduleKind.AFTER, after_job_id=UP),
        main_task(("true",)),
        tenant="team-b",
    )
    forged = cmd.Envelope(
        idem_key="b-register", job_id=B_KAFKA, command=cmd.RegisterJob(spec=spec), tenant="team-b"
    )
    cluster.send_raw(B_KAFKA.encode(), encode_command(forged))
    for job in (B_EARLY, UP, A_FOLLOWER, B_KAFKA):
        assert events.wait_until(lambda log, j=job: bool(log.of_type(ev.JobRegistered, j)), 60)

    ups = []
    for key in ("run-1", "run-2"):
        r = a.post(f"/api/v1/jobs/{UP}/trigger", headers={"Idempotency-Key": key})
        assert r.status_code in (200, 201, 202), r.text
        run_id = str(r.json()["run_id"])
        assert events.wait_until(lambda log, r=run_id: r in ends(log, UP), 60), run_id
        ups.append(run_id)

    # team-a's follower: one run per upstream run; team-b's: a refusal per end, no run
    assert events.wait_until(
        lambda log: (
            {s.event.upstream_run_id for s in log.of_type(ev.RunScheduled, A_FOLLOWER)}  # type: ignore[attr-defined]
            == set(ups)
            and all(len(refusals(log, j)) >= len(ups) for j in (B_KAFKA, B_EARLY))
        ),
        60,
    ), [(j, events.events(j)) for j in (A_FOLLOWER, B_KAFKA, B_EARLY)]
    time.sleep(3)  # a late run of a team-b job would show up here
    events.poll(1)
    for job in (B_KAFKA, B_EARLY):
        assert events.of_type(ev.RunScheduled, job) == []
        assert events.of_type(ev.RunQueued, job) == []
        assert events.of_type(ev.TickSkipped, job) == []
        refused = refusals(events, job)
        assert {r.reason for r in refused} == {RejectReason.WRONG_TENANT}
        assert all("team-a" not in r.detail and r.run_id is None for r in refused)
    # what team-b sees of its job: no run, no skipped tick (nothing of team-a's timing)
    assert b.get(f"/api/v1/jobs/{B_EARLY}/runs").json()["runs"] == []
    assert b.get(f"/api/v1/jobs/{B_EARLY}/skipped").json()["skipped"] == []
    ended = {e.event.tenant for e in events.events(UP) if isinstance(e.event, ev.RunSucceeded)}  # type: ignore[attr-defined]
    assert ended == {"team-a"}
