"""Request bodies above ``api_max_body_bytes`` are a 413 before anything parses them (issue 11).

An adversarial run sent one 200 MB body: it was read and parsed whole (the API grew to
742 MiB). The cap is enforced while the body streams in: a declared Content-Length above it is
refused before a byte of the body is read, and a chunked body is counted as it arrives.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from fastapi.testclient import TestClient

from services.api.app import create_app
from services.api.settings import ApiSettings
from tests.integration.helpers import free_port
from tests.unit.authed import authed

LIMIT = 4096


@pytest.fixture
def small(tmp_path: Path) -> TestClient:
    return authed(create_app(ApiSettings(api_state_dir=tmp_path, api_max_body_bytes=LIMIT)))


def job_body(size: int) -> bytes:
    """A valid job definition padded with spaces to ``size`` bytes."""
    head = b'{"name": "x", "schedule": {"type": "manual"}, "command": ["true"]'
    return head + b" " * (size - len(head) - 1) + b"}"


def test_the_default_cap_is_one_mib_and_the_environment_sets_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert ApiSettings().api_max_body_bytes == 1024 * 1024
    monkeypatch.setenv("CRONLOG_API_MAX_BODY_BYTES", "2048")
    assert ApiSettings().api_max_body_bytes == 2048


def test_a_body_over_the_cap_is_413(small: TestClient) -> None:
    answer = small.post(
        "/api/v1/jobs", content=job_body(LIMIT + 1), headers={"content-type": "application/json"}
    )
    assert answer.status_code == 413
    # Starlette answers a declared oversize length in text/plain, a counted one in JSON
    assert "Content Too Large" in answer.text


def test_a_body_at_the_cap_is_parsed(small: TestClient) -> None:
    answer = small.post(
        "/api/v1/jobs", content=job_body(LIMIT), headers={"content-type": "application/json"}
    )
    assert answer.status_code == 503  # valid, parsed; no Kafka in this app


def test_a_chunked_body_over_the_cap_is_413(small: TestClient) -> None:
    def chunks() -> Iterator[bytes]:
        body = job_body(LIMIT * 3)
        for i in range(0, len(body), 1000):
            yield body[i : i + 1000]

    answer = small.post(
        "/api/v1/jobs", content=chunks(), headers={"content-type": "application/json"}
    )
    assert "content-length" not in answer.request.headers
    assert answer.status_code == 413
    assert answer.json() == {"detail": "Content Too Large"}


def test_a_huge_declared_length_is_refused_before_the_body_is_sent(tmp_path: Path) -> None:
    port = free_port()
    app = create_app(ApiSettings(api_state_dir=tmp_path))  # the default cap, 1 MiB
    server = uvicorn.Server(uvicorn.Config(app, port=port, lifespan="off", log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
            conn.sendall(
                b"POST /api/v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 200000000\r\n\r\n{"
            )
            head = conn.recv(4096)  # answered although 199,999,999 bytes were never sent
        assert head.startswith(b"HTTP/1.1 413"), head
    finally:
        server.should_exit = True
        thread.join(10)
