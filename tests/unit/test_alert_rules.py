"""The alerting rules, scrape config and Grafana dashboard under ops/ are valid and consistent.

promtool (Debian's ``prometheus`` package) checks and unit-tests the rules and parses the
dashboard's queries; the rest checks that every runbook exists and names only real CLI
commands, and that every metric used is one the processes export (ops/prometheus/README.md's
table) and every one of those is on the dashboard.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

from services.cli.main import app
from services.cli.runs_cmd import RunsGroup

ROOT = Path(__file__).resolve().parents[2]
PROM = ROOT / "ops" / "prometheus"
ALERTS = PROM / "alerts.yml"
DASHBOARD = ROOT / "ops" / "grafana" / "cronlog.json"
RUNBOOKS = ROOT / "docs" / "runbooks"
RUNBOOK_URL = re.compile(r"^https://github\.com/cronlog/cronlog/blob/main/(docs/runbooks/\w+\.md)$")
METRIC = re.compile(r"\bcronlog_[a-z0-9_]+")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
ALERT_NAMES = (
    "CronlogCriticalScheduleMissed",
    "CronlogScheduleMissed",
    "CronlogRunOverrunning",
    "CronlogLeaseReclaimSpike",
    "CronlogOwnershipChurn",
    "CronlogDagStalled",
    "CronlogDeadLetters",
    "CronlogJobSuspended",
    "CronlogConsumerLagGrowing",
    "CronlogNoScheduler",
)


def _promtool() -> str:
    path = shutil.which("promtool") or "/usr/bin/promtool"
    if not Path(path).is_file():
        pytest.fail(
            "promtool not found: install Debian's `prometheus` package "
            "(apt-get install prometheus), which provides /usr/bin/promtool"
        )
    return path


def _run_promtool(*args: str) -> None:
    result = subprocess.run(
        [_promtool(), *args], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, (
        f"promtool {' '.join(args)} exited {result.returncode}:\n{result.stdout}{result.stderr}"
    )


def _rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(ALERTS.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def _dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def _panel_exprs() -> dict[str, list[str]]:
    """Each non-row panel's title → the exprs of its targets."""
    return {
        panel["title"]: [t.get("expr", "") for t in panel.get("targets", [])]
        for panel in _dashboard()["panels"]
        if panel["type"] != "row"
    }


def _contract_series() -> set[str]:
    """The series names in the first column of ops/prometheus/README.md's table."""
    rows = re.findall(
        r"^\| `(cronlog_[a-z0-9_]+)` \| (\w+) \|", (PROM / "README.md").read_text(), re.M
    )
    names = set()
    for name, kind in rows:
        names.add(name)
        if kind == "histogram":
            names.update(name + suffix for suffix in HISTOGRAM_SUFFIXES)
    return names


def test_promtool_check_rules() -> None:
    _run_promtool("check", "rules", str(ALERTS))


def test_promtool_test_rules() -> None:
    _run_promtool("test", "rules", str(PROM / "alerts.test.yml"))


def test_promtool_check_config(tmp_path: Path) -> None:
    """The example config as deployed: beside its rules and the API token file it names."""
    for name in ("prometheus.yml", "alerts.yml"):
        shutil.copy(PROM / name, tmp_path / name)
    (tmp_path / "cronlog-token").write_text("clt_example\n")
    _run_promtool("check", "config", str(tmp_path / "prometheus.yml"))


def test_every_alert_has_severity_annotations_and_an_existing_runbook() -> None:
    rules = _rules()
    assert [rule["alert"] for rule in rules] == list(ALERT_NAMES)
    for rule in rules:
        name = rule["alert"]
        assert rule["labels"]["severity"] in {"page", "ticket"}, name
        notes = rule["annotations"]
        assert notes["summary"] and notes["description"], name
        match = RUNBOOK_URL.match(notes["runbook_url"])
        assert match, f"{name}: runbook_url {notes['runbook_url']!r}"
        assert match.group(1) == f"docs/runbooks/{name}.md", name
        assert (ROOT / match.group(1)).is_file(), f"{name}: {match.group(1)} is missing"


def test_every_alert_has_a_firing_and_a_silent_promtool_case() -> None:
    doc = yaml.safe_load((PROM / "alerts.test.yml").read_text())
    cases = [case for test in doc["tests"] for case in test.get("alert_rule_test", [])]
    firing = {case["alertname"] for case in cases if case["exp_alerts"]}
    silent = {case["alertname"] for case in cases if not case["exp_alerts"]}
    assert firing == silent == set(ALERT_NAMES)


def test_only_a_critical_missed_schedule_or_no_scheduler_at_all_pages() -> None:
    severities = {rule["alert"]: rule["labels"]["severity"] for rule in _rules()}
    assert [name for name, sev in severities.items() if sev == "page"] == [
        "CronlogCriticalScheduleMissed",
        "CronlogNoScheduler",
    ]


def test_rules_and_dashboard_use_only_exported_series() -> None:
    known = _contract_series()
    assert len(known) == 29 + 3 * 5  # 29 series, of which 5 histograms
    exprs = [rule["expr"] for rule in _rules()]
    exprs += [e for panel in _panel_exprs().values() for e in panel]
    used = {name for expr in exprs for name in METRIC.findall(expr)}
    assert used - known == set()


def test_dashboard_panels_each_have_queries_and_cover_every_series() -> None:
    dash = _dashboard()
    assert dash["schemaVersion"] >= 36
    panels = _panel_exprs()
    assert panels and all(exprs and all(e.strip() for e in exprs) for exprs in panels.values())
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["job"]["definition"] == "label_values(cronlog_ticks_missed_total, job)"
    for panel in dash["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
    used = {name for exprs in panels.values() for e in exprs for name in METRIC.findall(e)}
    unused = {
        name
        for name in _contract_series()
        if not name.endswith(HISTOGRAM_SUFFIXES) and not {name, name + "_bucket"} & used
    }
    assert unused == set()


def test_dashboard_exprs_are_valid_promql(tmp_path: Path) -> None:
    """promtool parses each panel query, Grafana's variables replaced by plain values."""
    rules = [
        {"record": f"cronlog:panel_{i}", "expr": _plain(expr)}
        for i, expr in enumerate(e for exprs in _panel_exprs().values() for e in exprs)
    ]
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    _run_promtool("check", "rules", str(path))


def _plain(expr: str) -> str:
    return expr.replace("$__rate_interval", "5m").replace("$job", ".*")


def test_runbooks_use_only_cli_commands_and_options_that_exist() -> None:
    """Every ``cronlog …`` line of a runbook names a real subcommand and its real options."""
    root = typer.main.get_command(app)
    calls = {
        call.strip()
        for page in RUNBOOKS.glob("*.md")
        for call in re.findall(r"(?:^ {4,}|`)(cronlog [^`#\n]+)", page.read_text(), re.M)
    }
    assert len(calls) > 20
    for call in sorted(calls):
        command: Any = root  # typer's own click: groups are told by their ``commands``
        words = call.split()[1:]
        while hasattr(command, "commands") and words and words[0] in command.commands:
            command = command.commands[words.pop(0)]
        if isinstance(command, RunsGroup):  # ``cronlog runs JOB`` is ``cronlog runs list JOB``
            command = command.commands["list"]
        assert not hasattr(command, "commands"), f"{call!r}: no such command"
        options = {opt for param in command.params for opt in param.opts}
        used = {w.strip("[]") for w in words if w.strip("[]").startswith("-")}
        assert used <= options, f"{call!r}: unknown options {used - options}"
