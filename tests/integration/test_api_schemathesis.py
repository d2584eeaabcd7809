"""schemathesis against the API's own ``/openapi.json`` on a real broker (issue 11).

An adversarial run found 84 server errors in 11,500 generated requests. This test keeps that
from coming back: every operation the API serves is called with generated input (valid and
invalid), and every answer must be no server error, have a status code the OpenAPI documents
and a body that conforms to the documented schema. A scheduler folds the writes (no worker:
generated commands are never executed). ``job_id`` and ``run_id`` in paths are pinned to a
registered job and one of its runs so the write paths are reached, not only their 404s.
Bounded: ``MAX_EXAMPLES`` per operation and mode (valid, invalid input).

schemathesis's pytest loaders (``from_fixture``) do not run on pytest 9 (they read the removed
``Item._nodeid``), so each operation's Hypothesis strategy is driven with ``@given`` here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    response_schema_conformance,
    status_code_conformance,
)

from tests.integration.harness import Cluster
from tests.integration.helpers import start_api, wait_for

pytestmark = [pytest.mark.broker, pytest.mark.timeout(420)]  # ~110 s quiet, 150 s at load 10
MAX_EXAMPLES = 30
"""Generated cases per operation (18 operations) and generation mode."""
JOB = "st-job"
CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance]
Pins = dict[str, str]


@pytest.fixture
def served(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[httpx.Client]:
    """A scheduler and an API (writes answer 202 after 3 s rather than 10 s if unseen)."""
    monkeypatch.setenv("CRONLOG_API_WRITE_TIMEOUT_S", "3")
    cluster.scheduler()
    client = start_api(cluster)
    yield client
    client.close()


def _seed(api: httpx.Client) -> str:
    """Register ``JOB`` (manual) and trigger one run; return its run_id."""
    job = {"job_id": JOB, "name": "st", "schedule": {"type": "manual"}, "command": ["true"]}
    assert api.post("/api/v1/jobs", json=job).status_code == 201
    run_id = str(api.post(f"/api/v1/jobs/{JOB}/trigger").json()["run_id"])
    wait_for(lambda: api.get(f"/api/v1/runs/{run_id}").status_code == 200, 30, "seed run")
    return run_id


def _exercise(
    operation: schemathesis.APIOperation,
    mode: GenerationMode,
    pins: Pins,
    seen: Counter[int],
    auth: dict[str, str],
) -> None:
    """Call ``operation`` with ``MAX_EXAMPLES`` generated cases; raise on the first failure.
    ``seen`` counts the status codes answered."""
    names = {p.name for p in operation.path_parameters}
    fixed = {k: v for k, v in pins.items() if k in names}

    @given(case=operation.as_strategy(mode, path_parameters=fixed))
    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
        database=None,
    )
    def run(case: schemathesis.Case) -> None:
        answer = case.call_and_validate(checks=CHECKS, timeout=30, headers=auth)
        seen[answer.status_code] += 1

    run()


def _described(exc: BaseException) -> str:
    """``exc`` with the failures it groups (hypothesis' Flaky holds the first call's own)."""
    inner = getattr(exc, "exceptions", ())
    return "; ".join([str(exc), *(f"[{type(e).__name__}] {_described(e)}" for e in inner)])


def test_every_answer_is_documented_and_no_server_error(served: httpx.Client) -> None:
    pins: Pins = {"job_id": JOB, "run_id": _seed(served), "task": "main"}
    auth = {"Authorization": served.headers["Authorization"]}
    schema = schemathesis.openapi.from_url(f"{served.base_url}/openapi.json")
    operations = sorted(
        (result.ok() for result in schema.get_all_operations()),
        key=lambda op: op.method.upper() == "DELETE",  # deleting the pinned job goes last
    )
    assert len(operations) >= 18
    failures, seen = [], Counter[int]()
    for operation in operations:
        for mode in GenerationMode:
            try:
                _exercise(operation, mode, pins, seen, auth)
            except Unsatisfiable:  # nothing of it can be made invalid (pinned path only)
                continue
            except Exception as exc:  # every operation is tried; all failures are reported
                failures.append(f"{operation.label} ({mode}): {_described(exc)}")
    print(f"status codes answered: {sorted(seen.items())}")
    assert not failures, "\n\n".join(failures)
