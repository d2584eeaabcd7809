"""``cronlog up`` (``./ops/up``) and docker-compose give the worker at least what its drain
takes before SIGKILL (issue 25: a 20 s grace against a 30 s drain killed it mid-drain)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from cronlog.errors import CronlogError
from services.cli.up import STOP_GRACE_S, stop_grace_s
from services.worker.settings import STOP_OVERHEAD_S, WorkerSettings

ROOT = Path(__file__).resolve().parents[2]


def test_the_default_grace_covers_the_default_drain_and_the_stop_after_it() -> None:
    drain = WorkerSettings().drain_s
    assert drain == 30.0
    assert stop_grace_s({}) == drain + STOP_OVERHEAD_S
    assert stop_grace_s({}) >= drain


@pytest.mark.parametrize(
    ("drain", "grace"), [("120", 120 + STOP_OVERHEAD_S), ("0", max(STOP_GRACE_S, STOP_OVERHEAD_S))]
)
def test_the_grace_follows_the_workers_drain_setting(drain: str, grace: float) -> None:
    assert stop_grace_s({"CRONLOG_DRAIN_S": drain}) == grace


def test_a_bad_drain_setting_is_refused_naming_it() -> None:
    with pytest.raises(CronlogError, match="drain_s"):
        stop_grace_s({"CRONLOG_DRAIN_S": "soon"})


def test_compose_gives_the_worker_its_whole_stop_budget() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    worker = compose["services"]["worker"]
    drain = worker.get("environment", {}).get("CRONLOG_DRAIN_S", WorkerSettings().drain_s)
    grace = worker.get("stop_grace_period", "10s")  # compose's default: 10 s
    match = re.fullmatch(r"(\d+)s", str(grace))
    assert match, grace
    assert int(match[1]) >= WorkerSettings(drain_s=drain).stop_budget_s()
