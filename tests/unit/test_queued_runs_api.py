"""Queued runs through the API (issue 13): the pure core decides, the projection shows, no Kafka.

Every event here comes from ``cronlog.decide.handle`` with the ids the fold adapter gives it,
so the read model is fed what the fold would publish. Writes are answered from events already
applied under the request's Idempotency-Key (a retried request), or end 503 offline.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.ids import event_id
from cronlog.time import iso
from cronlog.vocabulary import RunTrigger
from services.api.readmodel.projection import apply
from services.api.readmodel.reader import ReadModel
from services.api.readmodel.store import Batch
from services.api.shapes.definition import JobIn
from services.api.shapes.mapping import to_spec
from services.cli.client import full_definition, load_job_file
from tests.unit.projected_fold import JOB, SPEC, T0, Fold


def _run_of(events: list[ev.Event], kind: type) -> str:
    return next(e.run_id for e in events if isinstance(e, kind))  # type: ignore[attr-defined]


def _runs(client: TestClient) -> dict[str, dict[str, Any]]:
    answer = client.get(f"/api/v1/jobs/{JOB}/runs")
    assert answer.status_code == 200, answer.text
    return {r["run_id"]: r for r in answer.json()["runs"]}


def _counts(client: TestClient) -> dict[str, int]:
    counts: dict[str, int] = client.get(f"/api/v1/jobs/{JOB}").json()["counts"]
    return counts


def test_a_tick_past_max_active_runs_is_a_queued_run_that_starts_when_a_slot_frees(
    rm: ReadModel, client: TestClient
) -> None:
    fold = Fold(rm)
    first = _run_of(fold.tick(0), ev.RunScheduled)
    queued = _run_of(fold.tick(1), ev.RunQueued)
    runs = _runs(client)
    assert list(runs) == [queued, first]  # newest scheduled_for first
    doc = runs[queued]
    assert (doc["state"], doc["trigger"], doc["scheduled_for"]) == (
        "queued",
        "schedule",
        iso(T0 + timedelta(minutes=1)),
    )
    assert doc["queued_at"] == iso(T0 + timedelta(minutes=1, seconds=1))
    assert (doc["tasks"], doc["task_instances"]) == ([], [])
    assert _counts(client) == {
        "runs": 2,
        "active": 1,
        "queued": 1,
        "succeeded": 0,
        "failed": 0,
        "cancelled": 0,
    }
    job = client.get(f"/api/v1/jobs/{JOB}").json()
    assert job["last_run"]["state"] == "queued"
    assert job["next_run_at"] == iso(T0 + timedelta(minutes=2))

    started = fold.send("cancel-first", cmd.CancelRun(run_id=first), T0 + timedelta(minutes=1.5))
    assert [type(e) for e in started] == [ev.RunCancelled, ev.RunScheduled, ev.TaskReady]
    doc = _runs(client)[queued]
    assert (doc["state"], doc["tasks"], doc["queued_at"]) == (
        "ready",
        ["main"],
        iso(T0 + timedelta(minutes=1, seconds=1)),
    )
    assert [ti["state"] for ti in doc["task_instances"]] == ["ready"]
    assert _counts(client) == {  # the queued run was counted once, when it was queued
        "runs": 2,
        "active": 1,
        "queued": 0,
        "succeeded": 0,
        "failed": 0,
        "cancelled": 1,
    }


def test_a_queued_after_run_keeps_its_upstream(rm: ReadModel) -> None:
    batch = Batch(rm.store)
    queued = ev.RunQueued(
        run_id="r-after",
        scheduled_for=T0,
        trigger=RunTrigger.AFTER,
        next_fire_at=None,
        upstream_job_id="up",
        upstream_run_id="r-up",
    )
    record = ev.RunEvent(
        event_id=event_id("after-1", JOB, 0),
        job_id=JOB,
        at=T0,
        idem_key="after-1",
        index=0,
        event=queued,
    )
    assert apply(batch, record) and not apply(batch, record)  # a re-delivery changes nothing
    batch.commit()
    doc = rm.run("r-after")
    assert doc is not None
    assert (doc["state"], doc["trigger"], doc["upstream_job_id"], doc["upstream_run_id"]) == (
        "queued",
        "after",
        "up",
        "r-up",
    )


def test_a_full_queue_skips_the_tick_and_says_why(rm: ReadModel, client: TestClient) -> None:
    fold = Fold(rm)
    fold.tick(0)
    assert [type(e) for e in fold.tick(1)] == [ev.RunQueued]
    assert [type(e) for e in fold.tick(2)] == [ev.RunQueued]
    assert [type(e) for e in fold.tick(3)] == [ev.TickSkipped]  # max_queued_runs = 2
    assert _counts(client)["queued"] == 2
    [skip] = client.get(f"/api/v1/jobs/{JOB}/skipped").json()["skipped"]
    assert (skip["reason"], skip["scheduled_for"]) == ("queue_full", iso(T0 + timedelta(minutes=3)))


def test_cancel_of_a_queued_run_answers_the_cancelled_run(
    rm: ReadModel, offline: TestClient
) -> None:
    fold = Fold(rm)
    fold.tick(0)
    queued = _run_of(fold.tick(1), ev.RunQueued)
    # what the fold answers to the API's CancelRun under the request's Idempotency-Key
    events = fold.send("cancel-q", cmd.CancelRun(run_id=queued), T0 + timedelta(minutes=1.5))
    assert [type(e) for e in events] == [ev.RunCancelled]
    answer = offline.post(  # answered from the applied events: nothing is produced
        f"/api/v1/runs/{queued}/cancel", json={}, headers={"Idempotency-Key": "cancel-q"}
    )
    assert answer.status_code == 200, answer.text
    run = answer.json()
    assert (run["state"], run["cancel_reason"]) == ("cancelled", "user")
    assert run["finished_at"] == iso(T0 + timedelta(minutes=1.5))
    assert _counts(offline) == {
        "runs": 2,
        "active": 1,
        "queued": 0,
        "succeeded": 0,
        "failed": 0,
        "cancelled": 1,
    }
    assert [type(e) for e in fold.tick(2)] == [ev.RunQueued]  # the queue has room again


def test_a_queued_run_is_cancellable_and_its_tasks_are_not(
    rm: ReadModel, offline: TestClient
) -> None:
    fold = Fold(rm)
    fold.tick(0)
    queued = _run_of(fold.tick(1), ev.RunQueued)
    whole = offline.post(f"/api/v1/runs/{queued}/cancel", json={})
    assert whole.status_code == 503, whole.text  # valid: it only needs Kafka
    task = offline.post(f"/api/v1/runs/{queued}/cancel", json={"task": "main"})
    assert task.status_code == 409 and "queued" in task.json()["detail"]
    rerun = offline.post(f"/api/v1/runs/{queued}/tasks/main/retry", json={})
    assert rerun.status_code == 409 and "queued" in rerun.json()["detail"]


def test_deleting_the_job_cancels_its_queue(rm: ReadModel, client: TestClient) -> None:
    fold = Fold(rm)
    first = _run_of(fold.tick(0), ev.RunScheduled)
    queued = _run_of(fold.tick(1), ev.RunQueued)
    fold.send("delete", cmd.DeleteJob(), T0 + timedelta(minutes=1.5))
    runs = _runs(client)
    assert (runs[queued]["state"], runs[queued]["cancel_reason"]) == ("cancelled", "job_deleted")
    assert runs[first]["state"] == "ready"  # a started run is not the queue's
    counts = _counts(client)
    assert (counts["queued"], counts["cancelled"]) == (0, 1)


# --- the definition fields: max_queued_runs, max_lease_expiries -----------------------------


def _body(**fields: Any) -> dict[str, Any]:
    return {
        "job_id": "fields",
        "name": "fields",
        "schedule": {"type": "cron", "expression": "* * * * *"},
        "command": ["true"],
        **fields,
    }


def test_queue_and_lease_bounds_out_of_range_are_422_naming_the_field(
    offline: TestClient,
) -> None:
    for field, bad in (
        ("max_queued_runs", -1),
        ("max_queued_runs", 1001),
        ("max_lease_expiries", -1),
        ("max_lease_expiries", 101),
    ):
        answer = offline.post("/api/v1/jobs", json=_body(**{field: bad}))
        assert answer.status_code == 422, (field, bad)
        assert [e["loc"] for e in answer.json()["detail"]] == [["body", field]]
    for fields in ({"max_queued_runs": 0, "max_lease_expiries": 0}, {"max_queued_runs": 1000}):
        answer = offline.post("/api/v1/jobs", json=_body(**fields))
        assert answer.status_code == 503, answer.text  # valid: it only needs Kafka


def test_the_fields_reach_the_core_spec_and_come_back_on_get(
    rm: ReadModel, offline: TestClient
) -> None:
    spec = replace(SPEC, max_queued_runs=7, max_lease_expiries=0)
    Fold(rm, spec)
    job = offline.get(f"/api/v1/jobs/{JOB}").json()
    assert (job["max_queued_runs"], job["max_lease_expiries"]) == (7, 0)
    default = offline.post("/api/v1/jobs", json=_body())  # defaults are the core's
    assert default.status_code == 503
    parsed = to_spec(JobIn.model_validate(_body(max_queued_runs=5, max_lease_expiries=9)))
    assert (parsed.max_queued_runs, parsed.max_lease_expiries) == (5, 9)
    plain = to_spec(JobIn.model_validate(_body()))
    assert (plain.max_queued_runs, plain.max_lease_expiries) == (100, 3)
    # a PATCH that changes nothing else than the queue bound is a new definition
    patched = offline.patch(f"/api/v1/jobs/{JOB}", json={"max_queued_runs": 8})
    assert patched.status_code == 503, patched.text
    same = offline.patch(f"/api/v1/jobs/{JOB}", json={"max_queued_runs": 7})
    assert same.status_code == 200 and same.json()["max_queued_runs"] == 7  # nothing to send


def test_a_yaml_job_file_carries_the_fields(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(
        'job_id: y\nname: y\nschedule: {type: manual}\ncommand: ["true"]\n'
        "max_queued_runs: 12\nmax_lease_expiries: 1\n"
    )
    [body] = load_job_file(path)
    assert (body["max_queued_runs"], body["max_lease_expiries"]) == (12, 1)
    patch = full_definition({k: v for k, v in body.items() if k != "max_lease_expiries"})
    assert (patch["max_queued_runs"], patch["max_lease_expiries"]) == (12, None)  # → default
