"""The API's ``after`` schedules: 422s naming the field, and the JSON <-> JobSpec mapping."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from cronlog.model import AfterOn, ScheduleKind
from services.api.app import create_app
from services.api.settings import ApiSettings
from services.api.shapes.definition import JobIn
from services.api.shapes.mapping import spec_to_json, to_spec
from tests.unit.authed import authed


@pytest.fixture
def client(tmp_path: Path) -> TestClient:
    return authed(create_app(ApiSettings(api_state_dir=tmp_path / "rm")))


def job(**schedule: object) -> dict[str, object]:
    return {
        "job_id": "load",
        "name": "load",
        "command": ["true"],
        "schedule": {"type": "after", **schedule},
    }


@pytest.mark.parametrize(
    ("schedule", "field"),
    [
        ({}, "job_id"),
        ({"job_id": "load"}, "job_id"),
        ({"job_id": "no spaces"}, "job_id"),
        ({"job_id": "x", "end_at": "2030-01-01T00:00:00Z"}, "end_at"),
    ],
)
def test_a_bad_after_schedule_is_422_naming_the_field(
    client: TestClient, schedule: dict[str, object], field: str
) -> None:
    r = client.post("/api/v1/jobs", json=job(**schedule))
    assert r.status_code == 422, r.text
    assert ["body", "schedule", field] in [e["loc"] for e in r.json()["detail"]]


def test_an_unknown_on_value_is_422(client: TestClient) -> None:
    r = client.post("/api/v1/jobs", json=job(job_id="x", on="always"))
    assert r.status_code == 422


def test_after_schedules_map_both_ways() -> None:
    spec = to_spec(JobIn.model_validate(job(job_id="extract", on="done")))
    assert spec.schedule.kind is ScheduleKind.AFTER
    assert (spec.schedule.after_job_id, spec.schedule.after_on) == ("extract", AfterOn.DONE)
    out = spec_to_json(spec)["schedule"]
    assert (out["type"], out["job_id"], out["on"]) == ("after", "extract", "done")
    assert to_spec(JobIn.model_validate({**spec_to_json(spec), "job_id": "load"})) == spec


def test_other_types_drop_the_after_fields() -> None:
    body = job(job_id="extract")
    body["schedule"] = {"type": "manual", "job_id": "extract", "on": "done"}
    spec = to_spec(JobIn.model_validate(body))
    assert spec.schedule.after_job_id is None
    assert "job_id" not in spec_to_json(spec)["schedule"]
