"""An Idempotency-Key reused with another request is a 422 naming the conflict (issue 11).

The IETF httpapi draft "The Idempotency-Key HTTP Header Field" (section 2.7): reusing a key
with a different payload is an error. Before, a DELETE whose key an earlier trigger had used
answered 200 with the trigger's events and deleted nothing. The API keeps a fingerprint
(sha256 of method, path and canonical JSON body) of each key's first use in its read model's
RocksDB, so the check survives a restart. Writes here go to a producer whose broker never
answers (the ``offline`` fixture): a write that passed every check ends 503.
"""

from __future__ import annotations

from fastapi.testclient import TestClient
from httpx import Response

from services.api.app import create_app
from services.api.readmodel.reader import ReadModel
from tests.unit.authed import authed
from tests.unit.rm_feed import JOB, register

KEY = {"Idempotency-Key": "K1"}


def conflict(answer: Response) -> str:
    assert answer.status_code == 422, answer.text
    [error] = answer.json()["detail"]
    assert error["loc"] == ["header", "Idempotency-Key"]
    assert error["type"] == "idempotency_key_reused"
    return str(error["msg"])


def test_a_key_reused_for_another_command_is_422_and_nothing_is_produced(
    rm: ReadModel, offline: TestClient
) -> None:
    register(rm)
    assert offline.post(f"/api/v1/jobs/{JOB}/trigger", headers=KEY).status_code == 503
    msg = conflict(offline.delete(f"/api/v1/jobs/{JOB}", headers=KEY))
    assert f"first used for POST /api/v1/jobs/{JOB}/trigger" in msg


def test_a_key_reused_with_another_body_on_the_same_path_is_422(
    rm: ReadModel, offline: TestClient
) -> None:
    register(rm)
    assert offline.patch(f"/api/v1/jobs/{JOB}", json={"name": "a"}, headers=KEY).status_code
    msg = conflict(offline.patch(f"/api/v1/jobs/{JOB}", json={"name": "b"}, headers=KEY))
    assert f"PATCH /api/v1/jobs/{JOB} with another body" in msg


def test_a_retry_with_the_same_body_is_not_a_conflict_whatever_its_json_layout(
    rm: ReadModel, offline: TestClient
) -> None:
    register(rm)
    url = f"/api/v1/jobs/{JOB}"
    first = offline.patch(url, json={"name": "a", "timeout_s": 5}, headers=KEY)
    assert first.status_code == 503
    same = b'{ "timeout_s": 5,\n  "name": "a" }'
    again = offline.patch(url, content=same, headers={**KEY, "content-type": "application/json"})
    assert again.status_code == 503  # the same request: produced again, deduped by the fold


def test_a_refused_request_does_not_bind_its_key(rm: ReadModel, offline: TestClient) -> None:
    register(rm)
    url = f"/api/v1/jobs/{JOB}"
    assert offline.patch(url, json={"timeout_s": -1}, headers=KEY).status_code == 422
    assert offline.patch(url, json={"timeout_s": 5}, headers=KEY).status_code == 503


def test_the_first_use_is_remembered_across_an_api_restart(
    rm: ReadModel, offline: TestClient
) -> None:
    register(rm)
    assert offline.post(f"/api/v1/jobs/{JOB}/trigger", headers=KEY).status_code == 503
    rm.store.close()
    reopened = ReadModel(rm.settings, rm.settings.state_path())
    try:
        client = authed(create_app(rm.settings, read_model=reopened))
        conflict(client.delete(f"/api/v1/jobs/{JOB}", headers=KEY))
    finally:
        reopened.store.close()
        rm.store = ReadModel(rm.settings, rm.settings.state_path()).store  # for the fixture
