"""The web console without a browser: sign-in and cookie, cross-site checks, roles and tenants,
the live-update stream's limits, the read model's change signal, and the SVG geometry.

Pages run over a read model fed by hand (no Kafka); a write that passed every check reaches
the API's own command path and ends 503 (its producer's broker never answers).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from fastapi import FastAPI
from fastapi.testclient import TestClient

from cronlog import events as ev
from cronlog.errors import CronlogError
from cronlog.ids import run_id_for_tick
from cronlog.model import JobSpec, main_task
from cronlog.vocabulary import RunTrigger
from services.api.access.auth import Authenticator
from services.api.app import create_app
from services.api.console import graph, shutdown_streams
from services.api.console import stream as console_stream
from services.api.console.session import COOKIE
from services.api.readmodel.reader import ReadModel
from services.api.settings import ApiSettings
from tests.unit.authed import TOKENS, token
from tests.unit.rm_feed import HOURLY, T0, feed, register_for

ORIGIN = {"Origin": "http://testserver"}
A_JOB, B_JOB = "a-job", "b-job"


def active_run(rm: ReadModel, job_id: str) -> str:
    tick = T0 + timedelta(hours=1)
    rid = run_id_for_tick(job_id, tick)
    scheduled = ev.RunScheduled(
        run_id=rid,
        scheduled_for=tick,
        trigger=RunTrigger.SCHEDULE,
        tasks=("main",),
        next_fire_at=None,
    )
    feed(rm, f"run-{job_id}", scheduled, job_id=job_id)
    return rid


@pytest.fixture
def app(rm: ReadModel) -> Iterator[FastAPI]:
    """Tenant A's job with an active run, tenant B's job; writes end 503 after 0.3 s."""
    register_for(rm, "team-a", A_JOB)
    register_for(rm, "team-b", B_JOB)
    active_run(rm, A_JOB)
    settings = rm.settings.model_copy(update={"api_delivery_timeout_s": 0.3})
    assert isinstance(settings, ApiSettings)
    producer = Producer({"bootstrap.servers": "127.0.0.1:9", "log_level": 0})
    app = create_app(settings, read_model=rm, producer=producer)
    app.state.authenticator = Authenticator(TOKENS)
    yield app
    app.state.sender.close(0)


def browser(app: FastAPI, tenant: str = "team-a", role: str = "operator") -> TestClient:
    """A client holding the console's cookie of ``tenant``/``role`` (no redirects followed)."""
    client = TestClient(app, follow_redirects=False)
    client.cookies.set(COOKIE, token(tenant, role))
    return client


def a_run(rm: ReadModel) -> str:
    return str(rm.runs(A_JOB, 1)[0]["run_id"])


def test_pages_without_a_credential_go_to_login_and_the_rest_is_401(app: FastAPI) -> None:
    anonymous = TestClient(app, follow_redirects=False)
    for path in ("/", f"/jobs/{A_JOB}", "/dead-letters", "/workers", "/runs/x"):
        answer = anonymous.get(path)
        assert (answer.status_code, answer.headers["location"]) == (303, "/login"), path
    assert anonymous.get("/", headers={"HX-Request": "true"}).status_code == 401
    assert anonymous.get("/console/stream").status_code == 401
    assert anonymous.post(f"/jobs/{A_JOB}/trigger", headers=ORIGIN).status_code == 401
    anonymous.cookies.set(COOKIE, "clt_not-a-token")
    assert anonymous.get("/").status_code == 303
    assert anonymous.get("/login").status_code == 200


def test_login_sets_an_httponly_strict_cookie_that_authenticates_pages(app: FastAPI) -> None:
    client = TestClient(app, follow_redirects=False)
    answer = client.post("/login", data={"token": token("team-a", "viewer")}, headers=ORIGIN)
    assert (answer.status_code, answer.headers["location"]) == (303, "/")
    cookie = answer.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}=")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    assert "Secure" not in cookie  # plain http (tests); https sets it, below
    page = client.get("/")
    assert page.status_code == 200
    assert '<b id="tenant">team-a</b>' in page.text and '<b id="role">viewer</b>' in page.text
    secure = TestClient(app, base_url="https://testserver", follow_redirects=False)
    answer = secure.post(
        "/login", data={"token": token()}, headers={"Origin": "https://testserver"}
    )
    assert "Secure" in answer.headers["set-cookie"]


def test_login_refuses_a_bad_token_and_a_cross_site_form(app: FastAPI) -> None:
    client = TestClient(app, follow_redirects=False)
    bad = client.post("/login", data={"token": "clt_nope"}, headers=ORIGIN)
    assert bad.status_code == 401 and "unknown API token" in bad.text
    assert "set-cookie" not in bad.headers
    evil = {"Origin": "http://evil.example"}
    assert client.post("/login", data={"token": token()}, headers=evil).status_code == 403


def test_logout_clears_the_cookie(app: FastAPI) -> None:
    client = TestClient(app, follow_redirects=False)
    client.post("/login", data={"token": token()}, headers=ORIGIN)
    assert client.get("/").status_code == 200
    answer = client.post("/logout", headers=ORIGIN)
    assert (answer.status_code, answer.headers["location"]) == (303, "/login")
    assert "Max-Age=0" in answer.headers["set-cookie"]
    assert client.get("/").status_code == 303


def test_the_bearer_header_works_as_the_cookie_does(app: FastAPI) -> None:
    client = TestClient(app, headers={"Authorization": f"Bearer {token('team-a', 'viewer')}"})
    assert f'data-job="{A_JOB}"' in client.get("/").text


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site", "Origin": "http://testserver"},
    ],
)
def test_writes_from_another_site_are_403(app: FastAPI, rm: ReadModel, headers: Any) -> None:
    answer = browser(app).post(f"/runs/{a_run(rm)}/cancel", headers=headers)
    assert answer.status_code == 403, answer.text
    assert "cross-site" in answer.text


def test_a_viewer_may_not_write_and_is_offered_no_button(app: FastAPI, rm: ReadModel) -> None:
    viewer = browser(app, role="viewer")
    run_id = a_run(rm)
    page = viewer.get(f"/runs/{run_id}")
    assert page.status_code == 200 and 'id="cancel"' not in page.text
    assert "Trigger" not in viewer.get("/").text
    for path in (f"/runs/{run_id}/cancel", f"/jobs/{A_JOB}/trigger", f"/jobs/{A_JOB}/pause"):
        answer = viewer.post(path, headers=ORIGIN)
        assert answer.status_code == 403 and "needs operator" in answer.text, path
    assert 'id="cancel"' in browser(app).get(f"/runs/{run_id}").text


def test_another_tenants_resources_are_not_found(app: FastAPI, rm: ReadModel) -> None:
    b = browser(app, tenant="team-b")
    run_id = a_run(rm)
    listing = b.get("/").text
    assert f'data-job="{A_JOB}"' not in listing and f'data-job="{B_JOB}"' in listing
    for path in (f"/jobs/{A_JOB}", f"/runs/{run_id}", f"/runs/{run_id}/tasks/main/attempts/1/log"):
        assert b.get(path).status_code == 404, path
    assert b.post(f"/runs/{run_id}/cancel", headers=ORIGIN).status_code == 404
    assert b.post(f"/jobs/{A_JOB}/trigger", headers=ORIGIN).status_code == 404
    platform = browser(app, tenant="*", role="viewer").get("/").text
    assert f'data-job="{A_JOB}"' in platform and f'data-job="{B_JOB}"' in platform
    assert "<th>tenant</th>" in platform


def test_an_allowed_write_goes_through_the_apis_command_path(app: FastAPI, rm: ReadModel) -> None:
    # Every check passed, so the API's own write produced the command: its broker is down.
    answer = browser(app).post(f"/runs/{a_run(rm)}/cancel", headers=ORIGIN)
    assert answer.status_code == 503, answer.text
    assert "error" in answer.text


def test_fragments_answer_only_the_live_part(app: FastAPI) -> None:
    client = browser(app)
    whole, part = client.get("/"), client.get("/", headers={"HX-Request": "true"})
    assert "<html" in whole.text and "sse-connect" in whole.text
    assert "<html" not in part.text and part.text.lstrip().startswith('<table id="jobs">')
    assert part.headers["vary"] == "HX-Request"


def test_the_stream_is_bounded_and_refused_once_the_server_exits(app: FastAPI) -> None:
    client = browser(app)
    app.state.settings = app.state.settings.model_copy(update={"api_console_max_streams": 0})
    answer = client.get("/console/stream")
    assert answer.status_code == 503 and "too many" in answer.text
    app.state.settings = app.state.settings.model_copy(update={"api_console_max_streams": 5})
    shutdown_streams(app)
    assert client.get("/console/stream").status_code == 503
    assert client.get("/console/static/htmx.min.js").status_code == 200
    assert client.get("/console/static/README.md").status_code == 404


def test_the_read_model_version_wakes_a_waiter(rm: ReadModel) -> None:
    async def scenario() -> tuple[int, int, float]:
        start = rm.version
        timed_out = await rm.changed(start, 0.05)
        loop = asyncio.get_running_loop()
        loop.call_later(0.05, rm._notify, set())  # what a consumed batch does
        t0 = loop.time()
        woke = await rm.changed(start, 5.0)
        return timed_out - start, woke - start, loop.time() - t0

    same, moved, waited_s = asyncio.run(scenario())
    assert (same, moved) == (0, 1)
    assert waited_s < 1.0


def test_layout_puts_tasks_in_columns_by_depth() -> None:
    nodes, edges, width, height = graph.layout(
        ["a", "b", "c", "d"], [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d"), ("x", "a")]
    )
    at = {n.task: (n.depth, n.row, n.x, n.y) for n in nodes}
    step_x, step_y = graph.NODE_W + graph.COL_GAP, graph.NODE_H + graph.ROW_GAP
    pad = graph.PAD
    assert at == {
        "a": (0, 0, pad, pad),
        "b": (1, 0, pad + step_x, pad),
        "c": (1, 1, pad + step_x, pad + step_y),
        "d": (2, 0, pad + 2 * step_x, pad),
    }
    assert [(e.upstream, e.task) for e in edges] == [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")]
    ab = edges[0]
    assert (ab.x1, ab.y1, ab.x2, ab.y2) == (
        pad + graph.NODE_W,
        pad + graph.NODE_H // 2,
        pad + step_x,
        pad + graph.NODE_H // 2,
    )
    assert (width, height) == (
        2 * pad + 3 * step_x - graph.COL_GAP,
        2 * pad + 2 * step_y - graph.ROW_GAP,
    )


def test_layout_of_one_task_and_of_a_cycle() -> None:
    nodes, edges, width, height = graph.layout(["main"], [])
    assert [(n.depth, n.row) for n in nodes] == [(0, 0)] and edges == []
    assert (width, height) == (2 * graph.PAD + graph.NODE_W, 2 * graph.PAD + graph.NODE_H)
    with pytest.raises(CronlogError, match="cycle"):
        graph.layout(["a", "b"], [("a", "b"), ("b", "a")])


def test_timeline_spans_runs_from_start_to_end_or_now() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)

    def at(s: int) -> str:
        return (t0 + timedelta(seconds=s)).isoformat()

    runs = [
        {"run_id": "r2", "state": "running", "created_at": at(50), "started_at": at(60)},
        {"run_id": "r1", "state": "succeeded", "created_at": at(0), "finished_at": at(40)},
    ]
    bars, width, height = graph.timeline(runs, t0 + timedelta(seconds=100))
    span = graph.TIMELINE_W - 2 * graph.PAD
    assert [(b.run_id, b.x, b.width) for b in bars] == [
        ("r2", graph.PAD + round(0.6 * span), round(0.4 * span)),
        ("r1", graph.PAD, round(0.4 * span)),
    ]
    assert [b.y for b in bars] == [graph.PAD, graph.PAD + graph.BAR_H + graph.BAR_GAP]
    assert bars[0].end is None and bars[1].end == at(40)
    assert (width, height) == (graph.TIMELINE_W, 2 * graph.PAD + 2 * (graph.BAR_H + graph.BAR_GAP))
    assert graph.timeline([], t0) == ([], graph.TIMELINE_W, 0)


def test_user_data_is_escaped(app: FastAPI, rm: ReadModel) -> None:
    spec = JobSpec("<script>alert(1)</script>", HOURLY, main_task(("true",)), tenant="team-a")
    feed(rm, "reg-xss", ev.JobRegistered(spec=spec, next_fire_at=None), job_id="xss")
    page = browser(app).get("/jobs/xss").text
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_the_stream_says_changed_when_the_page_is_behind_and_ends_on_exit(app: FastAPI) -> None:
    client = browser(app)
    with client.stream("GET", "/console/stream", params={"since": -1}) as answer:
        assert answer.headers["content-type"].startswith("text/event-stream")
        lines = answer.iter_lines()
        assert next(lines) == "retry: 2000"
        assert next(lines) == ""
        assert next(lines) == "event: changed"
        assert next(lines) == f"data: {app.state.read_model.version}"
        assert app.state.console_streams == 1
        shutdown_streams(app)  # the server exits: the stream ends by itself
        rest = list(lines)
    assert "event: changed" not in rest
    assert app.state.console_streams == 0


def test_a_stream_ends_once_its_token_is_revoked(
    app: FastAPI, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Found by an adversarial run: a revoked token's open stream went on for ever."""
    monkeypatch.setattr(console_stream, "REAUTH_S", 0.0)
    client = browser(app)
    with client.stream("GET", "/console/stream", params={"since": -1}) as answer:
        lines = answer.iter_lines()
        assert [next(lines) for _ in range(3)] == ["retry: 2000", "", "event: changed"]
        app.state.authenticator = Authenticator(tmp_path / "no-tokens.json")  # revoked
        rest = list(lines)  # the stream ends by itself
    assert "event: changed" not in rest
    assert app.state.console_streams == 0


def test_every_answer_carries_the_protective_headers(app: FastAPI) -> None:
    """Found by an adversarial run: the log page served ``<script>`` as text/plain without
    nosniff, and nothing kept other sites from framing the console."""
    client = browser(app)
    for path in ("/", "/login", "/console/static/console.css", "/healthz"):
        headers = client.get(path).headers
        assert headers["x-content-type-options"] == "nosniff", path
        assert headers["x-frame-options"] == "DENY", path
        assert headers["content-security-policy"] == "frame-ancestors 'none'", path
        assert headers["referrer-policy"] == "same-origin", path


def test_an_instant_reads_utc_to_the_second_and_keeps_its_iso_for_the_script() -> None:
    html = str(graph.when("2026-12-03T13:15:41.123Z", also="2026-12-03T14:15:41.123+01:00"))
    assert html == (
        '<time datetime="2026-12-03T13:15:41.123000+00:00"'
        ' title="2026-12-03 13:15:41 UTC · 2026-12-03T14:15:41.123+01:00"'
        ' data-also="2026-12-03T14:15:41.123+01:00">2026-12-03 13:15:41 UTC</time>'
    )
    assert str(graph.when(None, "—")) == "—"
    assert str(graph.when("")) == ""


def test_a_task_that_never_ran_shows_no_attempt() -> None:
    never = {"state": "upstream_failed", "attempt": 1, "claimed_at": None, "started_at": None}
    assert (graph.ran(never), graph.task_detail(never)) == (False, "upstream failed")
    assert graph.task_detail({**never, "state": "pending"}) == "pending"
    ran = {"state": "failed", "attempt": 2, "claimed_at": "2026-12-03T13:15:41.123Z"}
    assert (graph.ran(ran), graph.task_detail(ran)) == (True, "failed · attempt 2")
    assert graph.task_detail({"state": "retrying", "attempt": 1}) == "retrying · attempt 1"


def test_an_unknown_runs_page_and_a_log_not_served_are_pages_with_a_title(
    app: FastAPI, rm: ReadModel
) -> None:
    page = browser(app).get("/runs/r-nope")
    assert page.status_code == 404
    assert "<title>404 · run &#39;r-nope&#39; not found · cronlog</title>" in page.text
    run_id = a_run(rm)
    log = browser(app).get(f"/runs/{run_id}/tasks/main/attempts/1/log")
    assert log.status_code == 503  # no log model here: a page with the header, not bare text
    assert "<title>503 · the read model is not running · cronlog</title>" in log.text
    assert 'href="/dead-letters"' in log.text
