"""API authentication and tenant isolation, against a read model fed by hand (no Kafka).

The route walk takes every ``/api/v1`` route from the app's own OpenAPI document, so a route
added later is walked too: with tenant B's token against tenant A's ids, each answers 404 (or,
for the collection routes, 200 without A's resources); without a token, 401.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from confluent_kafka import Producer
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from fastapi import HTTPException
from fastapi.testclient import TestClient

from cronlog import events as ev
from cronlog.errors import CronlogError
from services.api.access.auth import Authenticator, Role, Unauthenticated, add_token, load_tokens
from services.api.app import create_app
from services.api.readmodel.reader import ReadModel
from tests.unit.authed import TOKENS, authed, token
from tests.unit.rm_feed import dead_letter, feed, register_for

A_JOB = "a-job"
MANUAL = {"name": "x", "command": ["true"], "schedule": {"type": "manual"}}


@pytest.fixture
def app_of_a(rm: ReadModel) -> Iterator[Any]:
    """An app whose read model holds tenant A's job with a dead-lettered run; its producer's
    broker never answers, so a write that passed every check would end 503, not 404."""
    register_for(rm, "team-a", A_JOB)
    dead_letter(rm, 1, job_id=A_JOB)
    settings = rm.settings.model_copy(update={"api_delivery_timeout_s": 0.3})
    producer = Producer({"bootstrap.servers": "127.0.0.1:9", "log_level": 0})
    app = create_app(settings, read_model=rm, producer=producer)
    yield app
    app.state.sender.close(0)


def a_run(rm: ReadModel) -> str:
    runs = rm.runs(A_JOB, 10)
    assert len(runs) == 1
    return str(runs[0]["run_id"])


def routes(app: Any) -> list[tuple[str, str]]:
    spec = TestClient(app).get("/openapi.json").json()
    return [
        (method.upper(), path)
        for path, ops in spec["paths"].items()
        if path.startswith("/api/v1/")
        for method in ops
    ]


def filled(path: str, run_id: str) -> str:
    return (
        path.replace("{job_id}", A_JOB)
        .replace("{run_id}", run_id)
        .replace("{task}", "main")
        .replace("{attempt}", "1")
        .replace("{tenant}", "team-a")
    )


BODIES: dict[tuple[str, str], dict[str, Any]] = {
    ("POST", "/api/v1/jobs/{job_id}/backfill"): {
        "start": "2024-03-01T00:00:00Z",
        "end": "2024-03-01T05:00:00Z",
    },
    ("PATCH", "/api/v1/jobs/{job_id}"): {"paused": True},
    ("PUT", "/api/v1/tenants/{tenant}/limits"): {"weight": 2, "max_running_tasks": 4},
}
COLLECTIONS = {("GET", "/api/v1/jobs"), ("GET", "/api/v1/dead-letters"), ("GET", "/api/v1/workers")}


def test_every_route_answers_another_tenants_ids_with_404(rm: ReadModel, app_of_a: Any) -> None:
    b = authed(app_of_a, tenant="team-b", role="admin")
    rid = a_run(rm)
    walked = []
    for method, path in routes(app_of_a):
        if (method, path) in COLLECTIONS:
            continue
        body = BODIES.get((method, path))
        if (method, path) == ("POST", "/api/v1/dead-letters/replay"):
            for body in ({"run_id": rid, "task": "main"}, {"job_id": A_JOB}):
                answer = b.request(method, filled(path, rid), json=body)
                assert answer.status_code == 404, (path, body, answer.text)
            walked.append(path)
            continue
        if (method, path) == ("POST", "/api/v1/jobs"):
            answer = b.post(path, json={"job_id": A_JOB, **MANUAL})
            assert answer.status_code == 409, answer.text  # ids are global: taken, nothing more
            assert answer.json() == {"detail": "job 'a-job' already exists"}
            walked.append(path)
            continue
        answer = b.request(method, filled(path, rid), json=body)
        assert answer.status_code == 404, (method, path, answer.text)
        if "{tenant}" not in path:  # a tenant route echoes the name asked for, nothing more
            assert "team-a" not in answer.text
        walked.append(path)
    assert len(walked) >= 12  # the walk reached the routes (a renamed prefix would skip them)


def test_collections_hide_another_tenants_resources(rm: ReadModel, app_of_a: Any) -> None:
    register_for(rm, "team-b", "b-job")
    b = authed(app_of_a, tenant="team-b", role="viewer")
    assert [j["job_id"] for j in b.get("/api/v1/jobs").json()["jobs"]] == ["b-job"]
    assert b.get("/api/v1/dead-letters").json() == {"dead_letters": [], "next_cursor": None}
    assert b.get(f"/api/v1/dead-letters?job_id={A_JOB}").status_code == 404
    a = authed(app_of_a, tenant="team-a", role="viewer")
    assert [j["job_id"] for j in a.get("/api/v1/jobs").json()["jobs"]] == [A_JOB]
    assert a.get("/api/v1/jobs").json()["jobs"][0]["tenant"] == "team-a"
    assert len(a.get("/api/v1/dead-letters").json()["dead_letters"]) == 1
    platform = authed(app_of_a, tenant="*", role="viewer")
    assert [j["job_id"] for j in platform.get("/api/v1/jobs").json()["jobs"]] == [A_JOB, "b-job"]


def test_without_a_token_every_route_answers_401(app_of_a: Any, rm: ReadModel) -> None:
    bare = TestClient(app_of_a)
    rid = a_run(rm)
    for method, path in routes(app_of_a):
        answer = bare.request(method, filled(path, rid), json=BODIES.get((method, path), {}))
        assert answer.status_code == 401, (method, path, answer.text)
        assert answer.headers["www-authenticate"] == "Bearer"
    assert bare.get("/healthz").status_code in (200, 503)  # probes need no token


@pytest.mark.parametrize(
    ("header", "detail"),
    [
        ("Bearer clt_nope", "unknown API token"),
        ("Bearer not-a-jwt", "not an API token, and no JWT keys are configured"),
        ("Basic dXNlcjpwYXNz", "missing bearer token"),
    ],
)
def test_a_bad_token_is_a_401_naming_what_is_wrong(app_of_a: Any, header: str, detail: str) -> None:
    answer = TestClient(app_of_a).get("/api/v1/jobs", headers={"Authorization": header})
    assert answer.status_code == 401
    assert answer.json() == {"detail": detail}


def test_a_viewer_cannot_write_and_an_operator_cannot_define(app_of_a: Any) -> None:
    viewer = authed(app_of_a, tenant="team-a", role="viewer")
    assert viewer.get(f"/api/v1/jobs/{A_JOB}").status_code == 200
    answer = viewer.post(f"/api/v1/jobs/{A_JOB}/trigger")
    assert answer.status_code == 403
    assert answer.json() == {"detail": "role viewer may not do this; needs operator"}
    operator = authed(app_of_a, tenant="team-a", role="operator")
    answer = operator.patch(f"/api/v1/jobs/{A_JOB}", json={"name": "renamed"})
    assert answer.json() == {"detail": "role operator may not change a definition; needs admin"}
    assert operator.post("/api/v1/jobs", json=MANUAL).status_code == 403
    assert operator.delete(f"/api/v1/jobs/{A_JOB}").status_code == 403


def test_a_tenant_cannot_register_for_another_tenant(app_of_a: Any) -> None:
    b = authed(app_of_a, tenant="team-b", role="admin")
    answer = b.post("/api/v1/jobs", json={**MANUAL, "tenant": "team-a"})
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["loc"] == ["body", "tenant"]
    assert "you act for tenant 'team-b'" in answer.json()["detail"][0]["msg"]


# -- tokens and JWTs --------------------------------------------------------------------------


def test_the_tokens_file_keeps_digests_only(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    secret = add_token(path, "ci", "team-a", Role.OPERATOR)
    assert secret.startswith("clt_") and len(secret) == 47
    assert secret not in path.read_text()
    assert path.stat().st_mode & 0o777 == 0o600
    (principal,) = load_tokens(path).values()
    assert (principal.subject, principal.tenant, principal.role) == ("ci", "team-a", Role.OPERATOR)
    assert Authenticator(path).authenticate(secret) == principal
    with pytest.raises(CronlogError, match="already has a token named 'ci': pick another name"):
        add_token(path, "ci", "team-b", Role.VIEWER)  # names identify tokens (revocation)


def _rsa_pem(tmp_path: Path) -> tuple[Any, Path]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    path = tmp_path / "jwt.pem"
    path.write_bytes(pem)
    return key, path


def _claims(**over: Any) -> dict[str, Any]:
    base = {"sub": "alice", "aud": "cronlog", "tenant": "team-a", "role": "operator"}
    return {"exp": int(time.time()) + 300, **base, **over}


def test_a_jwt_signed_by_the_configured_key_is_a_principal(tmp_path: Path) -> None:
    key, pem = _rsa_pem(tmp_path)
    auth = Authenticator(None, pem)
    who = auth.authenticate(jwt.encode(_claims(), key, algorithm="RS256"))
    assert (who.subject, who.tenant, who.role) == ("alice", "team-a", Role.OPERATOR)


@pytest.mark.parametrize(
    ("over", "fragment"),
    [
        ({"exp": -10}, "Signature has expired"),  # relative to now, made in the test
        ({"aud": "other"}, "Audience doesn't match"),
        ({"tenant": None}, 'missing the "tenant" claim'),
        ({"role": "root"}, "role 'root' is not one of viewer, operator, admin"),
        ({"tenant": "Team A"}, "claim 'tenant' 'Team A' is not a tenant name or '*'"),
    ],
)
def test_a_jwt_with_bad_claims_is_refused(
    tmp_path: Path, over: dict[str, Any], fragment: str
) -> None:
    key, pem = _rsa_pem(tmp_path)
    claims = _claims(**{k: v for k, v in over.items() if k != "exp" and v is not None})
    claims = {k: v for k, v in claims.items() if over.get(k, "") is not None}
    if "exp" in over:
        claims["exp"] = int(time.time()) + over["exp"]
    with pytest.raises(Unauthenticated) as caught:
        Authenticator(None, pem).authenticate(jwt.encode(claims, key, algorithm="RS256"))
    assert fragment in str(caught.value)


def test_a_jwt_signed_by_another_key_or_with_hs256_is_refused(tmp_path: Path) -> None:
    _, pem = _rsa_pem(tmp_path)
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    auth = Authenticator(None, pem)
    for forged in (
        jwt.encode(_claims(), stranger, algorithm="RS256"),
        jwt.encode(_claims(), "s" * 32, algorithm="HS256"),  # symmetric algorithms: never
    ):
        with pytest.raises(Unauthenticated) as caught:
            auth.authenticate(forged)
        assert str(caught.value).startswith("bad JWT: ")


def test_a_jwks_key_set_picks_the_key_by_kid(tmp_path: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    jwk = jwt.algorithms.ECAlgorithm.to_jwk(key.public_key(), as_dict=True)
    path = tmp_path / "jwks.json"
    path.write_text(__import__("json").dumps({"keys": [{**jwk, "kid": "k1", "use": "sig"}]}))
    auth = Authenticator(None, path)
    good = jwt.encode(_claims(), key, algorithm="ES256", headers={"kid": "k1"})
    assert auth.authenticate(good).tenant == "team-a"
    with pytest.raises(Unauthenticated, match="no configured key has kid 'k2'"):
        auth.authenticate(jwt.encode(_claims(), key, algorithm="ES256", headers={"kid": "k2"}))


def test_a_token_added_while_the_api_runs_is_accepted(app_of_a: Any) -> None:
    fresh = add_token(TOKENS, "late", "team-a", Role.VIEWER)
    answer = authed(app_of_a).get("/api/v1/jobs", headers={"Authorization": f"Bearer {fresh}"})
    assert answer.status_code == 200
    assert token("team-a", "viewer") != fresh


# -- found by an adversarial run ----------------------------------------------------------------


def test_idempotency_keys_are_scoped_by_tenant(rm: ReadModel, app_of_a: Any) -> None:
    register_for(rm, "team-b", "b-job")
    a = authed(app_of_a, tenant="team-a", role="operator")
    b = authed(app_of_a, tenant="team-b", role="operator")
    key = {"Idempotency-Key": "nightly-1"}
    assert a.post(f"/api/v1/jobs/{A_JOB}/trigger", headers=key).status_code == 503  # no broker
    answer = b.post("/api/v1/jobs/b-job/trigger", headers=key)
    assert answer.status_code == 503  # not a 422 naming A's request: B's key is B's own
    assert A_JOB not in answer.text
    again = a.post(f"/api/v1/jobs/{A_JOB}/cancel", headers=key)  # A's reuse is still refused
    assert again.status_code in (404, 422)


def test_a_deeply_nested_body_with_an_idempotency_key_is_no_500(app_of_a: Any) -> None:
    a = authed(app_of_a, tenant="team-a", role="operator")
    deep = "[" * 100_000 + "]" * 100_000
    answer = a.post(
        f"/api/v1/jobs/{A_JOB}/trigger",
        content=deep,
        headers={"Idempotency-Key": "deep", "content-type": "text/plain"},
    )
    assert answer.status_code == 503  # the body is ignored by trigger; no broker here


def test_a_corrupt_tokens_file_keeps_the_tokens_read_before(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "tokens.json"
    secret = add_token(path, "ci", "team-a", Role.VIEWER)
    auth = Authenticator(path)
    assert auth.authenticate(secret).tenant == "team-a"
    path.write_text('{"tokens": [')  # truncated by a careless edit
    assert auth.authenticate(secret).tenant == "team-a"
    assert "the tokens file cannot be read; keeping the 1 tokens read before" in caplog.text


def test_roles_are_the_three_lowercase_names() -> None:
    assert Role.parse("operator") is Role.OPERATOR
    for odd in ("ADMIN", "Admin", "adm\u0131n", 3, None):
        with pytest.raises(ValueError, match="is not one of viewer, operator, admin"):
            Role.parse(odd)


def test_an_after_job_cannot_follow_another_tenants_job(app_of_a: Any) -> None:
    b = authed(app_of_a, tenant="team-b", role="admin")
    body = {**MANUAL, "schedule": {"type": "after", "job_id": A_JOB, "on": "done"}}
    answer = b.post("/api/v1/jobs", json=body)
    assert answer.status_code == 422
    (err,) = answer.json()["detail"]
    assert err["loc"] == ["body", "schedule", "job_id"]
    assert err["msg"] == f"job {A_JOB!r} is not a job of tenant 'team-b'"


# -- quotas and tenant views --------------------------------------------------------------------


def _with_quotas(app: Any, tmp_path: Path, quotas: dict[str, Any], clock: Any = None) -> None:
    from services.api.routes.tenants import Admission

    path = tmp_path / "tenants.json"
    path.write_text(__import__("json").dumps({"tenants": quotas}))
    app.state.admission = Admission(path, clock) if clock else Admission(path)


def test_a_registration_past_max_jobs_is_a_429_with_retry_after(
    app_of_a: Any, tmp_path: Path
) -> None:
    _with_quotas(app_of_a, tmp_path, {"team-a": {"max_jobs": 1}})
    a = authed(app_of_a, tenant="team-a", role="admin")
    answer = a.post("/api/v1/jobs", json=MANUAL)
    assert answer.status_code == 429
    assert answer.headers["retry-after"] == "60"
    assert answer.json()["detail"].startswith("tenant 'team-a' has 1 of 1 jobs (max_jobs)")
    b = authed(app_of_a, tenant="team-b", role="admin")  # another tenant: its own quota
    assert b.post("/api/v1/jobs", json=MANUAL).status_code == 503  # admitted (no broker)


def test_manual_runs_past_the_per_minute_quota_are_429_until_the_window_frees(
    app_of_a: Any, tmp_path: Path
) -> None:
    now = [1000.0]
    _with_quotas(app_of_a, tmp_path, {"team-a": {"max_manual_runs_per_minute": 2}}, lambda: now[0])
    a = authed(app_of_a, tenant="team-a", role="operator")
    url = f"/api/v1/jobs/{A_JOB}/trigger"
    assert [a.post(url).status_code for _ in range(2)] == [503, 503]  # admitted, no broker
    now[0] += 20
    refused = a.post(url)
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "40"
    now[0] += 40
    assert a.post(url).status_code == 503  # a minute after the first: admitted again


def test_the_tenant_view_shows_usage_and_quota_and_hides_other_tenants(
    app_of_a: Any, tmp_path: Path
) -> None:
    _with_quotas(app_of_a, tmp_path, {"team-a": {"max_jobs": 10}})
    a = authed(app_of_a, tenant="team-a", role="viewer")
    view = a.get("/api/v1/tenants/team-a").json()
    assert view == {
        "tenant": "team-a",
        "jobs": 1,
        "runs_active": 0,
        "runs_queued": 0,
        "suspended_jobs": 0,
        "dead_letters": 1,
        "slots_held": 0,
        "slots_waiting": 0,
        "quota": {"max_jobs": 10, "max_manual_runs_per_minute": None},
    }
    letters = a.get("/api/v1/tenants/team-a/dead-letters").json()["dead_letters"]
    assert [d["job_id"] for d in letters] == [A_JOB]
    b = authed(app_of_a, tenant="team-b", role="admin")
    assert b.get("/api/v1/tenants/team-a").status_code == 404
    assert b.get("/api/v1/tenants/team-a/dead-letters").status_code == 404
    assert b.get("/api/v1/tenants/team-b/dead-letters").json() == {
        "dead_letters": [],
        "next_cursor": None,
    }


def test_registrations_in_flight_count_against_max_jobs(rm: ReadModel, tmp_path: Path) -> None:
    # found by an adversarial run: 8 parallel registrations all passed max_jobs 2
    from services.api.routes.tenants import Admission

    path = tmp_path / "tenants.json"
    path.write_text('{"tenants": {"team-c": {"max_jobs": 2}}}')
    admission = Admission(path)
    with admission.job_slot(rm, "team-c"), admission.job_slot(rm, "team-c"):
        with pytest.raises(HTTPException) as refused, admission.job_slot(rm, "team-c"):
            pass
        assert refused.value.status_code == 429
        assert "0 of 2 jobs (max_jobs), 2 more being registered" in str(refused.value.detail)
    with admission.job_slot(rm, "team-c"):  # the two ended: room again
        pass


def test_a_request_larger_than_the_per_minute_quota_is_422_not_429(tmp_path: Path) -> None:
    from services.api.routes.tenants import Admission

    path = tmp_path / "tenants.json"
    path.write_text('{"tenants": {"t": {"max_manual_runs_per_minute": 3}}}')
    with pytest.raises(HTTPException) as refused:
        Admission(path).admit_manual_runs("t", 9)
    assert refused.value.status_code == 422
    assert "9 runs in one request are more than" in str(refused.value.detail)


def test_quota_numbers_must_be_integers(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from services.api.routes.tenants import Admission

    path = tmp_path / "tenants.json"
    path.write_text('{"tenants": {"t": {"max_jobs": true}}}')
    assert Admission(path).quota("t").max_jobs is None  # refused, logged: no quota read
    assert "the tenants file cannot be read" in caplog.text


def test_only_a_platform_admin_sets_tenant_limits(app_of_a: Any) -> None:
    body = {"weight": 3, "max_running_tasks": 4}
    own_admin = authed(app_of_a, tenant="team-a", role="admin")
    assert own_admin.put("/api/v1/tenants/team-a/limits", json=body).status_code == 403
    assert own_admin.put("/api/v1/tenants/*/limits", json=body).status_code == 404
    platform = authed(app_of_a, tenant="*", role="admin")
    bad = platform.put("/api/v1/tenants/team-a/limits", json={"weight": 0})
    assert bad.status_code == 422  # weight 1..1000
    assert platform.put("/api/v1/tenants/Team A/limits", json=body).status_code == 422
    assert platform.put("/api/v1/tenants/default/limits", json=body).status_code == 422
    answer = platform.put("/api/v1/tenants/team-a/limits", json=body)
    assert answer.status_code == 503  # validated and authorised; this app has no Kafka


def test_the_tenant_and_job_views_show_the_slots_held_and_waiting(
    rm: ReadModel, app_of_a: Any
) -> None:
    # found by a newcomer: the projection kept them, the views dropped them
    feed(
        rm,
        "slots-1",
        ev.TenantSlotsAsked(tenant="team-a", count=3, waiting=3),
        ev.TenantSlotsReceived(tenant="team-a", count=2),
        job_id=A_JOB,
    )
    a = authed(app_of_a, tenant="team-a", role="viewer")
    view = a.get("/api/v1/tenants/team-a").json()
    assert (view["slots_held"], view["slots_waiting"]) == (2, 1)
    assert a.get(f"/api/v1/jobs/{A_JOB}").json()["slots"] == {"held": 2, "waiting": 1}
    feed(rm, "slots-2", ev.TenantSlotsReturned(tenant="team-a", count=2), job_id=A_JOB)
    assert a.get(f"/api/v1/jobs/{A_JOB}").json()["slots"] == {"held": 0, "waiting": 1}
    register_for(rm, "default", "plain")
    assert authed(app_of_a).get("/api/v1/jobs/plain").json()["slots"] is None
