"""``ops/kafka start`` refuses a port inside Linux's ephemeral range (issue 25: a client's
reconnect loop there can connect to itself and hold the port the broker restarts on). The
refusal comes before anything is started or fetched: these runs take milliseconds."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _ephemeral() -> tuple[int, int]:
    try:
        lo, hi = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    except OSError:
        return 32768, 60999
    return int(lo), int(hi)


def _start(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ROOT / "ops" / "kafka"), "start"],
        env={**os.environ, "CRONLOG_KAFKA_HOME": str(tmp_path / "kafka"), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("offset", [0, 500])
def test_a_client_port_inside_the_ephemeral_range_is_refused_with_the_reason(
    tmp_path: Path, offset: int
) -> None:
    lo, hi = _ephemeral()
    port = lo + offset
    out = _start(tmp_path, CRONLOG_KAFKA_PORT=str(port))
    assert out.returncode == 1
    assert f"port {port} is inside this machine's ephemeral port range {lo}-{hi}" in out.stderr
    assert "connect to itself" in out.stderr
    assert f"below {lo}" in out.stderr
    assert "CRONLOG_KAFKA_ALLOW_EPHEMERAL_PORT=1" in out.stderr
    assert not (tmp_path / "kafka" / "kafka.pid").exists()


def test_a_controller_or_node_port_that_reaches_into_the_range_is_refused_too(
    tmp_path: Path,
) -> None:
    lo, _ = _ephemeral()
    single = _start(tmp_path, CRONLOG_KAFKA_PORT=str(lo - 1))  # its controller: lo
    assert single.returncode == 1
    assert f"port {lo} is inside" in single.stderr
    cluster = _start(tmp_path, CRONLOG_KAFKA_PORT=str(lo - 4), CRONLOG_KAFKA_NODES="3")
    assert cluster.returncode == 1
    assert f"port {lo} is inside" in cluster.stderr


def test_a_sasl_port_inside_the_range_is_refused(tmp_path: Path) -> None:
    lo, _ = _ephemeral()
    out = _start(tmp_path, CRONLOG_KAFKA_PORT="19990", CRONLOG_KAFKA_SASL_PORT=str(lo + 7))
    assert out.returncode == 1
    assert f"port {lo + 7} is inside" in out.stderr
