"""The API refuses a definition whose job record could outgrow the fold's limit (issue 11).

The fold refuses any command whose resulting record exceeds ``MAX_RECORD_BYTES``
(``record_too_large``); a definition near the limit used to get 201, then every claim of its
tasks was refused. ``record_budget`` encodes the largest record the job can reach, every
producer-chosen field at the wire's limit (``cronlog/limits.py``) in the costliest character
of the stored JSON (an identifier's, such as a worker id's, is one byte: identifiers are
printable ASCII, ``limits.ID_CHARS``); the API answers 422 above the limit, naming the
field and the size. The
last test folds the largest definition the API admits, through the pure core, to the largest
record the wire's costliest values give it, and checks it fits and the estimate bounds it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi.testclient import TestClient

from cronlog import commands as cmd
from cronlog.decide import handle
from cronlog.job import MAX_APPLIED_MARKERS, MAX_RENEWAL_MARKERS, JobState
from cronlog.limits import MAX_IDEM_KEY_CHARS, MAX_RUN_ID_CHARS, MAX_WORKER_ID_CHARS
from cronlog.vocabulary import UpstreamOutcome
from services.api.readmodel.reader import ReadModel
from services.api.shapes.definition import JobIn
from services.api.shapes.mapping import to_spec
from services.api.shapes.record_budget import (
    ID_CHAR,
    WORKER_ID,
    worst_case_record_bytes,
    worst_case_state,
)
from tests.unit.rm_feed import JOB, register
from topology.fold.folder import MAX_RECORD_BYTES
from topology.wire.state_codec import WORST_CHAR, dump_state

JOB_ID = "big-dag"
UPSTREAM = "upstream-job"


def dag(
    pad: int,
    max_active_runs: int = 5,
    command_chars: int = 1,
    count: int = 84,
    schedule: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``count`` independent tasks with 64-character names; task 0's argv padded by ``pad``."""
    tasks = [
        {"name": f"{i:03d}".ljust(64, "t"), "command": ["x" * command_chars]} for i in range(count)
    ]
    tasks[0]["command"] = ["x" * (command_chars + pad)]
    return {
        "job_id": JOB_ID,
        "name": "big dag",
        "schedule": schedule or {"type": "manual"},
        "tasks": tasks,
        "max_active_runs": max_active_runs,
        "max_active_tasks": count,
    }


def worst(body: dict[str, Any]) -> int:
    return worst_case_record_bytes(JOB_ID, to_spec(JobIn.model_validate(body)))


def key(n: int) -> str:
    """The ``n``-th distinct idem_key of the wire's longest, costliest form."""
    return f"{n:06d}".ljust(MAX_IDEM_KEY_CHARS, WORST_CHAR)


def test_the_budget_takes_the_wire_limits_in_the_costliest_character() -> None:
    state = worst_case_state(JOB_ID, to_spec(JobIn.model_validate(dag(0, count=2))))
    assert {t.worker_id for r in state.runs for t in r.tasks} == {"~" * MAX_WORKER_ID_CHARS}
    assert ID_CHAR == "~"
    assert len(state.applied) == MAX_APPLIED_MARKERS
    assert len(state.renewals) == MAX_RENEWAL_MARKERS
    one_claimed = len(dump_state(state)) - worst(dag(0, count=2, max_active_runs=4))
    assert one_claimed > 2 * MAX_WORKER_ID_CHARS  # a run of two tasks, 128-byte worker ids


def test_definition_just_under_the_limit_passes_and_just_over_is_422(client: TestClient) -> None:
    headroom = MAX_RECORD_BYTES - worst(dag(0, count=168))
    assert 0 < headroom < 20_000  # the shape is near the limit already
    assert worst(dag(headroom, count=168)) == MAX_RECORD_BYTES
    at_limit = client.post("/api/v1/jobs", json=dag(headroom, count=168))
    assert at_limit.status_code == 503, at_limit.text  # valid: it only needs Kafka
    over = client.post("/api/v1/jobs", json=dag(headroom + 1, count=168))
    assert over.status_code == 422, over.text
    [error] = over.json()["detail"]
    assert error["loc"] == ["body", "max_active_runs"]
    assert f"{MAX_RECORD_BYTES + 1} bytes with 5 active runs" in error["msg"]
    assert f"limit is {MAX_RECORD_BYTES} bytes" in error["msg"]
    assert "at most 4 fit" in error["msg"]


def test_too_many_active_runs_of_a_wide_dag_is_422_naming_max_active_runs(
    client: TestClient,
) -> None:
    """200 tasks x 5 runs: 1,000 leases of 128-byte worker ids and the rest do not fit."""
    answer = client.post("/api/v1/jobs", json=dag(0, count=200))
    assert answer.status_code == 422, answer.text
    [error] = answer.json()["detail"]
    assert error["loc"] == ["body", "max_active_runs"]
    assert "at most 4 fit" in error["msg"]
    fits = client.post("/api/v1/jobs", json=dag(0, count=200, max_active_runs=4))
    assert fits.status_code == 503, fits.text


def test_definition_too_large_for_even_one_run_names_the_body(client: TestClient) -> None:
    answer = client.post(
        "/api/v1/jobs", json=dag(0, max_active_runs=1, command_chars=2500, count=165)
    )
    assert answer.status_code == 422, answer.text
    [error] = answer.json()["detail"]
    assert error["loc"] == ["body"]
    assert "alone" in error["msg"] and "shrink the definition" in error["msg"]


def test_a_patch_that_raises_max_active_runs_past_the_budget_is_422(
    rm: ReadModel, offline: TestClient
) -> None:
    register(rm)
    # 6 x 70 task instances are within the core's 1000, but not within the record limit
    big = dag(0, count=165)
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


def test_the_largest_admitted_record_folded_with_the_costliest_input_fits(
    client: TestClient,
) -> None:
    """The largest ``after`` job the API admits, at ``max_active_runs`` runs and a full queue
    started by upstream runs of the costliest ids, every task claimed by the costliest worker
    id, both marker windows full of the costliest keys: within ``MAX_RECORD_BYTES``."""
    after = {"type": "after", "job_id": UPSTREAM}
    body = dag(0, count=160, schedule=after)
    body = dag(MAX_RECORD_BYTES - worst(body), count=160, schedule=after)
    assert worst(body) == MAX_RECORD_BYTES
    admitted = client.post("/api/v1/jobs", json=body)
    assert admitted.status_code == 503, admitted.text  # valid: it only needs Kafka
    spec = to_spec(JobIn.model_validate(body))
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    state: JobState | None = None
    n = 0

    def apply(command: cmd.Command, at: datetime) -> None:
        nonlocal state, n
        n += 1
        state, _ = handle(state, cmd.Envelope(idem_key=key(n), job_id=JOB_ID, command=command), at)

    apply(cmd.RegisterJob(spec=spec), t0)
    for i in range(spec.max_active_runs + spec.max_queued_runs):
        upstream_run = f"{i:04d}".ljust(MAX_RUN_ID_CHARS, ID_CHAR)
        ended = cmd.UpstreamRunEnded(
            upstream_job_id=UPSTREAM,
            upstream_run_id=upstream_run,
            upstream_scheduled_for=None,
            outcome=UpstreamOutcome.SUCCEEDED,
        )
        apply(ended, t0)
    assert state is not None
    assert (len(state.runs), len(state.queue)) == (spec.max_active_runs, spec.max_queued_runs)
    for run in state.runs:
        for task in spec.tasks:
            claim = cmd.ClaimTask(
                run_id=run.run_id,
                task=task,
                attempt=1,
                worker_id=WORKER_ID,
                lease_token="s",  # noqa: S106
            )
            apply(claim, t0 + timedelta(seconds=1))
    for i in range(MAX_APPLIED_MARKERS):  # fill the user markers with the costliest keys
        apply(cmd.PauseJob() if i % 2 == 0 else cmd.ResumeJob(), t0 + timedelta(seconds=2))
    assert state is not None
    assert all(t.worker_id == WORKER_ID for r in state.runs for t in r.tasks)
    assert len(state.applied) == MAX_APPLIED_MARKERS
    assert len(state.renewals) == MAX_RENEWAL_MARKERS
    real = len(dump_state(state))
    print(f"folded record {real} bytes; estimate {MAX_RECORD_BYTES}")
    assert real <= worst_case_record_bytes(JOB_ID, spec) == MAX_RECORD_BYTES
    assert real > 0.85 * MAX_RECORD_BYTES  # not wildly pessimistic (retry and lapse fields unset)
