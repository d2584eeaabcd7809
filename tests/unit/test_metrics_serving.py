"""Serving a process's metrics: port -1 is off, 0 is ephemeral, a taken port ends the process."""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Gauge
from pydantic import ValidationError

from services.metrics_http import serve
from services.scheduler.settings import SchedulerSettings
from services.worker.settings import WorkerSettings

ROOT = Path(__file__).resolve().parents[2]


def test_port_minus_one_serves_nothing() -> None:
    assert serve(CollectorRegistry(), -1, "127.0.0.1") is None


def test_port_zero_serves_on_an_ephemeral_port() -> None:
    registry = CollectorRegistry()
    Gauge("cronlog_test_up", "test", registry=registry).set(1)
    url = serve(registry, 0, "127.0.0.1")
    assert url is not None and url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
    assert not url.startswith("http://127.0.0.1:0/")
    with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310
        assert "cronlog_test_up 1.0" in response.read().decode()


@pytest.mark.parametrize("settings", [SchedulerSettings, WorkerSettings])
def test_a_port_below_minus_one_is_refused_naming_the_field(settings: type) -> None:
    with pytest.raises(ValidationError, match="metrics_port"):
        settings(metrics_port=-2)


@pytest.mark.parametrize(("service", "default"), [("scheduler", 9464), ("worker", 9465)])
def test_a_taken_port_ends_the_process_with_a_clear_error(service: str, default: int) -> None:
    settings = SchedulerSettings if service == "scheduler" else WorkerSettings
    assert settings().metrics_port == default
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", f"services.{service}"],
            cwd=ROOT,
            env={"CRONLOG_METRICS_PORT": str(port), "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 70, done.stderr
    fatal = next(ln for ln in done.stderr.splitlines() if "action=fatal" in ln)
    assert f'thread=metrics error="cannot serve metrics on 127.0.0.1:{port}: ' in fatal
    assert "level=critical" in fatal
