"""Workers are visible (issue 13): heartbeats on ``cronlog.workers`` → ``GET /api/v1/workers``.

On a real broker: a worker is listed with its slots while it runs, with the lease it holds while
a task runs, and is gone once it stopped gracefully (its tombstone); a worker killed outright is
listed as lost (``include_lost``) once its last heartbeat is older than its ttl.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from cronlog import commands as cmd
from cronlog import events as ev
from tests.integration.harness import Cluster, EventLog
from tests.integration.helpers import once_job, start_api, wait_for

pytestmark = pytest.mark.broker

HEARTBEAT_S = "0.5"


def _workers(api: httpx.Client, include_lost: bool = False) -> dict[str, dict[str, Any]]:
    answer = api.get("/api/v1/workers", params={"include_lost": str(include_lost).lower()})
    assert answer.status_code == 200, answer.text
    return {w["worker_id"]: w for w in answer.json()["workers"]}


@pytest.fixture
def api(cluster: Cluster) -> Iterator[httpx.Client]:
    """An API of the cluster (no scheduler, no worker yet)."""
    client = start_api(cluster)  # already used: closed by hand, not by a with block
    yield client
    client.close()


def test_a_worker_is_listed_with_its_slots_and_leases_then_gone_when_it_stops(
    cluster: Cluster, events: EventLog, api: httpx.Client
) -> None:
    wid = f"{cluster.settings.topic_prefix}w1"
    proc = cluster.worker(
        "w1", CRONLOG_SLOTS="3", CRONLOG_HEARTBEAT_S=HEARTBEAT_S, CRONLOG_DRAIN_S="1"
    )
    listed = wait_for(lambda: _workers(api).get(wid), 60, "the worker listed")
    assert proc.popen is not None
    assert (listed["slots"], listed["free_slots"], listed["leases"]) == (3, 3, [])
    assert (listed["pid"], listed["state"], listed["ttl_s"]) == (proc.popen.pid, "alive", 1.5)
    assert listed["age_s"] < 1.5

    cluster.scheduler()
    cluster.send(
        "sleepy",
        cmd.RegisterJob(spec=once_job(datetime.now(UTC) + timedelta(seconds=1), ("sleep", "60"))),
    )
    assert events.wait_until(lambda log: log.of_type(ev.TaskClaimed, "sleepy"), 90)
    claim = events.of_type(ev.TaskClaimed, "sleepy")[0].event
    busy = wait_for(lambda: (w := _workers(api).get(wid)) and w["leases"] and w, 30, "a lease")
    assert busy["free_slots"] == 2
    assert busy["leases"] == [
        {"run_id": claim.run_id, "task": "main", "attempt": 1, "epoch": claim.epoch}
    ]

    proc.stop()  # SIGTERM: drain 1 s, release, tombstone
    assert proc.popen.returncode == 0, proc.log_tail()
    wait_for(lambda: wid not in _workers(api, include_lost=True), 30, "the worker gone")


def test_a_worker_killed_outright_is_lost_after_its_ttl(
    cluster: Cluster, api: httpx.Client
) -> None:
    wid = f"{cluster.settings.topic_prefix}w9"
    proc = cluster.worker("w9", CRONLOG_HEARTBEAT_S=HEARTBEAT_S)
    wait_for(lambda: wid in _workers(api), 60, "the worker listed")
    proc.kill9()  # no tombstone
    lost = wait_for(
        lambda: wid not in _workers(api) and _workers(api, include_lost=True).get(wid),
        30,
        "the worker lost",
    )
    assert lost["state"] == "lost" and lost["age_s"] > lost["ttl_s"] == 1.5
