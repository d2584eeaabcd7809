"""``cronlog runs watch`` and ``--wait`` progress on backfill and dead-letter replay, against a
real scheduler, worker and API (issue 15, part 5)."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from tests.integration.harness import Cluster
from tests.integration.helpers import wait_for

pytestmark = pytest.mark.broker


def cli(api: httpx.Client, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``cronlog ARGS --api URL`` (not on a terminal: line output, no live redraw)."""
    return subprocess.run(
        [sys.executable, "-m", "services.cli", *args, "--api", str(api.base_url)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def job(job_id: str, cron: str, command: list[str]) -> dict[str, object]:
    return {
        "job_id": job_id,
        "name": job_id,
        "command": command,
        "schedule": {"type": "cron", "expression": cron},
        "timeout_s": 30,
    }


def test_runs_watch_prints_a_line_per_run_change_and_runs_job_still_lists(
    api: httpx.Client, cluster: Cluster
) -> None:
    assert api.post("/api/v1/jobs", json=job("w2s", "*/2 * * * * *", ["true"])).status_code == 201
    wait_for(
        lambda: (
            [
                r
                for r in api.get("/api/v1/jobs/w2s/runs").json()["runs"]
                if r["state"] == "succeeded"
            ]
            or None
        ),
        60,
        "a run of w2s succeeded",
    )
    watched = cli(api, "runs", "watch", "--job-id", "w2s", "--duration", "5")
    assert watched.returncode == 0, watched.stderr
    lines = [ln.split() for ln in watched.stdout.splitlines() if " w2s " in ln]
    # each line: tick, job, run, state[, lag N s][, exit N]; the succeeded runs are there
    assert lines and all(ln[1] == "w2s" and ln[2].startswith("r") for ln in lines)
    assert "succeeded" in {ln[3] for ln in lines}
    # a run id appears again only when its state changed
    pairs = [(ln[2], ln[3]) for ln in lines]
    assert len(pairs) == len(set(pairs))

    listed = cli(api, "runs", "w2s", "-o", "json")  # the old form still lists
    assert listed.returncode == 0, listed.stderr
    assert '"job_id": "w2s"' in listed.stdout or '"run_id"' in listed.stdout

    unknown = cli(api, "runs", "watch", "--job-id", "nope", "--duration", "1")
    assert unknown.returncode == 1  # not found (or another tenant's): said at once
    assert "404" in unknown.stderr and "nope" in unknown.stderr


def test_backfill_and_dead_letter_replay_wait_for_their_runs_with_exit_codes(
    api: httpx.Client, cluster: Cluster
) -> None:
    hourly = job("hourly", "0 * * * *", ["true"])
    assert api.post("/api/v1/jobs", json=hourly).status_code == 201
    end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    start = end - timedelta(hours=3)
    done = cli(
        api,
        "jobs",
        "backfill",
        "hourly",
        "--start",
        start.isoformat(),
        "--end",
        end.isoformat(),
        "--wait",
        "90",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 run(s): 3 succeeded" in done.stdout
    assert "runs ended" in done.stderr  # the progress bar (stderr)

    failing = job("fails", "0 * * * *", ["sh", "-c", "exit 3"])  # 1 attempt
    assert api.post("/api/v1/jobs", json=failing).status_code == 201
    bad = cli(
        api,
        "jobs",
        "backfill",
        "fails",
        "--start",
        (end - timedelta(hours=1)).isoformat(),
        "--end",
        end.isoformat(),
        "--wait",
        "90",
    )
    assert bad.returncode == 3, bad.stdout + bad.stderr  # a run failed (1/2: API errors)
    assert "1 run(s): 1 failed" in bad.stdout
    wait_for(
        lambda: (
            api.get("/api/v1/dead-letters", params={"job_id": "fails"}).json()["dead_letters"]
            or None
        ),
        60,
        "the failed task dead-lettered",
    )
    replayed = cli(api, "dead-letters", "replay", "--job-id", "fails", "--wait", "90")
    assert replayed.returncode == 3, replayed.stdout + replayed.stderr  # it fails again
    assert "replayed 1 dead letter(s)" in replayed.stdout
    assert "1 run(s): 1 failed" in replayed.stdout
