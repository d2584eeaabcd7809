"""Issue 25, "isolation on by default": under ``./ops/up``'s defaults, and under
docker-compose's settings, a task of tenant B runs as a non-root user, cannot read ``state/``,
cannot produce to the broker, and cannot change tenant A's jobs by any route
(tests/integration/isolation_checks.py says which).

The ``./ops/up`` variant runs ``cronlog up`` itself (what ``ops/up`` execs) on a broker of its
own: its secure mode, its credentials, its services, with only the ports and directories
moved (``CRONLOG_KAFKA_PORT``, ``CRONLOG_KAFKA_HOME``, ``CRONLOG_API_PORT``,
``CRONLOG_UP_HOME``). The docker-compose variant: tests/integration/test_isolation_compose.py.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from services.cli.broker_access import admin_settings, service_env
from services.worker.sandbox import default_task_user
from tests.integration.harness import ROOT
from tests.integration.helpers import wait_for
from tests.integration.isolation_checks import (
    Deployment,
    check_isolation,
    clean_env,
    free_port_pair,
)
from topology.kafka.config import KafkaSettings

pytestmark = [
    pytest.mark.own_broker,
    pytest.mark.broker,
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(os.geteuid() != 0, reason="tasks run as another user under a root worker"),
]


@dataclass
class Up:
    """A ``cronlog up`` subprocess and what it printed."""

    proc: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    reader: threading.Thread | None = None

    def start_reading(self) -> None:
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def said(self, text: str) -> str | None:
        return next((ln for ln in self.lines if text in ln), None)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(180)
        if self.reader is not None:
            self.reader.join(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return rc


@pytest.fixture
def up_home() -> Iterator[Path]:
    # a directory others may enter and list, as a checkout is: only state/ must be closed
    home = Path(tempfile.mkdtemp(prefix="cronlog-up-home-"))
    home.chmod(0o755)
    yield home
    shutil.rmtree(home, ignore_errors=True)


def test_under_ops_up_defaults_a_task_of_tenant_b_cannot_touch_tenant_a(
    up_home: Path, tmp_path: Path
) -> None:
    port, api_port = free_port_pair(), free_port_pair()
    env = clean_env(
        CRONLOG_UP_HOME=str(up_home),
        CRONLOG_KAFKA_PORT=str(port),
        CRONLOG_KAFKA_HOME=str(tmp_path / "kafka"),
        CRONLOG_API_PORT=str(api_port),
        CRONLOG_METRICS_PORT="0",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.cli", "up", "--duration", "800"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    up = Up(proc)
    up.start_reading()
    try:
        wait_for(lambda: up.said("web console:") or proc.poll() is not None, 300, "cronlog up")
        assert proc.poll() is None, "\n".join(up.lines)
        task_user = default_task_user(0)
        assert task_user is not None
        assert up.said("isolation broker: every client authenticates (SASL, no anonymous")
        assert up.said(f"isolation tasks: exec/shell run as {task_user.name} (uid {task_user.uid})")
        state = up_home / "state"
        bootstrap = f"127.0.0.1:{port}"
        service = KafkaSettings.model_validate(
            {"bootstrap": bootstrap, **_lower(service_env(state / "kafka" / "cronlog.password"))}
        )
        admin_password = (state / "kafka" / "admin.password").read_text().strip()
        deployment = Deployment(
            api=f"http://127.0.0.1:{api_port}",
            tokens_file=state / "api-tokens.json",
            state=state,
            listeners=[bootstrap, f"127.0.0.1:{port + 1}"],
            service=service,
            admin=admin_settings(KafkaSettings(bootstrap=bootstrap), admin_password),
            task_uid=task_user.uid,
        )
        check_isolation(deployment)
        # issue 24, item 4: the README's /metrics call works with the token up printed
        assert up.said("metrics token (platform tenant '*', viewer; for Prometheus): clt_")
        metrics_token = (state / "metrics-token").read_text().strip()
        scraped = httpx.get(
            f"http://127.0.0.1:{api_port}/metrics",
            headers={"Authorization": f"Bearer {metrics_token}"},
            timeout=30,
        )
        assert scraped.status_code == 200 and "cronlog_run_events_total" in scraped.text
        assert oct(state.stat().st_mode & 0o777) == "0o700"
        # issue 24, item 6: what up printed for people holds no log line (logfmt, librdkafka)
        logs = [ln for ln in up.lines if ln.startswith(("ts=", "%")) or "level=" in ln]
        assert logs == [], logs
    finally:
        rc = up.stop()
    assert rc == 0, "\n".join(up.lines[-40:])


def _lower(env: dict[str, str]) -> dict[str, str]:
    """``CRONLOG_KAFKA_SASL_USERNAME`` → ``kafka_sasl_username`` (the settings' field names)."""
    return {k.removeprefix("CRONLOG_").lower(): v for k, v in env.items()}
