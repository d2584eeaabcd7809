"""Backfill against a real broker, scheduler, worker and API (issue 3 item 10): a dry run
creates nothing, a second backfill of a range creates nothing more, ``reprocess=failed``
runs only the failed ticks again, with new run_ids."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from cronlog.ids import run_id_for_tick
from cronlog.time import iso
from tests.integration.harness import Cluster

pytestmark = pytest.mark.broker
JOB = "bf-hourly"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def hours() -> Iterator[list[datetime]]:
    """Five whole hours, all past: h[0] is the range's (exclusive) start."""
    top = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    yield [top - timedelta(hours=6 - k) for k in range(5)]


def backfill(api: httpx.Client, start: datetime, end: datetime, **body: object) -> dict:
    answer = api.post(
        f"/api/v1/jobs/{JOB}/backfill", json={"start": iso(start), "end": iso(end), **body}
    )
    assert answer.status_code == 200, answer.text
    return answer.json()


def runs_of(api: httpx.Client) -> list[dict]:
    return api.get(f"/api/v1/jobs/{JOB}/runs", params={"limit": 100}).json()["runs"]


def settled(api: httpx.Client, n: int, timeout: float = 60) -> list[dict]:
    """Wait until the job has ``n`` runs, all terminal; return them."""
    deadline = time.monotonic() + timeout
    runs: list[dict] = []
    while time.monotonic() < deadline:
        runs = runs_of(api)
        if len(runs) == n and all(r["state"] in ("succeeded", "failed") for r in runs):
            return runs
        time.sleep(0.5)
    raise AssertionError(f"wanted {n} terminal runs, have {runs}")


def test_backfill_dry_run_idempotence_and_reprocess_failed(
    api: httpx.Client, cluster: Cluster, hours: list[datetime]
) -> None:
    body = {
        "job_id": JOB,
        "name": "hourly",
        "command": ["sh", "-c", "exit 1"],
        "schedule": {"type": "cron", "expression": "0 * * * *"},
        "timeout_s": 10,
    }
    assert api.post("/api/v1/jobs", json=body).status_code == 201
    h = hours

    # a dry run lists the four ticks of (h0, h4] and creates nothing (also via the CLI)
    dry = backfill(api, h[0], h[4], dry_run=True)
    assert dry["dry_run"] is True
    assert dry["runs"] == [
        {"scheduled_for": iso(t), "run_id": run_id_for_tick(JOB, t)} for t in h[1:]
    ]
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "services.cli",
            "jobs",
            "backfill",
            JOB,
            "--start",
            iso(h[0]),
            "--end",
            iso(h[4]),
            "--dry-run",
            "-o",
            "json",
            "--api",
            str(api.base_url),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=os.environ,
        timeout=60,
        check=False,
    )
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)["runs"] == dry["runs"]
    time.sleep(3)
    assert runs_of(api) == []

    # backfill (h0, h2] with a failing command: two runs, trigger backfill, both fail
    first = backfill(api, h[0], h[2], reprocess="none")
    assert [r["scheduled_for"] for r in first["runs"]] == [iso(h[1]), iso(h[2])]
    failed = settled(api, 2)
    assert {r["state"] for r in failed} == {"failed"}
    assert {r["trigger"] for r in failed} == {"backfill"}
    job = api.get(f"/api/v1/jobs/{JOB}").json()
    assert job["next_run_at"] > iso(datetime.now(UTC))  # the cursor did not move back

    # the command now succeeds; backfilling (h0, h4] twice creates h3 and h4 once
    patched = api.patch(f"/api/v1/jobs/{JOB}", json={"command": ["true"]})
    assert patched.status_code == 200, patched.text
    second = backfill(api, h[0], h[4], max_runs=10)
    assert [r["scheduled_for"] for r in second["runs"]] == [iso(h[3]), iso(h[4])]
    assert backfill(api, h[0], h[4])["runs"] == []
    retried = api.post(
        f"/api/v1/jobs/{JOB}/backfill",
        json={"start": iso(h[0]), "end": iso(h[4])},
        headers={"Idempotency-Key": "bf-retry"},
    )
    assert retried.status_code == 200 and retried.json()["runs"] == []
    runs = settled(api, 4)
    assert sorted(r["scheduled_for"] for r in runs) == [iso(t) for t in h[1:]]

    # reprocess=failed runs h1 and h2 again, with new run_ids, and only them
    redo = backfill(api, h[0], h[4], reprocess="failed")
    assert [r["scheduled_for"] for r in redo["runs"]] == [iso(h[1]), iso(h[2])]
    assert not {r["run_id"] for r in redo["runs"]} & {r["run_id"] for r in runs}
    runs = settled(api, 6)
    again = {r["run_id"]: r for r in runs if r["run_id"] in {x["run_id"] for x in redo["runs"]}}
    assert {r["state"] for r in again.values()} == {"succeeded"}
    assert backfill(api, h[0], h[4], reprocess="failed")["runs"] == []  # nothing failed now
    time.sleep(2)
    assert len(runs_of(api)) == 6

    # a deleted job refuses backfill
    assert api.delete(f"/api/v1/jobs/{JOB}").status_code == 200
    gone = api.post(
        f"/api/v1/jobs/{JOB}/backfill",
        json={"start": iso(h[0]), "end": iso(h[4]), "reprocess": "all"},
    )
    assert gone.status_code == 409
