"""Hot-history retention against a real broker, scheduler, worker and API started with a
window of a few seconds (``CRONLOG_HISTORY_HOT_DAYS`` as a fraction of a day): a run that
ended before the window is gone once newer run-events move the clock on, newer runs and a
run still going are served, pages stay whole, and the pruning is counted."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from tests.integration.harness import Cluster
from tests.integration.helpers import platform, sample, scrape, start_api, wait_for

pytestmark = pytest.mark.broker
WINDOW_S = 4
"""The hot window, seconds (on the run-events' clock)."""


def job(api: httpx.Client, job_id: str, command: list[str]) -> None:
    body = {"job_id": job_id, "name": job_id, "schedule": {"type": "manual"}, "command": command}
    assert api.post("/api/v1/jobs", json=body).status_code == 201, job_id


def trigger(api: httpx.Client, job_id: str) -> str:
    answer = api.post(f"/api/v1/jobs/{job_id}/trigger")
    assert answer.status_code < 300, answer.text
    return str(answer.json()["run_id"])


def state(api: httpx.Client, run_id: str) -> str | None:
    answer = api.get(f"/api/v1/runs/{run_id}")
    return str(answer.json()["state"]) if answer.status_code == 200 else None


def run_ids(api: httpx.Client, job_id: str) -> list[str]:
    ids: list[str] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 1, **({"cursor": cursor} if cursor else {})}
        answer = api.get(f"/api/v1/jobs/{job_id}/runs", params=params).json()
        ids += [r["run_id"] for r in answer["runs"]]
        cursor = answer["next_cursor"]
        if cursor is None:
            return ids


def test_old_runs_are_pruned_and_new_and_live_ones_served(cluster: Cluster) -> None:
    cluster.scheduler()
    cluster.worker()
    api = start_api(
        cluster,
        CRONLOG_HISTORY_HOT_DAYS=str(WINDOW_S / 86400),
        CRONLOG_HISTORY_PRUNE_INTERVAL_S="0.5",
    )
    job(api, "hist-live", ["sleep", "60"])
    job(api, "hist-quick", ["true"])
    live = trigger(api, "hist-live")
    wait_for(lambda: state(api, live) == "running", 60, "live run running")
    old = trigger(api, "hist-quick")
    wait_for(lambda: state(api, old) == "succeeded", 60, "old run succeeded")
    assert run_ids(api, "hist-quick") == [old]

    # newer run-events move the read model's clock past the old run's end + the window
    def newer_run_pruned_the_old() -> bool:
        new = trigger(api, "hist-quick")
        wait_for(lambda: state(api, new) == "succeeded", 60, "new run succeeded")
        for _ in range(6):  # a few pruning passes (every 0.5 s)
            if state(api, old) is None:
                return True
            time.sleep(0.5)
        return False

    wait_for(newer_run_pruned_the_old, 90, "old run pruned", every=WINDOW_S)
    kept = run_ids(api, "hist-quick")
    assert old not in kept
    assert kept  # the newest run (ended within the window) is served
    assert state(api, kept[0]) == "succeeded"
    assert state(api, live) == "running"  # older than the window, but not ended: kept
    assert run_ids(api, "hist-live") == [live]
    job_view = api.get("/api/v1/jobs/hist-quick").json()
    assert job_view["counts"]["runs"] >= len(kept) + 1  # totals count pruned runs too
    metrics = scrape(platform(cluster, api))
    assert sample(metrics, "cronlog_history_pruned_total", kind="runs") >= 1
    assert sample(metrics, "cronlog_history_pruned_total", kind="events") >= 1
    assert api.post(f"/api/v1/runs/{live}/cancel").status_code in (200, 202)
