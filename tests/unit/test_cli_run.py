"""``cronlog run RUN_ID`` shows a DAG run's task instances, run with typer's CliRunner against a
client that answers canned JSON."""

from __future__ import annotations

import json
from typing import Any, ClassVar

import pytest
from typer.testing import CliRunner

from services.cli import main, runs_cmd
from services.cli.client import ApiError

runner = CliRunner()


def ti(task: str, state: str, **kw: Any) -> dict[str, Any]:
    return {
        "task": task,
        "state": state,
        "attempt": 1,
        "epoch": None,
        "worker_id": None,
        "ready_at": None,
        "started_at": None,
        "finished_at": None,
        "exit_code": None,
        "failure_kind": None,
        **kw,
    }


RUN = {
    "run_id": "r-diamond",
    "job_id": "diamond",
    "job_name": "diamond",
    "trigger": "manual",
    "state": "running",
    "scheduled_for": "2026-03-01T12:00:00.000Z",
    "attempt": 1,
    "epoch": 1,
    "claimed_by": "w1",
    "exit_code": 7,
    "failure_kind": "nonzero_exit",
    "output_tail": "b broke",
    "decided_by": "b",
    "task_instances": [
        ti(
            "a",
            "succeeded",
            worker_id="w1",
            started_at="2026-03-01T12:00:00.100Z",
            finished_at="2026-03-01T12:00:01.350Z",
        ),
        ti("b", "failed", worker_id="w2", attempt=2),
        ti("c", "running", worker_id="w1"),
        ti("d", "pending"),
    ],
}
TASKS = [
    {"name": "a", "depends_on": []},
    {"name": "b", "depends_on": ["a"]},
    {"name": "c", "depends_on": ["a"]},
    {"name": "d", "depends_on": ["b", "c"]},
]


class FakeApi:
    """Stands in for the HTTP client: answers the run and its job (or no job)."""

    job_missing: ClassVar[bool] = False

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url

    def run(self, run_id: str) -> dict[str, Any]:
        assert run_id == RUN["run_id"]
        return RUN

    def job(self, job_id: str) -> dict[str, Any]:
        if self.job_missing:
            raise ApiError(404, f"no job {job_id}")
        return {"job_id": job_id, "tasks": TASKS}


@pytest.fixture
def fake_api(monkeypatch: pytest.MonkeyPatch) -> type[FakeApi]:
    FakeApi.job_missing = False
    monkeypatch.setattr(runs_cmd, "ApiClient", FakeApi)
    return FakeApi


def rows(output: str) -> dict[str, list[str]]:
    """The task table's rows by task name: the cells between the box-drawing bars."""
    found = {}
    for line in output.splitlines():
        cells = [c.strip() for c in line.strip("│┃ ").split("│")]
        if len(cells) == 6 and cells[0] in "abcd" and cells[0]:
            found[cells[0]] = cells
    return found


def test_run_lists_each_task_with_its_dependencies_state_attempt_worker_duration(
    fake_api: type[FakeApi],
) -> None:
    result = runner.invoke(main.app, ["run", "r-diamond"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    table = rows(result.stdout)
    assert list(table) == ["a", "b", "c", "d"]
    assert table["a"] == ["a", "-", "succeeded", "1", "w1", "1.250s"]
    assert table["b"] == ["b", "a", "failed", "2", "w2", "-"]
    assert table["d"][1:4] == ["b, c", "pending", "-"]  # it never ran: no attempt to show
    assert "│ decided by       │ b" in result.stdout and "│ b broke" in result.stdout
    first_cells = [
        line.split("│")[1].rstrip() for line in result.stdout.splitlines() if line.count("│") == 7
    ]
    assert first_cells == [" a", "   b", "   c", "     d"]  # two spaces per level of depth


def test_run_still_shows_tasks_when_the_job_cannot_be_read(fake_api: type[FakeApi]) -> None:
    fake_api.job_missing = True
    result = runner.invoke(main.app, ["run", "r-diamond"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert rows(result.stdout)["d"][:3] == ["d", "-", "pending"]


def test_run_json_is_the_api_document(fake_api: type[FakeApi]) -> None:
    result = runner.invoke(main.app, ["run", "r-diamond", "-o", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["task_instances"][3]["state"] == "pending"


def test_a_tenant_shows_as_a_table_of_fields() -> None:
    from rich.console import Console

    from services.cli.render import fields_table

    answer = {"tenant": "team-a", "slots_held": 2, "quota": {"max_jobs": 10, "x": None}}
    console = Console(record=True, width=100)
    console.print(fields_table(answer, "tenant team-a"))
    text = console.export_text()
    assert "slots held" in text and "max_jobs=10" in text and "team-a" in text
