"""DAG jobs through the API against a real broker, scheduler and worker: a downstream task is
claimed only after its upstream succeeded; a failed upstream leaves all_success tasks
upstream_failed and never claimed; an all_done join runs after a failed branch; cycles and
unknown dependencies are a 422 naming them."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from cronlog import events as ev
from tests.integration.harness import EventLog

pytestmark = pytest.mark.broker

TERMINAL = {"succeeded", "failed", "cancelled"}


def stamp(out: Path, exit_code: int = 0, sleep_s: float = 0.2) -> str:
    """A shell task appending ``<task> start <epoch s>`` / ``<task> end <epoch s>`` to ``out``."""
    return (
        f'echo "$CRONLOG_TASK start $(date +%s.%N)" >> {out}; sleep {sleep_s}; '
        f'echo "$CRONLOG_TASK end $(date +%s.%N)" >> {out}; exit {exit_code}'
    )


def task(name: str, shell: str, *depends_on: str, rule: str = "all_success") -> dict[str, Any]:
    return {
        "name": name,
        "kind": "shell",
        "shell": shell,
        "depends_on": list(depends_on),
        "trigger_rule": rule,
    }


def run_job(
    api: httpx.Client, job_id: str, tasks: list[dict[str, Any]], timeout: float = 90
) -> dict[str, Any]:
    """Register a manual DAG job, trigger it, and return its run once terminal."""
    created = api.post(
        "/api/v1/jobs",
        json={"job_id": job_id, "name": job_id, "schedule": {"type": "manual"}, "tasks": tasks},
    )
    assert created.status_code == 201, created.text
    trig = api.post(f"/api/v1/jobs/{job_id}/trigger")
    assert trig.status_code in (200, 201, 202), trig.text
    run_id = trig.json()["run_id"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = api.get(f"/api/v1/runs/{run_id}")
        if r.status_code == 200 and r.json()["state"] in TERMINAL:
            return dict(r.json())
        time.sleep(0.3)
    raise AssertionError(f"run {run_id} not finished after {timeout}s: {r.text}")


def lines(out: Path) -> list[tuple[str, str, float]]:
    """The stamp lines, in file order: (task, start|end, epoch seconds)."""
    return [
        (t, what, float(s))
        for t, what, s in (line.split() for line in out.read_text().splitlines())
    ]


def instants(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {ti["task"]: ti for ti in run["task_instances"]}


def at(value: str) -> datetime:
    return datetime.fromisoformat(value)


def claims(events: EventLog, job_id: str) -> dict[str, list[ev.RunEvent]]:
    out: dict[str, list[ev.RunEvent]] = {}
    for e in events.of_type(ev.TaskClaimed, job_id):
        out.setdefault(e.event.task, []).append(e)
    return out


def wait_run_end(events: EventLog, job_id: str) -> None:
    assert events.wait_until(lambda log: log.of_type(ev.RunSucceeded | ev.RunFailed, job_id), 30)


def test_chain_runs_each_task_after_its_upstream_succeeded(
    api: httpx.Client, events: EventLog, tmp_path: Path
) -> None:
    out = tmp_path / "etl.txt"
    run = run_job(
        api,
        "etl",
        [
            task("extract", stamp(out)),
            task("transform", stamp(out), "extract"),
            task("load", stamp(out), "transform"),
        ],
    )
    assert run["state"] == "succeeded"
    tis = instants(run)
    assert [ti["task"] for ti in run["task_instances"]] == ["extract", "transform", "load"]
    assert {t: ti["state"] for t, ti in tis.items()} == dict.fromkeys(tis, "succeeded")
    assert [(t, what) for t, what, _ in lines(out)] == [
        ("extract", "start"),
        ("extract", "end"),
        ("transform", "start"),
        ("transform", "end"),
        ("load", "start"),
        ("load", "end"),
    ]
    # The read model: each downstream claim after its upstream's finish.
    assert at(tis["transform"]["claimed_at"]) >= at(tis["extract"]["finished_at"])
    assert at(tis["load"]["claimed_at"]) >= at(tis["transform"]["finished_at"])
    # The log itself: the first TaskClaimed of transform comes after TaskSucceeded of extract.
    wait_run_end(events, "etl")
    kinds = [(type(e.event).__name__, getattr(e.event, "task", None)) for e in events.events("etl")]
    assert kinds.index(("TaskClaimed", "transform")) > kinds.index(("TaskSucceeded", "extract"))
    assert kinds.index(("TaskClaimed", "load")) > kinds.index(("TaskSucceeded", "transform"))
    extract_done = events.of_type(ev.TaskSucceeded, "etl")[0].event
    assert extract_done.task == "extract"
    assert claims(events, "etl")["transform"][0].at >= extract_done.finished_at


def test_failed_root_leaves_downstream_upstream_failed_and_never_claimed(
    api: httpx.Client, events: EventLog, tmp_path: Path
) -> None:
    out = tmp_path / "etl.txt"
    run = run_job(
        api,
        "etl-broken",
        [
            {**task("extract", stamp(out, exit_code=1)), "retry_policy": {"max_attempts": 1}},
            task("transform", stamp(out), "extract"),
            task("load", stamp(out), "transform"),
        ],
    )
    assert run["state"] == "failed"
    assert [(ti["task"], ti["state"], ti["worker_id"]) for ti in run["task_instances"]][1:] == [
        ("transform", "upstream_failed", None),
        ("load", "upstream_failed", None),
    ]
    assert instants(run)["extract"]["state"] == "failed"
    assert {t for t, _, _ in lines(out)} == {"extract"}
    wait_run_end(events, "etl-broken")
    assert set(claims(events, "etl-broken")) == {"extract"}
    assert [e.event.task for e in events.of_type(ev.TaskUpstreamFailed, "etl-broken")] == [
        "transform",
        "load",
    ]


def diamond(out: Path, d_rule: str) -> list[dict[str, Any]]:
    return [
        task("a", stamp(out)),
        task("b", stamp(out, exit_code=1, sleep_s=0.1), "a"),
        task("c", stamp(out, sleep_s=1.0), "a"),
        task("d", stamp(out), "b", "c", rule=d_rule),
    ]


def test_all_done_join_runs_after_a_failed_branch_and_all_success_does_not(
    api: httpx.Client, events: EventLog, tmp_path: Path
) -> None:
    out = tmp_path / "all_done.txt"
    run = run_job(api, "diamond-all-done", diamond(out, "all_done"))
    assert run["state"] == "failed"  # b failed, whatever d did
    tis = instants(run)
    assert [tis[t]["state"] for t in "abcd"] == ["succeeded", "failed", "succeeded", "succeeded"]
    assert tis["d"]["trigger_rule"] == "all_done"
    ends = {t: s for t, what, s in lines(out) if what == "end"}
    d_start = next(s for t, what, s in lines(out) if t == "d" and what == "start")
    assert d_start >= max(ends["b"], ends["c"])
    assert at(tis["d"]["claimed_at"]) >= max(
        at(tis["b"]["finished_at"]), at(tis["c"]["finished_at"])
    )

    out2 = tmp_path / "all_success.txt"
    run = run_job(api, "diamond-all-success", diamond(out2, "all_success"))
    assert run["state"] == "failed"
    tis = instants(run)
    assert [tis[t]["state"] for t in "abcd"] == [
        "succeeded",
        "failed",
        "succeeded",
        "upstream_failed",
    ]
    assert "d" not in {t for t, _, _ in lines(out2)}
    wait_run_end(events, "diamond-all-success")
    assert "d" not in claims(events, "diamond-all-success")


def test_a_cycle_or_an_unknown_dependency_is_422_naming_it(api: httpx.Client) -> None:
    def post(tasks: list[dict[str, Any]]) -> httpx.Response:
        return api.post(
            "/api/v1/jobs",
            json={
                "job_id": "bad-dag",
                "name": "bad",
                "schedule": {"type": "manual"},
                "tasks": tasks,
            },
        )

    cycle = post([task("a", "true", "c"), task("b", "true", "a"), task("c", "true", "b")])
    assert cycle.status_code == 422, cycle.text
    text = str(cycle.json())
    assert "cycle" in text
    assert any(path in text for path in ("a → c → b → a", "b → a → c → b", "c → b → a → c"))
    unknown = post([task("a", "true"), task("b", "true", "a", "nope")])
    assert unknown.status_code == 422, unknown.text
    assert "nope" in str(unknown.json()) and "depends_on" in str(unknown.json())
    assert api.get("/api/v1/jobs/bad-dag").status_code == 404


def test_rerun_of_a_failed_middle_task_with_downstream_reruns_it_and_the_run_succeeds(
    api: httpx.Client, events: EventLog, tmp_path: Path
) -> None:
    out, fixed = tmp_path / "stamps", tmp_path / "fixed"
    flaky = f"[ -e {fixed} ] || {{ echo broken >&2; exit 5; }}; {stamp(out)}"
    run = run_job(
        api,
        "rerun-etl",
        [
            task("extract", stamp(out)),
            task("transform", flaky, "extract"),
            task("load", stamp(out), "transform"),
        ],
    )
    assert run["state"] == "failed"
    assert {t: ti["state"] for t, ti in instants(run).items()} == {
        "extract": "succeeded",
        "transform": "failed",
        "load": "upstream_failed",
    }

    fixed.touch()
    answer = api.post(
        f"/api/v1/runs/{run['run_id']}/tasks/transform/retry", json={"downstream": True}
    )
    assert answer.status_code == 200, answer.text
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        run = api.get(f"/api/v1/runs/{run['run_id']}").json()
        if run["state"] in TERMINAL:
            break
        time.sleep(0.3)
    assert run["state"] == "succeeded", run
    assert len(run["reopened_at"]) == 1
    tis = instants(run)
    assert {t: (ti["state"], ti["attempt"]) for t, ti in tis.items()} == {
        "extract": ("succeeded", 1),
        "transform": ("succeeded", 2),
        "load": ("succeeded", 1),
    }
    assert [t for t, what, _ in lines(out) if what == "end"] == ["extract", "transform", "load"]
    # the old attempt stays in the history; extract ran once
    assert [
        (a["task"], a["attempt"], a["state"]) for a in run["attempts"] if a["task"] == "transform"
    ] == [("transform", 1, "failed"), ("transform", 2, "succeeded")]
    assert [t for t, what, _ in lines(out) if what == "start"].count("extract") == 1
    assert events.wait_until(lambda log: len(log.of_type(ev.RunSucceeded, "rerun-etl")) == 1, 20)
    assert len(events.of_type(ev.RunFailed, "rerun-etl")) == 1  # the first end stays on the log
    again = api.post(f"/api/v1/runs/{run['run_id']}/tasks/nope/retry", json={})
    assert again.status_code == 404
