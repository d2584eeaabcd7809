"""``GET /api/v1/workers`` and ``cronlog workers list`` over heartbeats fed by hand (no Kafka).

The directory takes records as the workers topic holds them (key, encoded heartbeat or a
tombstone) and lists workers against a clock the test moves: a worker is lost once its last
heartbeat is older than its ttl (3 heartbeat intervals).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import uvicorn
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from services.api.app import create_app
from services.api.routes.workers import WorkerDirectory
from services.api.settings import ApiSettings
from services.cli import main
from services.worker.heartbeat import Heartbeat
from services.worker.settings import WorkerSettings
from tests.integration.helpers import free_port
from tests.unit.authed import authed, token
from topology.wire.codec import encode_heartbeat
from topology.wire.heartbeats import HeldLease, WorkerHeartbeat

T0 = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)
TTL = timedelta(seconds=6)


class Clock:
    """The API's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def heartbeat(worker_id: str, at: datetime, *leases: HeldLease, slots: int = 4) -> WorkerHeartbeat:
    return WorkerHeartbeat(
        worker_id=worker_id,
        host="box",
        pid=100,
        slots=slots,
        free_slots=slots - len(leases),
        leases=leases,
        started_at=T0 - timedelta(minutes=1),
        at=at,
        ttl=TTL,
    )


def beat(directory: WorkerDirectory, hb: WorkerHeartbeat) -> None:
    directory.apply(hb.worker_id.encode(), encode_heartbeat(hb))


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def directory(tmp_path: Path, clock: Clock) -> WorkerDirectory:
    return WorkerDirectory(ApiSettings(api_state_dir=tmp_path / "rm"), clock=clock)


@pytest.fixture
def api(tmp_path: Path, directory: WorkerDirectory) -> TestClient:
    app = create_app(ApiSettings(api_state_dir=tmp_path / "rm"), worker_directory=directory)
    return authed(app, tenant="*")  # the platform's view: every lease (no read model here)


def listed(api: TestClient, **params: str) -> list[dict[str, object]]:
    answer = api.get("/api/v1/workers", params=params)
    assert answer.status_code == 200, answer.text
    workers: list[dict[str, object]] = answer.json()["workers"]
    return workers


def test_a_worker_is_listed_with_its_slots_leases_and_heartbeat_age(
    api: TestClient, directory: WorkerDirectory, clock: Clock
) -> None:
    beat(directory, heartbeat("w-b", T0, HeldLease("r1", "main", 2, 5)))
    beat(directory, heartbeat("w-a", T0 - timedelta(seconds=1)))
    clock.now = T0 + timedelta(seconds=1.5)
    workers = listed(api)
    assert [w["worker_id"] for w in workers] == ["w-a", "w-b"]
    assert workers[1] == {
        "worker_id": "w-b",
        "host": "box",
        "pid": 100,
        "slots": 4,
        "free_slots": 3,
        "leases": [{"run_id": "r1", "task": "main", "attempt": 2, "epoch": 5}],
        "started_at": "2026-06-01T08:59:00.000Z",
        "last_heartbeat_at": "2026-06-01T09:00:00.000Z",
        "age_s": 1.5,
        "ttl_s": 6.0,
        "state": "alive",
    }
    assert workers[0]["age_s"] == 2.5


def test_a_worker_past_its_ttl_is_lost_and_listed_only_on_request(
    api: TestClient, directory: WorkerDirectory, clock: Clock
) -> None:
    beat(directory, heartbeat("w1", T0))
    clock.now = T0 + TTL  # exactly at the ttl: still vouched for
    assert [w["state"] for w in listed(api)] == ["alive"]
    clock.now = T0 + TTL + timedelta(milliseconds=1)
    assert listed(api) == []
    [lost] = listed(api, include_lost="true")
    assert (lost["worker_id"], lost["state"], lost["age_s"]) == ("w1", "lost", 6.001)
    beat(directory, heartbeat("w1", clock.now))  # it heartbeats again: alive
    assert [w["state"] for w in listed(api)] == ["alive"]


def test_a_tombstone_removes_the_worker_and_an_older_heartbeat_changes_nothing(
    api: TestClient, directory: WorkerDirectory
) -> None:
    beat(directory, heartbeat("w1", T0, HeldLease("r1", "main", 1, 1)))
    beat(directory, heartbeat("w1", T0 - timedelta(seconds=2)))  # read out of order
    [w] = listed(api)
    assert w["last_heartbeat_at"] == "2026-06-01T09:00:00.000Z" and w["free_slots"] == 3
    directory.apply(b"w1", b"\x00junk")  # undecodable: logged and skipped
    directory.apply(None, encode_heartbeat(heartbeat("w2", T0)))  # no key: not a worker
    assert [w["worker_id"] for w in listed(api)] == ["w1"]
    directory.apply(b"w1", None)
    assert listed(api, include_lost="true") == []


def test_without_a_workers_reader_the_listing_is_503(tmp_path: Path) -> None:
    bare = authed(create_app(ApiSettings(api_state_dir=tmp_path / "rm")))
    assert bare.get("/api/v1/workers").status_code == 503


def test_a_heartbeat_carries_the_held_leases_free_slots_and_three_intervals_of_ttl() -> None:
    held = [HeldLease("r1", "main", 1, 4)]
    settings = WorkerSettings(bootstrap="127.0.0.1:9", worker_id="w-test", slots=3, heartbeat_s=0.5)
    hb = Heartbeat(settings, lambda: held).beat(T0)  # the producer never connects: no send
    assert (hb.worker_id, hb.slots, hb.free_slots, hb.leases) == ("w-test", 3, 2, (held[0],))
    assert (hb.at, hb.ttl) == (T0, timedelta(seconds=1.5))
    assert hb.started_at <= datetime.now(UTC)


@pytest.fixture
def served(api: TestClient) -> Iterator[str]:
    """The same app on a real HTTP port, for the CLI."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(api.app, port=port, lifespan="off", log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60  # a loaded box (xdist workers beside the broker)
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, f"the API did not start on port {port} within 60 s"
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


def test_cronlog_workers_list_prints_a_table_and_json(
    served: str, directory: WorkerDirectory, clock: Clock
) -> None:
    beat(directory, heartbeat("w-cli", T0, HeldLease("r0123456789", "load", 1, 2)))
    clock.now = T0 + timedelta(seconds=1)
    runner = CliRunner(env={"CRONLOG_API_TOKEN": token("*")})
    as_json = runner.invoke(main.app, ["workers", "list", "--api", served, "-o", "json"])
    assert as_json.exit_code == 0, as_json.output
    [w] = json.loads(as_json.output)
    assert (w["worker_id"], w["slots"], w["free_slots"], w["state"]) == ("w-cli", 4, 3, "alive")
    table = runner.invoke(
        main.app,
        ["workers", "list", "--api", served],
        env={"COLUMNS": "200", "CRONLOG_API_TOKEN": token("*")},
    )
    assert table.exit_code == 0, table.output
    row = next(line for line in table.output.splitlines() if "w-cli" in line)
    cells = [c.strip() for c in row.strip("│┃ ").split("│")]
    assert cells[:6] == ["w-cli", "box", "100", "4", "3", "r01234567/load#1"]
    assert cells[-1] == "alive"
    clock.now = T0 + timedelta(seconds=10)
    lost = runner.invoke(main.app, ["workers", "list", "--api", served, "--include-lost"])
    assert "lost" in lost.output
