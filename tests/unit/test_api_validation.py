"""The API refuses bad job definitions with 422 naming the field, before anything is produced.

The app is built without entering its lifespan, so it holds no Kafka client: a request that
passes validation gets 503, which proves validation ran first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from services.api.app import create_app
from services.api.settings import ApiSettings
from services.api.shapes.definition import JobIn
from services.api.shapes.mapping import merge_patch, spec_to_json, to_spec
from tests.unit.authed import authed


@pytest.fixture
def client(tmp_path: Path) -> TestClient:
    return authed(create_app(ApiSettings(api_state_dir=tmp_path / "rm")))


def body(**changes: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "job_id": "every-10s",
        "name": "every ten seconds",
        "schedule": {"type": "cron", "expression": "*/10 * * * * *", "timezone": "UTC"},
        "command": ["sh", "-c", "echo tick"],
    }
    for key, value in changes.items():
        if key.startswith("schedule."):
            job["schedule"][key.split(".", 1)[1]] = value
        elif value is None:
            job.pop(key)
        else:
            job[key] = value
    return job


def locs(response: Any) -> list[list[Any]]:
    return [e["loc"] for e in response.json()["detail"]]


def test_invalid_cron_expression_is_422_naming_schedule_expression(client: TestClient) -> None:
    r = client.post("/api/v1/jobs", json=body(**{"schedule.expression": "*/10 * * * 99"}))
    assert r.status_code == 422
    assert locs(r) == [["body", "schedule", "expression"]]
    assert "day_of_week" in r.json()["detail"][0]["msg"]


def test_cron_with_wrong_field_count_is_422(client: TestClient) -> None:
    r = client.post("/api/v1/jobs", json=body(**{"schedule.expression": "* * *"}))
    assert r.status_code == 422
    assert locs(r) == [["body", "schedule", "expression"]]


def test_unknown_time_zone_is_422_naming_schedule_timezone(client: TestClient) -> None:
    r = client.post("/api/v1/jobs", json=body(**{"schedule.timezone": "Mars/Olympus_Mons"}))
    assert r.status_code == 422
    assert locs(r) == [["body", "schedule", "timezone"]]


def test_missing_name_is_422(client: TestClient) -> None:
    r = client.post("/api/v1/jobs", json=body(name=None))
    assert r.status_code == 422
    assert locs(r) == [["body", "name"]]
    assert r.json()["detail"][0]["type"] == "missing"


def test_command_not_a_list_is_422(client: TestClient) -> None:
    r = client.post("/api/v1/jobs", json=body(command="echo tick"))
    assert r.status_code == 422
    assert locs(r) == [["body", "command"]]


def test_empty_command_is_422(client: TestClient) -> None:
    r = client.post("/api/v1/jobs", json=body(command=[]))
    assert r.status_code == 422
    assert locs(r) == [["body", "command"]]


@pytest.mark.parametrize(
    ("field", "value"),
    [("command", ["echo"]), ("kind", "shell"), ("shell", "echo"), ("callable", "m:f")],
)
def test_a_dag_with_a_job_level_task_field_is_422_naming_it(
    client: TestClient, field: str, value: object
) -> None:
    tasks = [{"name": "a", "command": ["true"]}]
    r = client.post("/api/v1/jobs", json={**body(command=None, tasks=tasks), field: value})
    assert r.status_code == 422
    assert locs(r) == [["body", field]]


def test_a_dag_tasks_own_field_is_named_in_the_task(client: TestClient) -> None:
    tasks = [{"name": "a", "command": ["true"]}, {"name": "b", "command": []}]
    r = client.post("/api/v1/jobs", json=body(command=None, tasks=tasks))
    assert r.status_code == 422
    assert locs(r) == [["body", "tasks[1]", "command"]]


def test_unknown_field_is_422(client: TestClient) -> None:
    r = client.post("/api/v1/jobs", json=body(cron="* * * * *"))
    assert r.status_code == 422
    assert locs(r) == [["body", "cron"]]


def test_once_job_without_run_at_is_422(client: TestClient) -> None:
    r = client.post("/api/v1/jobs", json=body(schedule={"type": "once"}))
    assert r.status_code == 422
    assert locs(r) == [["body", "schedule", "run_at"]]


def test_run_at_without_a_zone_is_422(client: TestClient) -> None:
    r = client.post(
        "/api/v1/jobs", json=body(schedule={"type": "once", "run_at": "2026-03-01T12:00:00"})
    )
    assert r.status_code == 422
    assert locs(r) == [["body", "schedule", "run_at"]]


def test_negative_timeout_is_422(client: TestClient) -> None:
    r = client.post("/api/v1/jobs", json=body(timeout_s=-1))
    assert r.status_code == 422
    assert locs(r) == [["body", "timeout_s"]]


def test_job_id_must_be_path_safe(client: TestClient) -> None:
    r = client.post("/api/v1/jobs", json=body(job_id="a/b"))
    assert r.status_code == 422
    assert locs(r) == [["body", "job_id"]]


def test_bad_idempotency_key_is_422(client: TestClient) -> None:
    r = client.post("/api/v1/jobs", json=body(), headers={"Idempotency-Key": "x" * 201})
    assert r.status_code == 422
    assert locs(r) == [["header", "Idempotency-Key"]]


def test_valid_job_passes_validation_and_needs_kafka(client: TestClient) -> None:
    r = client.post("/api/v1/jobs", json=body())
    assert r.status_code == 503


def test_reads_without_a_read_model_are_503_and_health_answers(client: TestClient) -> None:
    assert client.get("/api/v1/jobs").status_code == 503
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").status_code == 503


def test_openapi_documents_the_endpoints(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert set(paths) >= {
        "/api/v1/jobs",
        "/api/v1/jobs/{job_id}",
        "/api/v1/jobs/{job_id}/runs",
        "/api/v1/jobs/{job_id}/trigger",
        "/api/v1/runs/{run_id}",
    }
    assert set(paths["/api/v1/jobs/{job_id}"]) == {"get", "patch", "delete"}


def test_definition_round_trips_through_the_core_spec() -> None:
    once = {"type": "once", "run_at": "2026-03-01T13:00:00+01:00"}
    job = JobIn.model_validate(
        body(schedule=once, timeout_s=90.5, retry_policy={"max_attempts": 3})
    )
    out = spec_to_json(to_spec(job))
    assert out["schedule"]["run_at"] == "2026-03-01T12:00:00.000Z"
    assert out["timeout_s"] == 90.5
    assert out["retry_policy"]["max_attempts"] == 3
    assert spec_to_json(to_spec(JobIn.model_validate({**out, "job_id": "x"}))) == out


def test_merge_patch_merges_objects_and_null_resets() -> None:
    current = {
        "name": "a",
        "schedule": {"type": "cron", "expression": "* * * * *", "timezone": "UTC"},
        "timeout_s": 10,
    }
    patch = {"schedule": {"timezone": "Europe/Paris"}, "timeout_s": None}
    assert merge_patch(current, patch) == {
        "name": "a",
        "schedule": {"type": "cron", "expression": "* * * * *", "timezone": "Europe/Paris"},
    }
    assert current["timeout_s"] == 10


def test_every_schedule_with_bounds_exclusions_overlap_and_jitter_round_trips() -> None:
    schedule = {
        "type": "every",
        "interval_s": 90,
        "anchor_at": "2026-03-01T12:00:30+01:00",
        "start_at": "2026-03-02T00:00:00Z",
        "end_at": "2026-04-01T00:00:00Z",
        "max_runs": 10,
        "misfire_grace_s": 5,
        "timezone": "Europe/Berlin",
        "exclusions": [
            {"start_date": "2026-03-10", "end_date": "2026-03-12"},
            {"weekdays": ["sat", "sun"], "start_time": "22:00", "end_time": "06:00"},
        ],
    }
    job = JobIn.model_validate(body(schedule=schedule, overlap="buffer_one", jitter_s=2.5))
    spec = to_spec(job)
    assert spec.schedule.exclusions[1].start_time == "22:00:00"
    out = spec_to_json(spec)
    assert out["schedule"]["anchor_at"] == "2026-03-01T11:00:30.000Z"
    assert (out["overlap"], out["jitter_s"], out["schedule"]["max_runs"]) == ("buffer_one", 2.5, 10)
    assert spec_to_json(to_spec(JobIn.model_validate({**out, "job_id": "x"}))) == out


@pytest.mark.parametrize(
    ("changes", "loc"),
    [
        ({"schedule": {"type": "every"}}, ["body", "schedule", "interval_s"]),
        (
            {"schedule": {"type": "every", "interval_s": 60, "max_runs": 0}},
            ["body", "schedule", "max_runs"],
        ),
        (
            {
                "schedule": {
                    "type": "every",
                    "interval_s": 60,
                    "exclusions": [{"weekdays": ["xyz"]}],
                }
            },
            ["body", "schedule", "exclusions", 0, "weekdays", 0],
        ),
        (
            {"schedule": {"type": "every", "interval_s": 60, "exclusions": [{}]}},
            ["body", "schedule", "exclusions[0]"],
        ),
        ({"overlap": "queue"}, ["body", "overlap"]),
        ({"jitter_s": -1}, ["body", "jitter_s"]),
    ],
)
def test_bad_schedule_extensions_are_422_naming_the_field(
    client: TestClient, changes: dict[str, Any], loc: list[Any]
) -> None:
    r = client.post("/api/v1/jobs", json=body(**changes))
    assert r.status_code == 422, r.text
    assert loc in locs(r)


def test_catchup_without_a_resume_is_refused_by_the_patch_model() -> None:
    from services.api.shapes.requests import JobPatch

    assert JobPatch.model_validate({"paused": False, "catchup": True}).catchup is True


@pytest.mark.parametrize("run_at", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"])
def test_run_at_out_of_range_is_a_422_naming_it(run_at: str) -> None:
    client = authed(create_app(ApiSettings()))
    answer = client.post(
        "/api/v1/jobs",
        json={"name": "x", "schedule": {"type": "once", "run_at": run_at}, "command": ["true"]},
    )
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["loc"] == ["body", "schedule", "run_at"]


def test_nul_byte_in_argv_is_a_422_naming_command() -> None:
    client = authed(create_app(ApiSettings()))
    answer = client.post(
        "/api/v1/jobs",
        json={"name": "x", "schedule": {"type": "manual"}, "command": ["echo", "a\u0000b"]},
    )
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["loc"] == ["body", "command"]


def test_nan_in_the_body_is_a_422_naming_the_field_not_a_500() -> None:
    client = authed(create_app(ApiSettings()))
    answer = client.post(
        "/api/v1/jobs",
        headers={"content-type": "application/json"},
        content=b'{"name": "x", "schedule": {"type": "manual"}, "command": ["true"],'
        b' "timeout_s": NaN}',
    )
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["loc"] == ["body", "timeout_s"]


@pytest.mark.parametrize(
    ("tags", "loc"),
    [
        (["Critical"], ["body", "tags", 0]),
        (["ok", "has space"], ["body", "tags", 1]),
        (["ok", "ok"], ["body", "tags"]),
        ([f"t{i}" for i in range(17)], ["body", "tags"]),
        ("critical", ["body", "tags"]),
    ],
)
def test_bad_tags_are_422_naming_the_tag(client: TestClient, tags: Any, loc: list[Any]) -> None:
    r = client.post("/api/v1/jobs", json=body(tags=tags))
    assert r.status_code == 422
    assert locs(r) == [loc]


def test_tags_round_trip_through_the_core_spec() -> None:
    job = JobIn.model_validate(body(tags=["critical", "team.payments"]))
    spec = to_spec(job)
    assert spec.tags == ("critical", "team.payments")
    assert spec_to_json(spec)["tags"] == ["critical", "team.payments"]
    patched = merge_patch(spec_to_json(spec), {"tags": ["etl"]})
    assert to_spec(JobIn.model_validate({**patched, "job_id": "x"})).tags == ("etl",)
