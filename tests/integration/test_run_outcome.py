"""The first hour with cronlog (issue 24), against a real broker, scheduler, worker and API,
and the console in a real Chromium: one cluster for the whole story, since each costs a start.

A DAG whose middle task fails (exit 5) and whose ``all_done`` cleanup succeeds after it is
summarised by the failing task (item 1) in the API's run, ``cronlog runs``, ``cronlog run`` and
the console's run page; the failed task is rerun with its downstream from the console (item 2);
and the console's small ones (item 6): a task that never ran shows no attempt and its label
fits its box, times are relative with UTC on hover, an attempt's log has a way back, the
dead-letter page filters by job and shows the output tail, an unknown run's page has a title,
a paused job shows no next ticks, and a one-off job whose only run ended says ``done``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.integration.browser import base, click, css, screenshot, sign_in, text, until
from tests.integration.harness import Cluster
from tests.integration.helpers import wait_for

pytestmark = pytest.mark.broker
JOB = "etl-outcome"
TASKS = [
    {"name": "extract", "kind": "shell", "shell": "echo extracted"},
    {
        "name": "transform",
        "kind": "shell",
        "shell": "echo transform broke on row 7; exit 5",
        "depends_on": ["extract"],
        "retry_policy": {"max_attempts": 1},
    },
    {"name": "publish", "command": ["true"], "depends_on": ["transform"]},
    {
        "name": "cleanup",
        "kind": "shell",
        "shell": "echo cleaned up",
        "depends_on": ["transform"],
        "trigger_rule": "all_done",
    },
]


def cli(api: httpx.Client, *args: str) -> str:
    """``cronlog ARGS --api URL``'s stdout (not a terminal: a wide table, no colour)."""
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "services.cli", *args, "--api", str(api.base_url)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def ended_run(api: httpx.Client, run_id: str, after: int = 0) -> dict[str, Any]:
    """The run once it ended (``after``: once reopened that many times and ended again)."""

    def probe() -> dict[str, Any] | None:
        run = api.get(f"/api/v1/runs/{run_id}").json()
        done = run.get("state") in ("succeeded", "failed") and len(run["reopened_at"]) >= after
        return dict(run) if done else None

    return wait_for(probe, 90, f"run {run_id} ended")


def attempts(run: dict[str, Any]) -> dict[str, tuple[str, int]]:
    return {ti["task"]: (ti["state"], ti["attempt"]) for ti in run["task_instances"]}


def test_a_failed_dag_run_names_its_failing_task_everywhere_and_reruns_downstream(
    api: httpx.Client, cluster: Cluster, driver: WebDriver
) -> None:
    body = {"job_id": JOB, "name": "etl", "schedule": {"type": "manual"}, "tasks": TASKS}
    assert api.post("/api/v1/jobs", json=body).status_code == 201
    run_id = api.post(f"/api/v1/jobs/{JOB}/trigger").json()["run_id"]
    run = ended_run(api, run_id)

    # item 1: the API's summary, then the CLI's two views
    assert run["state"] == "failed"
    assert attempts(run) == {
        "extract": ("succeeded", 1),
        "transform": ("failed", 1),
        "publish": ("upstream_failed", 1),
        "cleanup": ("succeeded", 1),
    }
    assert (run["decided_by"], run["exit_code"], run["failure_kind"]) == (
        "transform",
        5,
        "nonzero_exit",
    )
    assert run["output_tail"] == "transform broke on row 7\n"
    assert run["ready_at"] <= run["claimed_at"] <= run["started_at"] <= run["finished_at"]
    row = next(ln for ln in cli(api, "runs", JOB).splitlines() if run_id in ln)
    assert "failed" in row and "5 transform" in row, row
    shown = cli(api, "run", run_id)
    assert "decided by" in shown and "transform broke on row 7" in shown, shown
    fields = {
        ln.split("│")[1].strip(): ln.split("│")[2].strip()
        for ln in shown.splitlines()
        if ln.count("│") >= 3
    }
    assert (fields["decided by"], fields["exit_code"], fields["failure_kind"]) == (
        "transform",
        "5",
        "nonzero_exit",
    ), fields

    # item 1 in the console; item 6: labels, attempts of tasks that never ran, times
    sign_in(driver, api, cluster.token())
    driver.get(f"{base(api)}/runs/{run_id}")
    outcome = until(driver, lambda d: text(d, "#run-outcome"), 20, "the run's outcome")
    assert outcome == "transform · exit 5 · nonzero_exit", outcome
    assert (text(driver, "#run-output") or "").strip() == "transform broke on row 7"
    assert "failed by" in (text(driver, "#run-summary") or "")
    labels = node_labels(driver)
    assert labels["publish"]["detail"] == "upstream failed", labels
    assert labels["transform"]["detail"] == "failed · attempt 1", labels
    assert all(n["width"] <= n["box"] - 8 for n in labels.values()), labels
    assert text(driver, 'tr[data-task="publish"] td:nth-child(3)') == "—"
    finished = driver.find_element(By.CSS_SELECTOR, "#run-finished time")
    assert finished.text.endswith(" ago") or finished.text == "now", finished.text
    assert finished.get_attribute("title").endswith(
        datetime.fromisoformat(run["finished_at"]).strftime("%Y-%m-%d %H:%M:%S UTC")
    )
    screenshot(driver, "run-failed-by-transform.png")

    # item 6: an attempt's log is a page with a way back
    click(driver, '#attempts a[href$="/tasks/transform/attempts/1/log"]')
    until(driver, lambda d: "transform broke" in (text(d, "#log-text") or ""), 30, "the log")
    click(driver, "#back")
    until(driver, lambda d: d.current_url.split("#")[0].endswith(f"/runs/{run_id}"), 20, "back")

    # item 2: Rerun with downstream, from the run page: transform and what follows run again
    click(driver, 'tr[data-task="transform"] button.rerun-downstream')
    rerun = ended_run(api, run_id, after=1)
    again = attempts(rerun)
    assert {t: again[t] for t in ("extract", "transform", "cleanup")} == {
        "extract": ("succeeded", 1),
        "transform": ("failed", 2),
        "cleanup": ("succeeded", 2),
    }
    assert again["publish"][0] == "upstream_failed"
    assert (rerun["decided_by"], rerun["exit_code"]) == ("transform", 5)

    # item 2 and 6 on the dead-letter page: filter by job, output tail, rerun offered
    driver.get(f"{base(api)}/dead-letters?job_id={JOB}")
    row_css = f'tr[data-run="{run_id}"][data-task="transform"]'
    until(driver, lambda d: text(d, row_css), 20, "the dead letter")
    assert "transform broke on row 7" in (text(driver, f"{row_css} td.tail summary") or "")
    assert css(driver, f"{row_css} button.rerun-downstream") and css(driver, "#replay-all")
    assert driver.find_element(By.ID, "dl-job").get_attribute("value") == JOB
    screenshot(driver, "dead-letters-of-a-job.png")

    # item 6: an unknown run's page has a title
    driver.get(f"{base(api)}/runs/r-nope")
    assert driver.title.startswith("404 · "), driver.title
    paused_and_done(api, driver)


def node_labels(driver: WebDriver) -> dict[str, dict[str, Any]]:
    """Each DAG node's second line, its drawn width and its box's width, in pixels."""
    got = driver.execute_script(
        "return Array.from(document.querySelectorAll('svg#dag g.node')).map(n => {"
        " const t = n.querySelector('text.detail');"
        " return [n.dataset.task, t.textContent, t.getComputedTextLength(),"
        " n.querySelector('rect').width.baseVal.value]; });"
    )
    return {task: {"detail": d, "width": w, "box": b} for task, d, w, b in got}


def paused_and_done(api: httpx.Client, driver: WebDriver) -> None:
    """A paused job's page lists no next ticks; a one-off job whose run ended is ``done``."""
    every = {"job_id": "every-5", "name": "every 5 s", "command": ["true"]}
    every["schedule"] = {"type": "cron", "expression": "*/5 * * * * *"}
    assert api.post("/api/v1/jobs", json=every).status_code == 201
    assert api.patch("/api/v1/jobs/every-5", json={"paused": True}).status_code == 200
    driver.get(f"{base(api)}/jobs/every-5")
    ticks = until(driver, lambda d: text(d, "#next-ticks"), 20, "next ticks")
    assert "paused" in ticks and not css(driver, "#next-ticks time"), ticks
    run_at = (datetime.now(UTC) + timedelta(seconds=2)).isoformat()
    once = {"job_id": "once", "name": "once", "command": ["true"]}
    once["schedule"] = {"type": "once", "run_at": run_at}
    assert api.post("/api/v1/jobs", json=once).status_code == 201
    wait_for(lambda: api.get("/api/v1/jobs/once").json()["status"] == "done" or None, 60, "done")
    assert api.get("/api/v1/jobs", params={"status": "done"}).json()["jobs"][0]["job_id"] == "once"
    driver.get(f"{base(api)}/jobs/once")
    assert until(driver, lambda d: text(d, "#job-status"), 20, "status") == "done"
