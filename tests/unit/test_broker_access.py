"""The default set-up's files and choices without a broker (services/cli/broker_access.py,
up_access.py, secure_cmd.py): passwords 0600 made once, the broker's secret settings, state/
closed, and what ``cronlog up`` says when isolation is off."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cronlog.errors import CronlogError
from services.cli import broker_access as access
from services.cli import up_access
from services.cli.main import app


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_a_password_is_made_once_readable_by_its_owner_alone(tmp_path: Path) -> None:
    path = tmp_path / "kafka" / "cronlog.password"
    first = access.ensure_password(path)
    assert len(first) == 43 and access.ensure_password(path) == first
    assert (_mode(path), _mode(path.parent)) == (0o600, 0o700)


def test_the_services_get_a_password_file_never_a_password(tmp_path: Path) -> None:
    env = access.service_env(tmp_path / "p")
    assert env == {
        "CRONLOG_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "CRONLOG_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "CRONLOG_KAFKA_SASL_USERNAME": "cronlog",
        "CRONLOG_KAFKA_SASL_PASSWORD_FILE": str(tmp_path / "p"),
    }


def test_secure_init_writes_the_brokers_sasl_entries_and_the_passwords(tmp_path: Path) -> None:
    broker, service = tmp_path / "broker", tmp_path / "service"
    argv = ["secure", "init", "--broker-dir", str(broker), "--service-dir", str(service)]
    assert CliRunner().invoke(app, argv).exit_code == 0
    admin = (broker / "admin.password").read_text().strip()
    props = (broker / "server.properties").read_text()
    entry = f'username="admin" password="{admin}" user_admin="{admin}";'
    assert f"listener.name.broker.plain.sasl.jaas.config={access._PLAIN} required {entry}" in props
    assert (
        f"listener.name.controller.plain.sasl.jaas.config={access._PLAIN} required {entry}" in props
    )
    assert "listener.name.broker.scram-sha-512.sasl.jaas.config=" in props
    assert f'password="{admin}";' in (broker / "admin.properties").read_text()
    for path in (
        broker / "admin.password",
        broker / "server.properties",
        service / "cronlog.password",
    ):
        assert _mode(path) == 0o600, path
    assert _mode(broker) == _mode(service) == 0o700
    again = CliRunner().invoke(app, argv)  # a restart of the compose project keeps them
    assert again.exit_code == 0 and (broker / "admin.password").read_text().strip() == admin


def test_up_closes_state_and_the_logs(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir(mode=0o755)
    up_access.lock_down(tmp_path)
    assert _mode(tmp_path / "state") == _mode(tmp_path / ".cache" / "logs") == 0o700


def _ops(calls: list[tuple[str, dict[str, str]]]) -> up_access.OpsKafka:
    def run(action: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        calls.append((action, kwargs["env"]))
        return subprocess.CompletedProcess([action], 0, "127.0.0.1:19092\n", "")

    return run


def test_a_plaintext_broker_is_asked_for_only_explicitly_and_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KAFKA_BOOTSTRAP", raising=False)
    monkeypatch.setenv("CRONLOG_KAFKA_SECURE", "0")
    calls: list[tuple[str, dict[str, str]]] = []
    got = up_access.broker_access(tmp_path, _ops(calls), print)
    assert [(a, e["CRONLOG_KAFKA_SECURE"]) for a, e in calls] == [("status", "0")]
    assert not got.secure and got.service_env == {}
    assert got.summary.startswith("isolation off (CRONLOG_KAFKA_SECURE=0)")
    assert not (tmp_path / "state" / "kafka").exists()  # no password made for nothing


def test_a_running_broker_of_the_other_mode_stops_up_with_its_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KAFKA_BOOTSTRAP", raising=False)
    monkeypatch.delenv("CRONLOG_KAFKA_SECURE", raising=False)
    why = "ops/kafka: the broker running on 127.0.0.1:19092 (pid 1) takes clients without auth"

    def other_mode(action: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        assert kwargs["env"]["CRONLOG_KAFKA_SECURE"] == "1"
        return subprocess.CompletedProcess([action], 3, "", why + "\n")

    with pytest.raises(CronlogError, match="takes clients without auth"):
        up_access.broker_access(tmp_path, other_mode, print)
    assert _mode(tmp_path / "state" / "kafka" / "admin.password") == 0o600
