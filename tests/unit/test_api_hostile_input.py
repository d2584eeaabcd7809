"""Hostile numbers and instants are 422s naming the field, never 500s (issue 11, finding 1).

Found by schemathesis: durations like ``-1e300`` overflowed ``timedelta`` in the mapping to the
core, and instants near year 1 or 9999 overflowed the core's arithmetic. Every duration is
bounded to ``0..MAX_DURATION_S`` and every instant to the years 1970..9000 by the pydantic
models. The app is built without its lifespan: a request that passes validation gets 503.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from services.api.readmodel.reader import ReadModel
from services.api.shapes.definition import MAX_DURATION_S
from tests.unit.rm_feed import JOB, register

YEAR_1 = "0001-01-01T00:00:00+00:00"
YEAR_9999 = "9999-12-31T23:59:59-23:59"


def job(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "hostile",
        "schedule": {"type": "every", "interval_s": 60},
        "command": ["true"],
    }
    for path, value in changes.items():
        *parents, leaf = path.split(".")
        target = body
        for part in parents:
            target = target[int(part)] if part.isdigit() else target.setdefault(part, {})
        target[leaf] = value
    return body


DURATIONS = [
    "timeout_s",
    "grace_s",
    "lease_ttl_s",
    "jitter_s",
    "run_timeout_s",
    "schedule.interval_s",
    "schedule.catchup_window_s",
    "schedule.misfire_grace_s",
    "retry_policy.base_s",
    "retry_policy.max_s",
]


def loc_of(path: str) -> list[Any]:
    return ["body", *(int(p) if p.isdigit() else p for p in path.split("."))]


@pytest.mark.parametrize("field", DURATIONS)
@pytest.mark.parametrize("value", [-1e300, -1, MAX_DURATION_S + 1, 1e300])
def test_out_of_range_duration_is_a_422_naming_it(
    client: TestClient, field: str, value: float
) -> None:
    answer = client.post("/api/v1/jobs", json=job(**{field: value}))
    assert answer.status_code == 422, answer.text
    assert loc_of(field) in [e["loc"] for e in answer.json()["detail"]]


@pytest.mark.parametrize("field", ["timeout_s", "lease_ttl_s"])
def test_out_of_range_task_duration_is_a_422_naming_the_task(
    client: TestClient, field: str
) -> None:
    body = job(command=None, tasks=[{"name": "a", "command": ["true"], field: -1e300}])
    del body["command"]
    answer = client.post("/api/v1/jobs", json=body)
    assert answer.status_code == 422, answer.text
    assert ["body", "tasks", 0, field] in [e["loc"] for e in answer.json()["detail"]]


def test_the_documented_maximum_duration_passes_validation(client: TestClient) -> None:
    body = job(timeout_s=MAX_DURATION_S, **{"retry_policy.max_s": MAX_DURATION_S})
    assert client.post("/api/v1/jobs", json=body).status_code == 503  # valid: needs Kafka


def test_huge_negative_duration_in_a_patch_is_a_422(rm: ReadModel, client: TestClient) -> None:
    register(rm)
    answer = client.patch(f"/api/v1/jobs/{JOB}", json={"timeout_s": -1e300})
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"][0]["loc"] == ["body", "timeout_s"]


@pytest.mark.parametrize("field", ["max_attempts"])
def test_hostile_count_is_a_422(client: TestClient, field: str) -> None:
    answer = client.post("/api/v1/jobs", json=job(**{f"retry_policy.{field}": -(10**30)}))
    assert answer.status_code == 422, answer.text
    assert ["body", "retry_policy", field] in [e["loc"] for e in answer.json()["detail"]]


@pytest.mark.parametrize(("field", "value"), [("start", YEAR_1), ("end", YEAR_9999)])
def test_backfill_instant_out_of_range_is_a_422_naming_it(
    rm: ReadModel, client: TestClient, field: str, value: str
) -> None:
    register(rm)
    body = {"start": "2024-03-01T00:00:00Z", "end": "2024-03-02T00:00:00Z", field: value}
    answer = client.post(f"/api/v1/jobs/{JOB}/backfill", json={**body, "dry_run": True})
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"][0]["loc"] == ["body", field]


@pytest.mark.parametrize("after", [YEAR_1, YEAR_9999])
def test_ticks_after_out_of_range_is_a_422(rm: ReadModel, client: TestClient, after: str) -> None:
    register(rm)
    answer = client.get(f"/api/v1/jobs/{JOB}/ticks", params={"after": after})
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"][0]["loc"] == ["query", "after"]


@pytest.mark.parametrize("field", ["since", "until"])
def test_dead_letter_filters_out_of_range_are_422(client: TestClient, field: str) -> None:
    rm_less = client.get("/api/v1/dead-letters", params={field: YEAR_1})
    assert rm_less.status_code == 422, rm_less.text
    assert rm_less.json()["detail"][0]["loc"] == ["query", field]
    replay = client.post("/api/v1/dead-letters/replay", json={field: YEAR_9999})
    assert replay.status_code == 422, replay.text
    assert replay.json()["detail"][0]["loc"] == ["body", field]
