"""``cronlog history query`` without a broker (``--archive-only``): output formats and errors."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from services.cli.main import app

runner = CliRunner()


def test_an_empty_archive_answers_zero_rows_and_is_not_created(tmp_path: Path) -> None:
    dest = tmp_path / "none-yet"
    done = runner.invoke(
        app,
        [
            "history",
            "query",
            "SELECT count(*) AS n FROM run_events",
            "--json",
            "--archive-only",
            "--dest",
            str(dest),
        ],
    )
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout) == [{"n": 0}]
    assert not dest.exists()


def test_the_views_have_the_archive_columns(tmp_path: Path) -> None:
    done = runner.invoke(
        app,
        [
            "history",
            "query",
            "SELECT column_name FROM (DESCRIBE run_events)",
            "--csv",
            "--archive-only",
            "--dest",
            str(tmp_path),
        ],
    )
    assert done.exit_code == 0, done.output
    assert done.stdout.split() == [
        "column_name",
        "event_id",
        "event_type",
        "job_id",
        "run_id",
        "tenant",
        "task",
        "attempt",
        "state",
        "scheduled_for",
        "at",
        "idem_key",
        "index",
        "partition",
        "offset",
        "day",
        "event_json",
        "record",
        "source",
    ]


def test_invalid_sql_and_clashing_formats_exit_2_naming_the_problem(tmp_path: Path) -> None:
    bad = runner.invoke(
        app, ["history", "query", "SELEC 1", "--archive-only", "--dest", str(tmp_path)]
    )
    assert bad.exit_code == 2 and "SQL:" in bad.stderr
    both = runner.invoke(
        app, ["history", "query", "SELECT 1", "--json", "--csv", "--dest", str(tmp_path)]
    )
    assert both.exit_code == 2 and "exclude each other" in both.stderr
    nobucket = runner.invoke(app, ["history", "query", "SELECT 1", "--dest", "s3://"])
    assert nobucket.exit_code == 2 and "archive_dest" in nobucket.stderr
