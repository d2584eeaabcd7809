"""``cronlog up``'s Supervisor with real child processes: a child that exits is reported (status
and the last lines of its log) and restarted; one that keeps exiting stops everything."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from cronlog.errors import CronlogError
from services.cli.up import Service, Supervisor

DIES = "import sys; print('read model stopped: NOT_LEADER_FOR_PARTITION'); sys.exit(70)"
LIVES = "import time; time.sleep(60)"


def _start(tmp: Path, name: str, code: str) -> Service:
    log_path = tmp / f"{name}.log"
    log_file = log_path.open("ab")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=log_file, stderr=subprocess.STDOUT)
    return Service(name, proc, log_path, log_file)


def _stop(services: list[Service]) -> None:
    for s in services:
        if s.proc.poll() is None:
            s.proc.kill()
        s.proc.wait()
        s.log_file.close()


def test_a_dead_child_is_reported_and_restarted(tmp_path: Path) -> None:
    out = io.StringIO()
    services = [_start(tmp_path, "api", DIES), _start(tmp_path, "worker", LIVES)]
    services[0].proc.wait(30)
    supervisor = Supervisor(
        services, lambda name: _start(tmp_path, name, LIVES), out=Console(file=out, width=200)
    )
    try:
        assert supervisor.check() == ["api"]
        text = out.getvalue()
        assert "api (pid " in text and "exited with 70" in text
        assert "read model stopped: NOT_LEADER_FOR_PARTITION" in text
        assert "restarted api" in text and "restart 1 of at most 3" in text
        assert services[0].proc.poll() is None  # the new one runs in the same slot
        assert services[0].restarts == 1
        assert supervisor.check() == []
    finally:
        _stop(services)


def test_a_child_that_keeps_dying_stops_everything(tmp_path: Path) -> None:
    services = [_start(tmp_path, "worker", DIES)]

    def respawn(name: str) -> Service:
        s = _start(tmp_path, name, DIES)
        s.proc.wait(30)
        return s

    supervisor = Supervisor(services, respawn, max_restarts=2, out=Console(file=io.StringIO()))
    services[0].proc.wait(30)
    try:
        assert supervisor.check() == ["worker"]
        assert supervisor.check() == ["worker"]
        with pytest.raises(CronlogError) as stopped:
            supervisor.check()
        assert "worker (pid" in str(stopped.value)
        assert "exited with 70" in str(stopped.value)
        assert "worker exited 3 times within 60 s: stopping everything" in str(stopped.value)
    finally:
        _stop(services)
