"""Job after job on a real broker: a job ``after`` X runs exactly once per qualifying run of X
(``on: success``: succeeded ones only; ``on: done``: every one), across a kill -9 and restart
of the scheduler, which is also the process that relays the events."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from cronlog import events as ev
from cronlog.vocabulary import RunTrigger
from tests.integration.harness import Cluster, EventLog

pytestmark = pytest.mark.broker


def register(api: httpx.Client, body: dict[str, Any]) -> None:
    r = api.post("/api/v1/jobs", json={"command": ["true"], **body})
    assert r.status_code == 201, r.text


def trigger(api: httpx.Client, job_id: str, key: str) -> str:
    r = api.post(f"/api/v1/jobs/{job_id}/trigger", headers={"Idempotency-Key": key})
    assert r.status_code in (200, 201, 202), r.text
    return str(r.json()["run_id"])


def ended(events: EventLog, job_id: str) -> dict[str, type]:
    return {
        e.event.run_id: type(e.event)
        for e in events.events(job_id)
        if isinstance(e.event, ev.RunSucceeded | ev.RunFailed)
    }


def after_runs(events: EventLog, job_id: str) -> list[ev.RunScheduled]:
    return [e.event for e in events.of_type(ev.RunScheduled, job_id)]


def test_after_jobs_run_once_per_qualifying_upstream_run_across_a_scheduler_kill(
    api: httpx.Client, cluster: Cluster, events: EventLog, tmp_path: Path
) -> None:
    # x fails when its trigger key says so (CRONLOG_IDEM_KEY holds the run id, not the key;
    # the flag file decides: present = fail).
    flag = tmp_path / "fail"
    register(
        api,
        {
            "job_id": "x",
            "name": "x",
            "schedule": {"type": "manual"},
            "kind": "shell",
            "command": [],
            "shell": f"test ! -e {flag}",
        },
    )
    register(
        api, {"job_id": "on-success", "name": "s", "schedule": {"type": "after", "job_id": "x"}}
    )
    register(
        api,
        {
            "job_id": "on-done",
            "name": "d",
            "schedule": {"type": "after", "job_id": "x", "on": "done"},
        },
    )
    got = api.get("/api/v1/jobs/on-done").json()["schedule"]
    assert (got["type"], got["job_id"], got["on"]) == ("after", "x", "done")

    def run_x(key: str, fail: bool) -> str:
        if fail:
            flag.touch()
        else:
            flag.unlink(missing_ok=True)
        run_id = trigger(api, "x", key)
        assert events.wait_until(lambda log: run_id in ended(log, "x"), 60), run_id
        return run_id

    ok1 = run_x("a", fail=False)
    bad1 = run_x("b", fail=True)
    ok2 = run_x("c", fail=False)

    # kill -9 the scheduler (fold and relay alike) right after an upstream run ended
    ok3 = trigger(api, "x", "d")
    flag.unlink(missing_ok=True)
    assert events.wait_until(lambda log: ok3 in ended(log, "x"), 60)
    scheduler = next(p for p in cluster.procs if p.name == "scheduler")
    scheduler.kill9()
    cluster.scheduler()
    bad2 = run_x("e", fail=True)
    ok4 = run_x("f", fail=False)

    x_ends = ended(events, "x")
    assert [x_ends[r] for r in (ok1, bad1, ok2, ok3, bad2, ok4)] == [
        ev.RunSucceeded,
        ev.RunFailed,
        ev.RunSucceeded,
        ev.RunSucceeded,
        ev.RunFailed,
        ev.RunSucceeded,
    ]
    want = {"on-success": {ok1, ok2, ok3, ok4}, "on-done": {ok1, bad1, ok2, ok3, bad2, ok4}}
    for job_id, upstream in want.items():
        assert events.wait_until(
            lambda log, j=job_id, u=upstream: (
                {r.upstream_run_id for r in after_runs(log, j)} >= u
                and len(ended(log, j)) >= len(u)
            ),
            60,
        ), (job_id, after_runs(events, job_id))
    time.sleep(3)  # a late duplicate would show up here
    events.poll(1)
    scheduled_up = {
        e.event.run_id: e.event.scheduled_for for e in events.of_type(ev.RunScheduled, "x")
    }
    for job_id, upstream in want.items():
        runs = after_runs(events, job_id)
        distinct = {r.run_id: r for r in runs}  # at-least-once may re-deliver an event
        per_upstream = Counter(r.upstream_run_id for r in distinct.values())
        assert set(per_upstream) == upstream and set(per_upstream.values()) == {1}, job_id
        assert len(ended(events, job_id)) == len(upstream), job_id
        for r in distinct.values():
            assert r.trigger is RunTrigger.AFTER and r.upstream_job_id == "x"
            assert r.scheduled_for == scheduled_up[r.upstream_run_id or ""]
    doc = api.get(f"/api/v1/runs/{next(iter(distinct))}").json()
    assert doc["upstream_job_id"] == "x" and doc["upstream_run_id"] in want["on-done"]
    assert doc["trigger"] == "after"
