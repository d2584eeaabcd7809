"""``schedule.dst_gap`` / ``schedule.dst_overlap`` through the REST API and YAML job files.

The core Schedule and the Avro schema always had them; the API answered 422 for them. The
app runs without Kafka (conftest): a POST that passes validation answers 503, and reads come
from a read model fed RunEvents by hand.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from cronlog import events as ev
from cronlog.ids import event_id
from cronlog.model import DstGapPolicy, DstOverlapPolicy, JobSpec, Schedule, ScheduleKind, main_task
from services.api.readmodel.keys import job_key
from services.api.readmodel.projection import apply
from services.api.readmodel.reader import ReadModel
from services.api.readmodel.store import Batch
from services.api.routes.writes import _patched_spec
from services.api.shapes.definition import JobIn
from services.api.shapes.mapping import spec_to_json, to_spec
from services.cli.client import full_definition, load_job_file

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)
GAP, OVERLAP = DstGapPolicy, DstOverlapPolicy


def body(**schedule: Any) -> dict[str, Any]:
    return {
        "job_id": "daily-0230",
        "name": "daily at 02:30 Berlin",
        "schedule": {
            "type": "cron",
            "expression": "30 2 * * *",
            "timezone": "Europe/Berlin",
            **schedule,
        },
        "command": ["true"],
    }


def register(rm: ReadModel, job_id: str, gap: GAP, overlap: OVERLAP) -> None:
    """Project a JobRegistered of a 02:30 Berlin job with these policies, as the fold emits it."""
    schedule = Schedule(
        ScheduleKind.CRON, "30 2 * * *", "Europe/Berlin", dst_gap=gap, dst_overlap=overlap
    )
    spec = JobSpec(job_id, schedule, main_task(("true",)))
    batch = Batch(rm.store)
    registered = ev.JobRegistered(spec=spec, next_fire_at=T0)
    apply(
        batch,
        ev.RunEvent(
            event_id=event_id("reg", job_id, 0),
            job_id=job_id,
            at=T0,
            idem_key="reg",
            index=0,
            event=registered,
        ),
    )
    batch.commit()


@pytest.mark.parametrize(
    ("given", "gap", "overlap"),
    [
        ({}, GAP.SHIFT, OVERLAP.FIRST),  # the defaults: Vixie cron's
        ({"dst_gap": "skip"}, GAP.SKIP, OVERLAP.FIRST),
        ({"dst_overlap": "last"}, GAP.SHIFT, OVERLAP.LAST),
        ({"dst_gap": "skip", "dst_overlap": "both"}, GAP.SKIP, OVERLAP.BOTH),
        ({"dst_gap": "shift", "dst_overlap": "first"}, GAP.SHIFT, OVERLAP.FIRST),
    ],
)
def test_policies_reach_the_core_schedule_and_round_trip(
    given: dict[str, str], gap: GAP, overlap: OVERLAP
) -> None:
    spec = to_spec(JobIn.model_validate(body(**given)))
    assert (spec.schedule.dst_gap, spec.schedule.dst_overlap) == (gap, overlap)
    shown = spec_to_json(spec)["schedule"]
    assert (shown["dst_gap"], shown["dst_overlap"]) == (gap.value, overlap.value)
    assert to_spec(JobIn.model_validate({**body(), "schedule": shown})) == spec


@pytest.mark.parametrize(
    "given",
    [{"dst_gap": "skip"}, {"dst_overlap": "both"}, {"dst_gap": "skip", "dst_overlap": "last"}],
)
def test_post_with_policies_passes_validation(client: TestClient, given: dict[str, str]) -> None:
    r = client.post("/api/v1/jobs", json=body(**given))
    assert r.status_code == 503, r.text  # validated; only Kafka is missing here


@pytest.mark.parametrize(
    ("given", "field"),
    [
        ({"dst_gap": "later"}, "dst_gap"),
        ({"dst_gap": "first"}, "dst_gap"),  # an overlap value in the gap field
        ({"dst_overlap": "shift"}, "dst_overlap"),
        ({"dst_overlap": "twice"}, "dst_overlap"),
        ({"dst_overlap": 2}, "dst_overlap"),
    ],
)
def test_bad_policy_is_422_naming_the_field(
    client: TestClient, given: dict[str, Any], field: str
) -> None:
    r = client.post("/api/v1/jobs", json=body(**given))
    assert r.status_code == 422
    assert [e["loc"] for e in r.json()["detail"]] == [["body", "schedule", field]]


def test_get_shows_the_jobs_policies(rm: ReadModel, client: TestClient) -> None:
    register(rm, "skip-both", GAP.SKIP, OVERLAP.BOTH)
    register(rm, "defaults", GAP.SHIFT, OVERLAP.FIRST)
    schedules = {j["job_id"]: j["schedule"] for j in client.get("/api/v1/jobs").json()["jobs"]}
    assert (schedules["skip-both"]["dst_gap"], schedules["skip-both"]["dst_overlap"]) == (
        "skip",
        "both",
    )
    assert (schedules["defaults"]["dst_gap"], schedules["defaults"]["dst_overlap"]) == (
        "shift",
        "first",
    )
    one = client.get("/api/v1/jobs/skip-both").json()["schedule"]
    assert (one["dst_gap"], one["dst_overlap"]) == ("skip", "both")


@pytest.mark.parametrize(
    ("patch", "gap", "overlap"),
    [
        ({"schedule": {"dst_overlap": "last"}}, GAP.SKIP, OVERLAP.LAST),  # the other one stays
        ({"schedule": {"dst_gap": "shift"}}, GAP.SHIFT, OVERLAP.BOTH),
        ({"schedule": {"dst_gap": None}}, GAP.SHIFT, OVERLAP.BOTH),  # null: the default
        ({"schedule": {"expression": "0 3 * * *"}}, GAP.SKIP, OVERLAP.BOTH),
        ({"name": "renamed"}, GAP.SKIP, OVERLAP.BOTH),
    ],
)
def test_patch_merges_policies_into_the_current_definition(
    rm: ReadModel, patch: dict[str, Any], gap: GAP, overlap: OVERLAP
) -> None:
    register(rm, "patched", GAP.SKIP, OVERLAP.BOTH)
    job = rm.job("patched")
    assert job is not None
    spec = _patched_spec(rm, job, patch)
    assert spec is not None
    assert (spec.schedule.dst_gap, spec.schedule.dst_overlap) == (gap, overlap)


def test_patch_of_a_document_projected_before_the_definition_had_them(rm: ReadModel) -> None:
    # Older projections kept the policies beside the definition; a PATCH must not reset them.
    register(rm, "old-doc", GAP.SKIP, OVERLAP.LAST)
    doc = rm.stored_job("old-doc")
    assert doc is not None
    for name in ("dst_gap", "dst_overlap"):
        del doc["definition"]["schedule"][name]
    doc["dst_policy"] = {"dst_gap": "skip", "dst_overlap": "last"}
    batch = Batch(rm.store)
    batch.put_json(job_key("old-doc"), doc)
    batch.commit()
    job = rm.job("old-doc")
    assert job is not None
    assert (job["schedule"]["dst_gap"], job["schedule"]["dst_overlap"]) == ("skip", "last")
    spec = _patched_spec(rm, job, {"name": "renamed"})
    assert spec is not None
    assert (spec.schedule.dst_gap, spec.schedule.dst_overlap) == (GAP.SKIP, OVERLAP.LAST)


YAML_WITH_POLICIES = """\
job_id: berlin-0230
name: daily at 02:30 Berlin
schedule:
  type: cron
  expression: "30 2 * * *"
  timezone: Europe/Berlin
  dst_gap: skip
  dst_overlap: last
command: ["true"]
"""


@pytest.mark.parametrize(
    ("yaml_text", "gap", "overlap"),
    [
        (YAML_WITH_POLICIES, GAP.SKIP, OVERLAP.LAST),
        (YAML_WITH_POLICIES.replace("  dst_overlap: last\n", ""), GAP.SKIP, OVERLAP.FIRST),
        (YAML_WITH_POLICIES.replace("  dst_gap: skip\n", ""), GAP.SHIFT, OVERLAP.LAST),
    ],
)
def test_yaml_job_file_sets_the_policies(
    tmp_path: Path, client: TestClient, yaml_text: str, gap: GAP, overlap: OVERLAP
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(yaml_text)
    (job,) = load_job_file(path)
    assert client.post("/api/v1/jobs", json=job).status_code == 503  # passes validation
    spec = to_spec(JobIn.model_validate(job))
    assert (spec.schedule.dst_gap, spec.schedule.dst_overlap) == (gap, overlap)
    # `jobs apply` on a live job sends every field; an absent policy goes back to its default.
    replaced = full_definition(job)["schedule"]
    assert replaced["dst_gap"] == job["schedule"].get("dst_gap")
    assert replaced["dst_overlap"] == job["schedule"].get("dst_overlap")


def test_yaml_job_file_with_a_bad_policy_is_422_naming_it(
    tmp_path: Path, client: TestClient
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(YAML_WITH_POLICIES.replace("dst_overlap: last", "dst_overlap: second"))
    (job,) = load_job_file(path)
    r = client.post("/api/v1/jobs", json=job)
    assert r.status_code == 422
    assert [e["loc"] for e in r.json()["detail"]] == [["body", "schedule", "dst_overlap"]]
