"""The API refuses a definition whose job record could outgrow the fold's limit (issue 11).

The fold refuses any command whose resulting record exceeds ``MAX_RECORD_BYTES``
(``record_too_large``); a definition near the limit used to get 201, then every claim of its
tasks was refused. ``record_budget`` encodes the largest record the job can reach; the API
answers 422 above the limit, naming it and the size. The last test folds a real record as
large as the job allows through the pure core and checks the estimate bounds it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi.testclient import TestClient

from cronlog import commands as cmd
from cronlog.decide import handle
from cronlog.job import MAX_APPLIED_MARKERS, JobState
from services.api.mapping import to_spec
from services.api.read_model import ReadModel
from services.api.record_budget import MARKER_CHARS, WORKER_ID_CHARS, worst_case_record_bytes
from services.api.schemas import JobIn
from tests.unit.test_backfill_api import JOB, register
from topology.fold import MAX_RECORD_BYTES
from topology.state_codec import dump_state

JOB_ID = "big-dag"


def dag(
    pad: int, max_active_runs: int = 5, command_chars: int = 1, count: int = 180
) -> dict[str, Any]:
    """``count`` independent tasks with 64-character names; task 0's argv padded by ``pad``."""
    tasks = [
        {"name": f"{i:03d}".ljust(64, "t"), "command": ["x" * command_chars]} for i in range(count)
    ]
    tasks[0]["command"] = ["x" * (command_chars + pad)]
    return {
        "job_id": JOB_ID,
        "name": "big dag",
        "schedule": {"type": "manual"},
        "tasks": tasks,
        "max_active_runs": max_active_runs,
        "max_active_tasks": count,
    }


def worst(body: dict[str, Any]) -> int:
    return worst_case_record_bytes(JOB_ID, to_spec(JobIn.model_validate(body)))


def test_definition_just_under_the_limit_passes_and_just_over_is_422(client: TestClient) -> None:
    headroom = MAX_RECORD_BYTES - worst(dag(0))
    assert 0 < headroom < 20_000  # the shape is near the limit already
    assert worst(dag(headroom)) == MAX_RECORD_BYTES
    at_limit = client.post("/api/v1/jobs", json=dag(headroom))
    assert at_limit.status_code == 503, at_limit.text  # valid: it only needs Kafka
    over = client.post("/api/v1/jobs", json=dag(headroom + 1))
    assert over.status_code == 422, over.text
    [error] = over.json()["detail"]
    assert error["loc"] == ["body", "max_active_runs"]
    assert f"{MAX_RECORD_BYTES + 1} bytes with 5 active runs" in error["msg"]
    assert f"limit is {MAX_RECORD_BYTES} bytes" in error["msg"]


def test_definition_too_large_for_even_one_run_names_the_body(client: TestClient) -> None:
    answer = client.post("/api/v1/jobs", json=dag(0, max_active_runs=1, command_chars=2500))
    assert answer.status_code == 422, answer.text
    [error] = answer.json()["detail"]
    assert error["loc"] == ["body"]
    assert "alone" in error["msg"] and "shrink the definition" in error["msg"]


def test_a_patch_that_raises_max_active_runs_past_the_budget_is_422(
    rm: ReadModel, offline: TestClient
) -> None:
    register(rm)
    # 6 x 160 task instances are within the core's 1000, but not within the record limit
    big = dag(0, command_chars=300, count=160)
    assert worst(big) < MAX_RECORD_BYTES < worst({**big, "max_active_runs": 6})
    shape = {k: v for k, v in big.items() if k in ("tasks", "max_active_tasks")}
    fits = offline.patch(
        f"/api/v1/jobs/{JOB}", json={"command": None, **shape, "max_active_runs": 5}
    )
    assert fits.status_code == 503, fits.text  # valid at 5 runs: it only needs Kafka
    answer = offline.patch(
        f"/api/v1/jobs/{JOB}", json={"command": None, **shape, "max_active_runs": 6}
    )
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"][0]["loc"] == ["body", "max_active_runs"]


def test_the_estimate_bounds_a_record_folded_to_the_jobs_largest(client: TestClient) -> None:
    body = dag(MAX_RECORD_BYTES - worst(dag(0)))
    spec = to_spec(JobIn.model_validate(body))
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    state: JobState | None = None

    def apply(key: str, command: cmd.Command, at: datetime) -> None:
        nonlocal state
        state, _ = handle(state, cmd.Envelope(idem_key=key, job_id=JOB_ID, command=command), at)

    apply("register", cmd.RegisterJob(spec=spec), t0)
    for n in range(spec.max_active_runs):
        apply(f"trigger-{n}".ljust(MARKER_CHARS, "k"), cmd.TriggerJob(), t0)
    worker = "w" * WORKER_ID_CHARS
    assert state is not None
    for run in state.runs:
        for task in spec.tasks:
            key = f"claim:{run.run_id}:{task}".ljust(MARKER_CHARS, "k")
            apply(
                key,
                cmd.ClaimTask(run_id=run.run_id, task=task, attempt=1, worker_id=worker),
                t0 + timedelta(seconds=1),
            )
    for n in range(MAX_APPLIED_MARKERS):  # fill the user markers with long keys
        command = cmd.PauseJob() if n % 2 == 0 else cmd.ResumeJob()
        apply(f"op-{n}".ljust(MARKER_CHARS, "k"), command, t0 + timedelta(seconds=2))
    assert state is not None
    assert len(state.runs) == 5
    assert all(t.worker_id == worker for r in state.runs for t in r.tasks)
    real = len(dump_state(state))
    print(f"folded record {real} bytes; estimate {MAX_RECORD_BYTES}")
    assert real <= worst_case_record_bytes(JOB_ID, spec) == MAX_RECORD_BYTES
    assert real > 0.8 * MAX_RECORD_BYTES  # the estimate is not wildly pessimistic
