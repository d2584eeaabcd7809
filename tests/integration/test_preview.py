"""Preview and skipped ticks through the API, against a real broker, scheduler and worker: the
preview agrees with the fold's own next tick, and a tick skipped for a full queue shows
up in ``GET /jobs/{id}/skipped`` and in the job's ``skipped_count``."""

from __future__ import annotations

import time
from datetime import datetime

import httpx
import pytest

from cronlog import events as ev
from cronlog.vocabulary import SkipReason
from tests.integration.harness import EventLog

pytestmark = pytest.mark.broker


def test_preview_of_a_registered_job(api: httpx.Client) -> None:
    body = {
        "job_id": "preview-berlin",
        "name": "nightly in Berlin",
        "schedule": {"type": "cron", "expression": "30 2 * * *", "timezone": "Europe/Berlin"},
        "command": ["true"],
    }
    assert api.post("/api/v1/jobs", json=body).status_code == 201
    r = api.get(
        "/api/v1/jobs/preview-berlin/ticks", params={"count": 3, "after": "2024-03-29T12:00:00Z"}
    )
    assert r.status_code == 200, r.text
    assert r.json() == {
        "job_id": "preview-berlin",
        "ticks": [
            {"utc": "2024-03-30T01:30:00.000Z", "local": "2024-03-30T02:30:00.000+01:00"},
            {"utc": "2024-03-31T01:00:00.000Z", "local": "2024-03-31T03:00:00.000+02:00"},
            {"utc": "2024-04-01T00:30:00.000Z", "local": "2024-04-01T02:30:00.000+02:00"},
        ],
    }
    assert len(api.get("/api/v1/jobs/preview-berlin/ticks").json()["ticks"]) == 10
    assert api.get("/api/v1/jobs/nope/ticks").status_code == 404

    # H is hashed on the job_id by the preview exactly as by the fold's first tick
    hashed = {
        "job_id": "preview-hashed",
        "name": "hashed",
        "schedule": {"type": "cron", "expression": "H H * * *", "timezone": "Asia/Kolkata"},
        "command": ["true"],
    }
    assert api.post("/api/v1/jobs", json=hashed).status_code == 201
    job = api.get("/api/v1/jobs/preview-hashed").json()
    ticks = api.get(
        "/api/v1/jobs/preview-hashed/ticks", params={"count": 1, "after": job["created_at"]}
    ).json()["ticks"]
    assert ticks[0]["utc"] == job["next_run_at"]
    assert ticks[0]["local"].endswith("+05:30")


def test_ticks_skipped_for_a_full_queue_are_served(api: httpx.Client, events: EventLog) -> None:
    # max_active_runs reached: a tick queues its run; past max_queued_runs it is skipped
    body = {
        "job_id": "preview-busy",
        "name": "long runs every second",
        "schedule": {"type": "cron", "expression": "*/1 * * * * *"},
        "command": ["sleep", "10"],
        "timeout_s": 30,
        "max_active_runs": 1,
        "max_queued_runs": 1,
    }
    assert api.post("/api/v1/jobs", json=body).status_code == 201
    deadline = time.monotonic() + 60
    skipped: list[dict] = []
    while time.monotonic() < deadline:
        skipped = api.get("/api/v1/jobs/preview-busy/skipped").json()["skipped"]
        if len(skipped) >= 3:
            break
        time.sleep(0.5)
    assert len(skipped) >= 3, skipped
    assert {s["reason"] for s in skipped} == {"queue_full"}
    instants = [datetime.fromisoformat(s["scheduled_for"]) for s in skipped]
    assert instants == sorted(instants, reverse=True)  # newest first
    assert len(set(instants)) == len(instants)
    assert all(t.microsecond == 0 for t in instants)
    assert api.get("/api/v1/jobs/preview-busy").json()["skipped_count"] >= len(skipped)
    assert (
        api.get("/api/v1/jobs/preview-busy/skipped", params={"limit": 2}).json()["skipped"]
        == skipped[:2]
    )
    # what the API lists is what the fold published
    wanted = {s["scheduled_for"] for s in skipped}
    assert events.wait_until(
        lambda log: (
            wanted
            <= {
                r.event.scheduled_for.isoformat(timespec="milliseconds").replace("+00:00", "Z")
                for r in log.of_type(ev.TickSkipped, "preview-busy")
                if r.event.reason is SkipReason.QUEUE_FULL
            }
        ),
        timeout=30,
    )
    assert api.delete("/api/v1/jobs/preview-busy").status_code in (200, 204)
