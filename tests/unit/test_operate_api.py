"""Cancel and dead-letter endpoints against a read model fed RunEvents by hand (no Kafka):
the dead-letter listing and its filters, replay links, and the 404/409/422 answers given
before anything is produced."""

from __future__ import annotations

from datetime import timedelta

from fastapi.testclient import TestClient

from cronlog import events as ev
from cronlog.time import iso
from cronlog.vocabulary import RunTrigger
from services.api.readmodel.reader import ReadModel
from tests.unit.rm_feed import JOB, T0, dead_letter, feed, register, run


def test_dead_letters_are_listed_newest_first_with_kind_exit_code_and_output(
    rm: ReadModel, client: TestClient
) -> None:
    register(rm)
    register(rm, job_id="other")
    first, second = dead_letter(rm, 1), dead_letter(rm, 2)
    third = dead_letter(rm, 3, job_id="other")
    listed = client.get("/api/v1/dead-letters").json()["dead_letters"]
    assert [d["run_id"] for d in listed] == [third, second, first]
    assert listed[1] == {
        "job_id": JOB,
        "run_id": second,
        "task": "main",
        "attempt": 1,
        "failure_kind": "nonzero_exit",
        "exit_code": 3,
        "output_tail": "boom",
        "scheduled_for": iso(T0 + timedelta(hours=2)),
        "dead_lettered_at": iso(T0 + timedelta(hours=2)),
        "replays": [],
    }
    mine = client.get("/api/v1/dead-letters", params={"job_id": JOB}).json()["dead_letters"]
    assert [d["run_id"] for d in mine] == [second, first]
    window = client.get(
        "/api/v1/dead-letters",
        params={"since": iso(T0 + timedelta(hours=2)), "until": iso(T0 + timedelta(hours=3))},
    ).json()
    assert [d["run_id"] for d in window["dead_letters"]] == [second]


def test_a_replay_run_is_linked_from_its_dead_letter(rm: ReadModel, client: TestClient) -> None:
    register(rm)
    original = dead_letter(rm, 1)
    feed(
        rm,
        "replay",
        ev.RunScheduled(
            run_id="r-replay",
            scheduled_for=T0 + timedelta(hours=1),
            trigger=RunTrigger.REPLAY,
            tasks=("main",),
            next_fire_at=None,
            replay_of=original,
        ),
    )
    [doc] = client.get("/api/v1/dead-letters").json()["dead_letters"]
    assert doc["replays"] == ["r-replay"]
    replay = client.get("/api/v1/runs/r-replay").json()
    assert (replay["trigger"], replay["replay_of"]) == ("replay", original)
    assert client.get(f"/api/v1/runs/{original}").json()["attempts"][0]["exit_code"] == 3


def test_cancel_of_an_unknown_run_or_task_is_404_and_of_an_ended_run_409(
    rm: ReadModel, client: TestClient
) -> None:
    register(rm)
    assert client.post("/api/v1/runs/r-nope/cancel").status_code == 404
    active = run(rm, T0, "active")
    answer = client.post(f"/api/v1/runs/{active}/cancel", json={"task": "nope"})
    assert answer.status_code == 404 and "nope" in answer.json()["detail"]
    ended = run(rm, T0 + timedelta(hours=1), "succeeded")
    answer = client.post(f"/api/v1/runs/{ended}/cancel", json={})
    assert answer.status_code == 409 and "succeeded" in answer.json()["detail"]


def test_a_task_cancelled_alone_shows_on_its_attempt(rm: ReadModel, client: TestClient) -> None:
    register(rm)
    rid = run(rm, T0, "active")
    feed(
        rm,
        "c",
        ev.TaskReady(run_id=rid, task="main", attempt=1, scheduled_for=T0),
        ev.TaskCancelled(run_id=rid, task="main", attempt=1, worker_id=None),
        ev.RunFailed(run_id=rid),
    )
    doc = client.get(f"/api/v1/runs/{rid}").json()
    assert doc["state"] == "failed" and doc["cancelled_tasks"] == ["main"]
    assert doc["attempts"][0]["state"] == "cancelled"


def test_replay_requests_name_the_missing_field_or_the_missing_dead_letter(
    rm: ReadModel, client: TestClient
) -> None:
    register(rm)
    answer = client.post("/api/v1/dead-letters/replay", json={"run_id": "r1"})
    assert answer.status_code == 422 and answer.json()["detail"][0]["loc"] == ["body", "task"]
    answer = client.post("/api/v1/dead-letters/replay", json={})
    assert answer.status_code == 422
    rid = run(rm, T0, "failed")  # failed, but no TaskDeadLettered (an older log)
    answer = client.post("/api/v1/dead-letters/replay", json={"run_id": rid, "task": "main"})
    assert answer.status_code == 404
