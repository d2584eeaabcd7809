"""``cronlog schedule next`` (no broker, no API) and the CLI's ``jobs ticks`` / ``jobs skipped``,
run with typer's CliRunner."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from itertools import islice
from pathlib import Path
from typing import Any, ClassVar

import pytest
from typer.testing import CliRunner

from cronlog.schedule import cron_ticks
from services.cli import main
from services.cli.client import ApiClient

CASES_PATH = Path("/work/shared/cases/schedule-cases.json")
runner = CliRunner()


def next_ticks(*args: str) -> Any:
    result = runner.invoke(main.app, ["schedule", "next", *args, "-o", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def berlin(expression: str, *flags: str, count: int) -> Any:
    """``schedule next`` of ``expression`` in Europe/Berlin with ``flags``, ``count`` ticks."""
    return next_ticks("--cron", expression, "--tz", "Europe/Berlin", *flags, "--count", str(count))


def shared(case: dict[str, Any], flag: str) -> Any:
    """``schedule next`` of a shared case, its ``after`` passed as ``flag`` (after/before)."""
    count = str(len(case["expected_utc"]))
    where = ("--tz", case["tz"], flag, case["after"])
    return next_ticks("--cron", case["expr"], *where, "--count", count)


def utcs(ticks: list[dict[str, str]]) -> list[str]:
    """The UTC instants, as the shared cases write them (whole seconds, ``Z``)."""
    return [t["utc"].replace(".000Z", "Z") for t in ticks]


def _cases(kind: str) -> list[Any]:
    if not CASES_PATH.exists():
        return []
    cases = json.loads(CASES_PATH.read_text())["cases"]
    return [pytest.param(c, id=c["id"]) for c in cases if c["type"] == kind]


@pytest.mark.parametrize("case", _cases("ticks"))
def test_shared_tick_cases(case: dict[str, Any]) -> None:
    ticks = shared(case, "--after")
    assert utcs(ticks) == case["expected_utc"]


@pytest.mark.parametrize("case", _cases("prev_ticks"))
def test_shared_prev_tick_cases(case: dict[str, Any]) -> None:
    ticks = shared(case, "--before")
    assert utcs(ticks) == case["expected_utc"]


def test_berlin_spring_gap_shift_shows_local_wall_time_with_offset() -> None:
    ticks = berlin("30 2 * * *", "--after", "2024-03-29T12:00:00Z", count=3)
    assert ticks == [
        {"utc": "2024-03-30T01:30:00.000Z", "local": "2024-03-30T02:30:00.000+01:00"},
        {"utc": "2024-03-31T01:00:00.000Z", "local": "2024-03-31T03:00:00.000+02:00"},
        {"utc": "2024-04-01T00:30:00.000Z", "local": "2024-04-01T02:30:00.000+02:00"},
    ]


def test_berlin_spring_gap_skip() -> None:
    ticks = berlin("30 2 * * *", "--dst-gap", "skip", "--after", "2024-03-29T12:00:00Z", count=2)
    assert utcs(ticks) == ["2024-03-30T01:30:00Z", "2024-04-01T00:30:00Z"]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("first", ["2024-10-27T00:30:00Z", "2024-10-28T01:30:00Z"]),
        ("last", ["2024-10-27T01:30:00Z", "2024-10-28T01:30:00Z"]),
        ("both", ["2024-10-27T00:30:00Z", "2024-10-27T01:30:00Z"]),
    ],
)
def test_berlin_fall_back_overlap_policies(policy: str, expected: list[str]) -> None:
    after = ("--after", "2024-10-26T12:00:00Z")
    ticks = berlin("30 2 * * *", "--dst-overlap", policy, *after, count=2)
    assert utcs(ticks) == expected


def test_wildcard_job_fires_both_passes_and_nothing_in_the_gap() -> None:
    fall = berlin("*/30 2 * * *", "--after", "2024-10-26T12:00:00Z", count=4)
    assert fall == [
        {"utc": "2024-10-27T00:00:00.000Z", "local": "2024-10-27T02:00:00.000+02:00"},
        {"utc": "2024-10-27T00:30:00.000Z", "local": "2024-10-27T02:30:00.000+02:00"},
        {"utc": "2024-10-27T01:00:00.000Z", "local": "2024-10-27T02:00:00.000+01:00"},
        {"utc": "2024-10-27T01:30:00.000Z", "local": "2024-10-27T02:30:00.000+01:00"},
    ]
    spring = berlin("*/30 2 * * *", "--after", "2024-03-30T12:00:00Z", count=1)
    assert utcs(spring) == ["2024-04-01T00:00:00Z"]


def test_before_lists_latest_first_and_matches_after_reversed() -> None:
    before = berlin("30 2 * * *", "--before", "2024-04-01T12:00:00+02:00", count=3)
    after = berlin("30 2 * * *", "--after", "2024-03-29T12:00:00Z", count=3)
    assert before == list(reversed(after))


def test_six_fields_are_seconds_first_and_default_count_is_10() -> None:
    ticks = next_ticks("--cron", "*/10 * * * * *", "--after", "2026-01-01T00:00:00Z")
    assert len(ticks) == 10
    assert utcs(ticks)[:2] == ["2026-01-01T00:00:10Z", "2026-01-01T00:00:20Z"]


def test_after_defaults_to_now() -> None:
    before = datetime.now(UTC)
    ticks = next_ticks("--cron", "* * * * * *", "--count", "1")
    first = datetime.fromisoformat(ticks[0]["utc"])
    assert before - timedelta(seconds=1) < first <= datetime.now(UTC) + timedelta(seconds=2)


def test_job_id_is_what_h_hashes() -> None:
    after = datetime(2026, 1, 1, tzinfo=UTC)
    for job_id in ("alpha", "beta"):
        ticks = next_ticks(
            "--cron",
            "H H * * *",
            "--job-id",
            job_id,
            "--after",
            "2026-01-01T00:00:00Z",
            "--count",
            "2",
        )
        expected = list(islice(cron_ticks("H H * * *", "UTC", after, hash_id=job_id), 2))
        assert [datetime.fromisoformat(t["utc"]) for t in ticks] == expected
    seeded = next_ticks("--cron", "H H * * *", "--after", "2026-01-01T00:00:00Z", "--count", "1")
    fixed = next(cron_ticks("H H * * *", "UTC", after))
    assert datetime.fromisoformat(seeded[0]["utc"]) == fixed


def test_table_output_shows_utc_and_local() -> None:
    result = runner.invoke(
        main.app,
        [
            "schedule",
            "next",
            "--cron",
            "30 2 * * *",
            "--tz",
            "Europe/Berlin",
            "--after",
            "2024-03-29T12:00:00Z",
            "--count",
            "2",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "2024-03-31T01:00:00.000Z" in result.stdout
    assert "2024-03-31 03:00:00" in result.stdout and "+0200" in result.stdout


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--cron", "30 25 * * *"], ["schedule.expression", "hour", "'25'"]),
        (["--cron", "0 0 32W * *"], ["schedule.expression", "day_of_month"]),
        (["--cron", "* * * * * * *"], ["schedule.expression", "7 fields"]),
        (["--cron", "0 0 30 2 *"], ["schedule.expression", "day_of_month"]),
        (
            ["--cron", "0 * * * *", "--tz", "Mars/Olympus_Mons"],
            ["schedule.timezone", "Mars/Olympus_Mons"],
        ),
        (["--cron", "0 * * * *", "--after", "2024-03-01T12:00:00"], ["--after", "no zone"]),
        (["--cron", "0 * * * *", "--before", "soon"], ["--before", "not an ISO-8601"]),
        (
            [
                "--cron",
                "0 * * * *",
                "--before",
                "2024-03-01T12:00:00Z",
                "--after",
                "2024-03-01T12:00:00Z",
            ],
            ["--after or --before"],
        ),
    ],
)
def test_bad_input_exits_2_naming_the_field(args: list[str], names: list[str]) -> None:
    result = runner.invoke(main.app, ["schedule", "next", *args])
    assert result.exit_code == 2, result.output
    message = " ".join(result.stderr.split())
    for name in names:
        assert name in message, message
    assert result.stdout == ""


def test_bad_policy_value_is_a_usage_error() -> None:
    result = runner.invoke(
        main.app, ["schedule", "next", "--cron", "* * * * *", "--dst-gap", "later"]
    )
    assert result.exit_code == 2


class FakeApi:
    """Stands in for the HTTP client: records the calls, answers canned JSON."""

    calls: ClassVar[list[tuple[str, tuple[Any, ...]]]] = []

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url

    def ticks(self, job_id: str, count: int, after: str | None) -> dict[str, Any]:
        self.calls.append(("ticks", (job_id, count, after)))
        return {
            "job_id": job_id,
            "ticks": [
                {"utc": "2024-03-31T01:00:00.000Z", "local": "2024-03-31T03:00:00.000+02:00"}
            ],
        }

    def skipped(self, job_id: str, limit: int) -> list[dict[str, Any]]:
        self.calls.append(("skipped", (job_id, limit)))
        return [
            {
                "scheduled_for": "2024-03-31T01:00:00.000Z",
                "reason": "max_active_runs",
                "at": "2024-03-31T01:00:00.010Z",
            }
        ]


@pytest.fixture
def fake_api(monkeypatch: pytest.MonkeyPatch) -> type[FakeApi]:
    FakeApi.calls = []
    monkeypatch.setattr(main, "ApiClient", FakeApi)
    return FakeApi


def test_jobs_ticks_calls_the_preview_endpoint(fake_api: type[FakeApi]) -> None:
    result = runner.invoke(main.app, ["jobs", "ticks", "nightly", "--count", "5", "-o", "json"])
    assert result.exit_code == 0, result.output
    assert fake_api.calls == [("ticks", ("nightly", 5, None))]
    assert json.loads(result.stdout) == [
        {"utc": "2024-03-31T01:00:00.000Z", "local": "2024-03-31T03:00:00.000+02:00"}
    ]
    table = runner.invoke(main.app, ["jobs", "ticks", "nightly"])
    assert table.exit_code == 0 and "2024-03-31 03:00:00" in table.stdout


def test_jobs_skipped_lists_reasons(fake_api: type[FakeApi]) -> None:
    result = runner.invoke(main.app, ["jobs", "skipped", "nightly", "-o", "json"])
    assert result.exit_code == 0, result.output
    assert fake_api.calls == [("skipped", ("nightly", 100))]
    assert json.loads(result.stdout)[0]["reason"] == "max_active_runs"
    table = runner.invoke(main.app, ["jobs", "skipped", "nightly"])
    assert table.exit_code == 0 and "max_active_runs" in table.stdout


def test_client_builds_the_preview_and_skipped_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, str, dict[str, Any]]] = []

    def request(self: ApiClient, method: str, path: str, **kwargs: Any) -> Any:
        seen.append((method, path, kwargs))
        return {"job_id": "j", "ticks": [], "skipped": []}

    monkeypatch.setattr(ApiClient, "request", request)
    client = ApiClient("http://api.invalid")
    client.ticks("j", 3, "2024-01-01T00:00:00Z")
    client.ticks("j")
    client.skipped("j", 7)
    assert seen == [
        ("GET", "/api/v1/jobs/j/ticks", {"params": {"count": 3, "after": "2024-01-01T00:00:00Z"}}),
        ("GET", "/api/v1/jobs/j/ticks", {"params": {"count": 10}}),
        ("GET", "/api/v1/jobs/j/skipped", {"params": {"limit": 7}}),
    ]
