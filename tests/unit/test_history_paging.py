"""Cursor paging of runs, jobs and dead letters against a read model fed RunEvents by hand."""

from __future__ import annotations

import base64
import re
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi.testclient import TestClient

from cronlog import events as ev
from services.api.access.auth import Principal, Role
from services.api.app import create_app
from services.api.readmodel import paging
from services.api.readmodel.reader import ReadModel
from services.api.routes import operate
from tests.unit.authed import authed
from tests.unit.rm_feed import T0 as DL_T0
from tests.unit.rm_feed import dead_letter, register_for
from tests.unit.store_feed import (
    JOB,
    SPEC,
    T0,
    URL,
    all_pages,
    command,
    feed,
    fire_many,
    register,
)


def test_runs_page_newest_first_and_the_last_page_has_no_cursor(
    rm: ReadModel, client: TestClient
) -> None:
    register(rm.store)
    expected = fire_many(rm, 25)
    seen, pages = all_pages(client, URL, "runs", limit=10)
    assert seen == expected
    assert pages == 3
    whole = client.get(URL, params={"limit": 25}).json()
    assert [r["run_id"] for r in whole["runs"]] == expected
    assert whole["next_cursor"] is None  # complete: no cursor to an empty page


def test_runs_filter_by_state_trigger_and_scheduled_for_bounds(
    rm: ReadModel, client: TestClient
) -> None:
    register(rm.store)
    fire_many(rm, 12, fail_every=3)  # runs 0, 3, 6, 9 fail
    failed, _ = all_pages(client, URL, "runs", state="failed", limit=2)
    assert failed == [f"r-{(T0 + timedelta(seconds=10 * i)):%H%M%S}" for i in (9, 6, 3, 0)]
    since, until = (T0 + timedelta(seconds=30)).isoformat(), "2026-03-01T13:01:00+01:00"
    bounded, _ = all_pages(client, URL, "runs", since=since, until=until, limit=3)
    assert bounded == [f"r-{(T0 + timedelta(seconds=10 * i)):%H%M%S}" for i in (5, 4, 3)]
    assert all_pages(client, URL, "runs", trigger="manual")[0] == []
    assert len(all_pages(client, URL, "runs", trigger="schedule", limit=5)[0]) == 12


def test_a_bad_or_foreign_cursor_and_a_limit_over_the_max_are_422_naming_the_field(
    rm: ReadModel, client: TestClient
) -> None:
    register(rm.store)
    register_for(rm, "default", "other-job")
    fire_many(rm, 3)
    cursor = client.get(URL, params={"limit": 1}).json()["next_cursor"]
    jobs_cursor = paging.encode("jobs", "", b"a")
    forged = base64.urlsafe_b64encode(b"c1\x00runs\x00" + JOB.encode() + b"\x00zz").decode()
    for url, bad in [
        (URL, "not base64 at all!"),
        (URL, jobs_cursor),
        (URL, forged),
        ("/api/v1/jobs/other-job/runs", cursor),  # another job's
        ("/api/v1/jobs", cursor),
        ("/api/v1/dead-letters", cursor),
    ]:
        answer = client.get(url, params={"cursor": bad})
        assert answer.status_code == 422, (url, bad)
        assert answer.json()["detail"][0]["loc"] == ["query", "cursor"]
    answer = client.get(URL, params={"limit": paging.MAX_PAGE + 1})
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["loc"] == ["query", "limit"]


def test_a_cursor_reads_nothing_of_another_tenants_job(rm: ReadModel) -> None:
    register_for(rm, "team-a", "a-job")
    register_for(rm, "team-b", "b-job")
    register(rm.store)  # the default tenant's
    app = create_app(rm.settings, read_model=rm)
    a = authed(app, tenant="team-a", role="viewer")
    b_cursor = paging.encode("runs", "b-job", b"0000000000000\x00x")
    assert a.get("/api/v1/jobs/b-job/runs", params={"cursor": b_cursor}).status_code == 404
    jobs, _ = all_pages(a, "/api/v1/jobs", "jobs", limit=1)
    assert jobs == ["a-job"]
    # a cursor positioned before another tenant's job still lists only the caller's
    before_b = paging.encode("jobs", "", b"a-job")
    assert a.get("/api/v1/jobs", params={"cursor": before_b}).json() == {
        "jobs": [],
        "next_cursor": None,
    }


def test_jobs_page_by_job_id_with_a_status_filter(rm: ReadModel, client: TestClient) -> None:
    names = [f"job-{i:02d}" for i in range(7)]
    for name in reversed(names):
        register_for(rm, "default", name)
    feed(rm.store, *command("del", ev.JobDeleted(), job_id="job-03"))
    seen, pages = all_pages(client, "/api/v1/jobs", "jobs", limit=3)
    assert (seen, pages) == (names, 3)
    assert all_pages(client, "/api/v1/jobs", "jobs", status="deleted", limit=2)[0] == ["job-03"]


def test_dead_letters_page_newest_first_per_job_and_for_a_tenant(
    rm: ReadModel, client: TestClient
) -> None:
    register(rm.store)
    feed(rm.store, *command("reg2", ev.JobRegistered(spec=SPEC, next_fire_at=None), job_id="b"))
    ours = [dead_letter(rm, h, job_id=JOB) for h in range(5)]
    theirs = [dead_letter(rm, h, job_id="b") for h in range(5, 8)]
    seen, pages = all_pages(client, "/api/v1/dead-letters", "dead_letters", limit=2)
    assert seen == (ours + theirs)[::-1]
    assert pages == 4
    one_job, _ = all_pages(client, "/api/v1/dead-letters", "dead_letters", job_id=JOB, limit=2)
    assert one_job == ours[::-1]
    since = (DL_T0 + timedelta(hours=1)).isoformat()
    until = (DL_T0 + timedelta(hours=6)).isoformat()
    bounded, _ = all_pages(
        client, "/api/v1/dead-letters", "dead_letters", since=since, until=until, limit=2
    )
    assert bounded == (ours + theirs)[1:6][::-1]
    tenant, _ = all_pages(client, "/api/v1/tenants/default/dead-letters", "dead_letters", limit=3)
    assert tenant == seen
    job_cursor = client.get("/api/v1/dead-letters", params={"job_id": JOB, "limit": 1}).json()[
        "next_cursor"
    ]
    answer = client.get("/api/v1/dead-letters", params={"cursor": job_cursor})
    assert answer.status_code == 422  # a job's cursor walks another index


def test_a_filter_matching_few_rows_answers_short_pages_with_a_cursor(
    rm: ReadModel, client: TestClient, monkeypatch: Any
) -> None:
    register(rm.store)
    fire_many(rm, 9, fail_every=8)  # only runs 0 and 8 fail
    monkeypatch.setattr(paging, "SCAN_BUDGET", 3)
    first = client.get(URL, params={"state": "failed", "limit": 10}).json()
    assert [r["run_id"] for r in first["runs"]] == [f"r-{(T0 + timedelta(seconds=80)):%H%M%S}"]
    assert first["next_cursor"] is not None  # not complete: it says where to go on
    failed, pages = all_pages(client, URL, "runs", state="failed", limit=10)
    assert len(failed) == 2
    assert pages == 3


def test_a_bulk_replay_selection_stops_at_its_limit_and_says_where_to_go_on(
    rm: ReadModel, client: TestClient, monkeypatch: Any
) -> None:
    register(rm.store)
    letters = [dead_letter(rm, h, job_id=JOB) for h in range(5)][::-1]  # newest first
    monkeypatch.setattr(operate, "MAX_REPLAYS", 2)
    request = SimpleNamespace(app=client.app)
    caller = Principal("t", "default", Role.OPERATOR)
    selected: list[str] = []
    cursor, requests = None, 0
    while True:
        body = operate.ReplayIn(job_id=JOB, cursor=cursor)
        docs, cursor = operate._selected(request, caller, body)  # type: ignore[arg-type]
        selected += [d["run_id"] for d in docs]
        requests += 1
        if cursor is None:
            break
    assert (selected, requests) == (letters, 3)
    answer = client.post("/api/v1/dead-letters/replay", json={"job_id": JOB, "cursor": "x"})
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["loc"] == ["body", "cursor"]


def test_a_cursor_is_sealed_it_names_no_row_and_cannot_be_forged() -> None:
    """A page's walk may end on another tenant's key (review, adversary): the cursor is
    sealed (Fernet), so its position cannot be read, and an unsealed one is refused."""
    cursor = paging.encode("jobs", "", b"other-tenants-secret-job")
    assert b"secret" not in base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    assert paging.decode(cursor, "jobs", "", re.compile(rb".+")) == b"other-tenants-secret-job"
    forged = base64.urlsafe_b64encode(b"c1\x00jobs\x00\x00x").decode()
    with pytest.raises(paging.BadCursor):
        paging.decode(forged, "jobs", "", re.compile(rb".+"))
