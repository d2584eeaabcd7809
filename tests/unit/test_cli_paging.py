"""``cronlog runs list``, ``jobs list`` and ``dead-letters list`` page through the real API app
(a read model fed RunEvents by hand): one page and how to continue, or ``--all``."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from services.api.readmodel.reader import ReadModel
from services.cli import client as client_module
from services.cli import main, runs_cmd
from services.cli.client import Answer, ApiClient
from tests.unit.rm_feed import dead_letter, register_for
from tests.unit.store_feed import JOB, fire_many, register

runner = CliRunner()


@pytest.fixture
def cli(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ApiClient the CLI makes talks to the in-process app through ``client``."""

    class Local(ApiClient):
        def __init__(self, *_args: Any, **_kw: Any) -> None:
            super().__init__("http://testserver")

        def _exchange(self, method: str, path: str, params: Any, body: Any) -> Answer:
            query = {k: v for k, v in (params or {}).items() if v is not None}
            r = client.request(method, path, params=query, json=body)
            return Answer(r.status_code, r.content, dict(r.headers))

    for module in (main, runs_cmd, client_module):
        monkeypatch.setattr(module, "ApiClient", Local)


def ids_of(output: str) -> list[str]:
    return [r.get("run_id") or r["job_id"] for r in json.loads(output)]


@pytest.mark.usefixtures("cli")
def test_runs_list_shows_one_page_says_how_to_continue_and_all_follows(rm: ReadModel) -> None:
    register(rm.store)
    expected = fire_many(rm, 12)
    first = runner.invoke(main.app, ["runs", "list", JOB, "--limit", "5", "-o", "json"])
    assert first.exit_code == 0, first.output
    assert ids_of(first.stdout) == expected[:5]
    hint = re.search(r"--cursor (\S+)", first.stderr)
    assert hint is not None
    second = runner.invoke(
        main.app, ["runs", "list", JOB, "--limit", "5", "--cursor", hint[1], "-o", "json"]
    )
    assert ids_of(second.stdout) == expected[5:10]
    every = runner.invoke(main.app, ["runs", "list", JOB, "--limit", "5", "--all", "-o", "json"])
    assert ids_of(every.stdout) == expected
    assert "--cursor" not in every.stderr
    bad = runner.invoke(main.app, ["runs", "list", JOB, "--cursor", "garbage!"])
    assert bad.exit_code == 1
    assert "cursor" in bad.stderr


@pytest.mark.usefixtures("cli")
def test_jobs_and_dead_letters_list_page_too(rm: ReadModel) -> None:
    names = [f"job-{i}" for i in range(5)]
    for name in names:
        register_for(rm, "default", name)
    one = runner.invoke(main.app, ["jobs", "list", "--limit", "2", "-o", "json"])
    assert ids_of(one.stdout) == names[:2]
    assert "cronlog jobs list --cursor" in one.stderr
    every = runner.invoke(main.app, ["jobs", "list", "--limit", "2", "--all", "-o", "json"])
    assert ids_of(every.stdout) == names
    letters = [dead_letter(rm, h, job_id="job-1") for h in range(3)]
    page = runner.invoke(main.app, ["dead-letters", "list", "--limit", "2", "-o", "json"])
    assert ids_of(page.stdout) == letters[::-1][:2]
    assert "--cursor" in page.stderr
    every = runner.invoke(main.app, ["dead-letters", "list", "--all", "--limit", "1", "-o", "json"])
    assert ids_of(every.stdout) == letters[::-1]
