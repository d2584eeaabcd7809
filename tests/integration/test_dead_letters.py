"""Dead letters and cancel against a real broker, scheduler, worker and API: an always-failing
task is dead-lettered with its last exit code and output, listed and replayed as a new run
(old attempts kept); a cancel stops a running task's process within one renewal interval."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.helpers import wait_for

pytestmark = pytest.mark.broker


def dead_letters(api: httpx.Client, job_id: str) -> list[dict[str, Any]]:
    answer = api.get("/api/v1/dead-letters", params={"job_id": job_id})
    assert answer.status_code == 200, answer.text
    letters: list[dict[str, Any]] = answer.json()["dead_letters"]
    return letters


def test_always_failing_task_is_dead_lettered_listed_and_replayed(api: httpx.Client) -> None:
    body = {
        "job_id": "dl-fails",
        "name": "always fails",
        "schedule": {"type": "manual"},
        "command": ["sh", "-c", "echo attempt-output; exit 4"],
        "retry_policy": {"max_attempts": 3, "base_s": 1},
    }
    assert api.post("/api/v1/jobs", json=body).status_code == 201
    run_id = api.post("/api/v1/jobs/dl-fails/trigger").json()["run_id"]

    [letter] = wait_for(lambda: dead_letters(api, "dl-fails"), 60, "dead letter")
    assert (letter["run_id"], letter["task"], letter["attempt"]) == (run_id, "main", 3)
    assert (letter["failure_kind"], letter["exit_code"]) == ("nonzero_exit", 4)
    assert "attempt-output" in letter["output_tail"]
    run = api.get(f"/api/v1/runs/{run_id}").json()
    assert run["state"] == "failed" and len(run["attempts"]) == 3

    answer = api.post("/api/v1/dead-letters/replay", json={"run_id": run_id, "task": "main"})
    assert answer.status_code == 200, answer.text
    [replay] = answer.json()["replays"]
    new_run = replay["replay_run_id"]
    assert new_run != run_id
    replayed = wait_for(
        lambda: (r := api.get(f"/api/v1/runs/{new_run}").json()).get("state") == "failed" and r,
        60,
        "replay run failed again",
    )
    assert (replayed["trigger"], replayed["replay_of"]) == ("replay", run_id)
    assert [a["attempt"] for a in replayed["attempts"]] == [1, 2, 3]
    assert all(a["epoch"] is not None and a["exit_code"] == 4 for a in replayed["attempts"])
    old = api.get(f"/api/v1/runs/{run_id}").json()
    assert len(old["attempts"]) == 3  # the old attempts are still there
    letters = wait_for(
        lambda: len(ls := dead_letters(api, "dl-fails")) == 2 and ls,
        10,
        "the replay's own dead letter",
    )
    assert {d["run_id"] for d in letters} == {run_id, new_run}
    assert next(d for d in letters if d["run_id"] == run_id)["replays"] == [new_run]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_cancel_stops_a_running_task_within_one_renewal_interval(
    api: httpx.Client, tmp_path: Path
) -> None:
    pid_file = tmp_path / "pid"
    body = {
        "job_id": "cancel-me",
        "name": "sleeps",
        "schedule": {"type": "manual"},
        "command": ["sh", "-c", f"echo $$ > {pid_file}; exec sleep 30"],
        "lease_ttl_s": 6,
    }  # renewal every ttl/6 = 1 s
    assert api.post("/api/v1/jobs", json=body).status_code == 201
    run_id = api.post("/api/v1/jobs/cancel-me/trigger").json()["run_id"]
    wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), 30, "task started")
    pid = int(pid_file.read_text())
    assert _alive(pid)

    cancelled_at = time.monotonic()
    answer = api.post(f"/api/v1/runs/{run_id}/cancel", json={})
    assert answer.status_code == 200, answer.text
    assert answer.json()["state"] == "cancelled"
    wait_for(lambda: not _alive(pid), 1.0 + 2.0, "the task's process killed")
    stopped_s = time.monotonic() - cancelled_at
    print(f"cancel → process gone in {stopped_s:.2f} s (renewal interval 1 s)")
    again = api.post(f"/api/v1/runs/{run_id}/cancel", json={})
    assert again.status_code == 409
    assert api.post("/api/v1/runs/r-unknown/cancel", json={}).status_code == 404
