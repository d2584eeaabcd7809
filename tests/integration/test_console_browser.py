"""The web console in a real headless Chromium, against a real broker, scheduler, worker and API.

Jobs are created through the JSON API; the page is watched (explicit waits on the DOM, never
sleeps) as the read model's server-sent events make htmx re-fetch it: no reload. Cancel and
replay are clicked in the page and checked through the API. Each test saves a screenshot of
its key moment into ``$CRONLOG_ARTIFACTS_DIR`` (default ``.cache/artifacts/console/``).

Needs Debian's ``chromium`` and ``chromium-driver`` (``/usr/bin/chromium``,
``/usr/bin/chromedriver``): missing, the tests fail saying so.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.integration.browser import (
    base,
    click,
    css,
    mark,
    not_reloaded,
    screenshot,
    sign_in,
    text,
    until,
)
from tests.integration.harness import Cluster
from tests.integration.helpers import wait_for

pytestmark = pytest.mark.broker


def create(api: httpx.Client, body: dict[str, Any]) -> None:
    answer = api.post("/api/v1/jobs", json=body)
    assert answer.status_code == 201, answer.text


def trigger(api: httpx.Client, job_id: str) -> str:
    answer = api.post(f"/api/v1/jobs/{job_id}/trigger")
    assert answer.status_code in (201, 202), answer.text
    return str(answer.json()["run_id"])


def run_state(api: httpx.Client, run_id: str) -> str | None:
    answer = api.get(f"/api/v1/runs/{run_id}")
    return str(answer.json()["state"]) if answer.status_code == 200 else None


def test_a_job_appears_and_its_runs_succeed_live(
    api: httpx.Client, cluster: Cluster, driver: WebDriver
) -> None:
    sign_in(driver, api, cluster.token())
    assert (text(driver, "#tenant") or "") == "default"
    assert (text(driver, "#role") or "") == "admin"
    mark(driver)
    create(
        api,
        {
            "job_id": "console-live",
            "name": "every 2 s",
            "schedule": {"type": "cron", "expression": "*/2 * * * * *", "timezone": "Europe/Paris"},
            "command": ["true"],
        },
    )
    row = until(driver, lambda d: text(d, 'tr[data-job="console-live"]'), 30, "job row appears")
    assert "active" in row and "every 2 s" in row and "Europe/Paris" in row
    ticks = css(driver, 'tr[data-job="console-live"] td.ticks time')
    assert len(ticks) == 3, [t.text for t in ticks]
    until(
        driver,
        lambda d: "succeeded" in (text(d, "#job-console-live") or ""),
        60,
        "a run succeeds on /",
    )
    assert not_reloaded(driver), "the jobs page was reloaded; it must update through SSE"
    screenshot(driver, "jobs-live.png")

    click(driver, 'a[href="/jobs/console-live"]')
    until(driver, lambda d: d.current_url.endswith("/jobs/console-live"), 20, "job page")
    ok = 'table#runs tr[data-state="succeeded"]'
    before = len(css(driver, ok))
    mark(driver)
    until(driver, lambda d: len(css(d, ok)) >= before + 2, 60, "two more runs succeed live")
    assert not_reloaded(driver), "the job page was reloaded; it must update through SSE"
    assert "succeeded" in (text(driver, "#runs") or "")
    bars = css(driver, 'svg#timeline rect.bar[data-state="succeeded"]')
    assert len(bars) >= before + 2
    screenshot(driver, "job-runs-live.png")
    runs = api.get("/api/v1/jobs/console-live/runs").json()["runs"]
    assert sum(r["state"] == "succeeded" for r in runs) >= before + 2

    click(driver, "#job-summary button.trigger")
    until(driver, lambda d: "/runs/" in d.current_url, 30, "the triggered run's page")
    assert (text(driver, "#run-trigger") or "") == "manual"
    until(
        driver, lambda d: d.find_element(By.ID, "run-state").text == "succeeded", 60, "manual run"
    )
    driver.get(base(api) + "/jobs/console-live")
    click(driver, "#pause")
    until(driver, lambda d: d.find_element(By.ID, "job-status").text == "paused", 30, "paused")
    assert api.get("/api/v1/jobs/console-live").json()["status"] == "paused"
    click(driver, "#resume")
    until(driver, lambda d: d.find_element(By.ID, "job-status").text == "active", 30, "resumed")
    assert api.get("/api/v1/jobs/console-live").json()["status"] == "active"

    driver.get(base(api) + "/workers")
    worker = until(driver, lambda d: text(d, "tr[data-worker]"), 30, "the worker's row")
    assert ".w1" in worker and "alive" in worker
    screenshot(driver, "workers.png")


def test_cancel_a_running_task_from_its_run_page(
    api: httpx.Client, cluster: Cluster, driver: WebDriver
) -> None:
    create(
        api,
        {
            "job_id": "console-long",
            "name": "long",
            "schedule": {"type": "manual"},
            "command": ["sleep", "60"],
        },
    )
    run_id = trigger(api, "console-long")
    sign_in(driver, api, cluster.token("default", "operator"))
    driver.get(f"{base(api)}/runs/{run_id}")
    until(driver, lambda d: d.find_element(By.ID, "run-state").text == "running", 60, "running")
    click(driver, "#cancel")
    until(driver, lambda d: d.find_element(By.ID, "run-state").text == "cancelled", 30, "cancelled")
    assert not css(driver, "#cancel"), "a cancelled run still offers Cancel"
    screenshot(driver, "run-cancelled.png")
    assert run_state(api, run_id) == "cancelled"


def test_replay_a_dead_letter_from_the_dead_letters_page(
    api: httpx.Client, cluster: Cluster, driver: WebDriver
) -> None:
    create(
        api,
        {
            "job_id": "console-fails",
            "name": "fails",
            "schedule": {"type": "manual"},
            "command": ["sh", "-c", "echo boom; exit 3"],
            "retry_policy": {"max_attempts": 1},
        },
    )
    run_id = trigger(api, "console-fails")
    wait_for(
        lambda: api.get("/api/v1/dead-letters", params={"job_id": "console-fails"}).json()[
            "dead_letters"
        ],
        60,
        "dead letter",
    )
    sign_in(driver, api, cluster.token())
    driver.get(base(api) + "/dead-letters")
    row = until(driver, lambda d: text(d, f'tr[data-run="{run_id}"]'), 20, "dead letter row")
    assert "nonzero_exit" in row
    screenshot(driver, "dead-letters.png")
    click(driver, f'tr[data-run="{run_id}"] button.replay')
    until(
        driver,
        lambda d: "/runs/" in d.current_url and run_id not in d.current_url,
        30,
        "replay run page",
    )
    assert (text(driver, "#run-trigger") or "").startswith("replay")
    new_run = driver.current_url.rsplit("/", 1)[1]
    until(
        driver,
        lambda d: d.find_element(By.ID, "run-state").text == "failed",
        60,
        "replay failed again",
    )
    screenshot(driver, "dead-letter-replayed.png")
    href = str(
        driver.execute_script(
            "return document.querySelector('#attempts a[href$=\"/attempts/1/log\"]').href;"
        )
    )

    def log_says_boom(d: WebDriver) -> bool:
        d.get(href)  # the log arrives on its own topic: ask again until it is there
        return "boom" in d.find_element(By.TAG_NAME, "body").text

    until(driver, log_says_boom, 30, "the attempt's log")
    run = api.get(f"/api/v1/runs/{new_run}").json()
    assert (run["trigger"], run["replay_of"]) == ("replay", run_id)


def dag_nodes(driver: WebDriver) -> list[tuple[str, str, str, str]]:
    """The DAG's nodes (task, state, transform, text), read in one step."""
    got = driver.execute_script(
        "return Array.from(document.querySelectorAll('svg#dag g.node')).map(n =>"
        " [n.dataset.task, n.dataset.state, n.getAttribute('transform'), n.textContent]);"
    )
    return [tuple(map(str, n)) for n in got]  # type: ignore[misc]


def test_the_run_page_draws_a_three_task_dag_with_states(
    api: httpx.Client, cluster: Cluster, driver: WebDriver
) -> None:
    tasks = [
        {"name": "extract", "command": ["sleep", "3"]},
        {"name": "load", "command": ["true"], "depends_on": ["extract"]},
        {"name": "report", "command": ["sh", "-c", "exit 1"], "depends_on": ["extract"]},
    ]
    create(
        api,
        {"job_id": "console-dag", "name": "dag", "schedule": {"type": "manual"}, "tasks": tasks},
    )
    sign_in(driver, api, cluster.token("default", "viewer"))
    run_id = trigger(api, "console-dag")
    driver.get(f"{base(api)}/runs/{run_id}")  # opened while extract sleeps: states move live
    mark(driver)
    first = {t: state for t, state, _, _ in dag_nodes(driver)}
    assert first["report"] == "pending", first
    until(driver, lambda d: d.find_element(By.ID, "run-state").text == "failed", 60, "run ends")
    assert not_reloaded(driver)
    nodes = {t: (state, where, label) for t, state, where, label in dag_nodes(driver)}
    assert sorted(nodes) == ["extract", "load", "report"]
    states = {t: n[0] for t, n in nodes.items()}
    assert states == {"extract": "succeeded", "load": "succeeded", "report": "failed"}
    assert "failed · attempt 1" in nodes["report"][2]
    x = {t: n[1].split(",")[0] for t, n in nodes.items()}
    assert x["load"] == x["report"] != x["extract"]
    assert len(css(driver, "svg#dag line.edge")) == 2
    screenshot(driver, "dag.png")


def test_roles_tenants_and_sign_in_are_enforced(
    api: httpx.Client, cluster: Cluster, driver: WebDriver
) -> None:
    create(
        api,
        {
            "job_id": "console-view",
            "name": "long",
            "schedule": {"type": "manual"},
            "command": ["sleep", "60"],
        },
    )
    run_id = trigger(api, "console-view")
    other = httpx.Client(
        base_url=base(api), headers={"Authorization": f"Bearer {cluster.token('team-b', 'admin')}"}
    )
    cluster.clients.append(other)
    created = other.post(
        "/api/v1/jobs",
        json={"job_id": "b-job", "name": "b", "schedule": {"type": "manual"}, "command": ["true"]},
    )
    assert created.status_code == 201, created.text

    driver.get(base(api) + "/")  # no cookie yet
    until(driver, lambda d: d.current_url == base(api) + "/login", 20, "redirect to /login")
    sign_in(driver, api, cluster.token("default", "viewer"))
    assert (text(driver, "#role") or "") == "viewer"
    assert not css(driver, "button.trigger"), "a viewer is offered Trigger"
    driver.get(f"{base(api)}/runs/{run_id}")
    until(driver, lambda d: d.find_element(By.ID, "run-state").text == "running", 60, "running")
    assert not css(driver, "#cancel"), "a viewer is offered Cancel"
    status = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        f"fetch('/runs/{run_id}/cancel', {{method: 'POST'}}).then(r => done(r.status));"
    )
    assert status == 403
    assert run_state(api, run_id) == "running"
    driver.get(base(api) + "/jobs/b-job")
    assert "not found" in (text(driver, "#error") or "")
    screenshot(driver, "viewer-other-tenant-404.png")
    cookie = driver.get_cookie("cronlog_console")
    assert cookie is not None and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    with httpx.Client(base_url=base(api), cookies={"cronlog_console": cookie["value"]}) as c:
        assert c.get("/jobs/b-job").status_code == 404
        assert c.get("/jobs/console-view").status_code == 200
    with httpx.Client(base_url=base(api)) as anonymous:
        assert anonymous.get("/").headers["location"] == "/login"
        assert anonymous.get("/console/stream").status_code == 401
    click(driver, "form[action='/logout'] button")
    until(driver, lambda d: d.current_url == base(api) + "/login", 20, "signed out")
    driver.get(base(api) + "/workers")
    until(driver, lambda d: d.current_url == base(api) + "/login", 20, "signed out stays out")
