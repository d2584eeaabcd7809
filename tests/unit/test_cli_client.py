"""The CLI stays light and its HTTP client speaks plain HTTP (issue 24: a command answers in a
fraction of a second of CPU; the figures are bench/cli_startup.py's)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from services.cli.client import ApiClient, ApiError

HEAVY = (
    "httpx",
    "pydantic",
    "fastapi",
    "pyarrow",
    "duckdb",
    "confluent_kafka",
    "opentelemetry",
    "jwt",
    "yaml",
    "croniter",
)
"""Libraries no everyday command needs at start: each is imported by the command that uses it."""
TOKEN = "t0k"  # noqa: S105 (a test token)


@pytest.mark.parametrize("argv", [["--help"], ["jobs", "list", "--api", "http://127.0.0.1:9"]])
def test_an_everyday_command_imports_no_heavy_library(argv: list[str]) -> None:
    code = (
        "import sys\nfrom services.cli.main import app\n"
        f"sys.argv = ['cronlog', *{argv!r}]\n"
        "try:\n    app()\nexcept SystemExit:\n    pass\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip().splitlines()[-1] == "[]"


class _Seen:
    requests: list[dict[str, Any]]

    def __init__(self) -> None:
        self.requests = []


@pytest.fixture
def server() -> Iterator[tuple[str, _Seen]]:
    seen = _Seen()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            seen.requests.append(
                {
                    "method": self.command,
                    "path": self.path,
                    "auth": self.headers.get("authorization"),
                    "type": self.headers.get("content-type"),
                    "body": body,
                }
            )
            if self.path.startswith("/missing"):
                status, doc = 404, {"detail": "job 'x' not found"}
            else:
                status, doc = 200, {"ok": True}
            data = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.send_header("X-Cronlog-Log-Complete", "true")
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = do_DELETE = _answer

        def log_message(self, *_args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    httpd.shutdown()
    httpd.server_close()


def test_a_request_sends_the_token_query_and_json_body(server: tuple[str, _Seen]) -> None:
    url, seen = server
    client = ApiClient(url, token=TOKEN)
    params = {"limit": 5, "status": None, "include_lost": True}
    assert client.request("GET", "/api/v1/jobs", params=params) == {"ok": True}
    assert client.request("PATCH", "/api/v1/jobs/a", json={"paused": True}) == {"ok": True}
    get, patch = seen.requests
    assert get == {
        "method": "GET",
        "path": "/api/v1/jobs?limit=5&include_lost=true",
        "auth": f"Bearer {TOKEN}",
        "type": None,
        "body": b"",
    }
    assert (patch["method"], patch["type"], json.loads(patch["body"])) == (
        "PATCH",
        "application/json",
        {"paused": True},
    )


def test_an_error_status_is_an_api_error_with_the_apis_detail(server: tuple[str, _Seen]) -> None:
    url, _ = server
    with pytest.raises(ApiError) as caught:
        ApiClient(url, token=TOKEN).request("GET", "/missing")
    assert (caught.value.status, caught.value.detail) == (404, "job 'x' not found")


def test_headers_of_an_answer_are_kept(server: tuple[str, _Seen]) -> None:
    url, _ = server
    answer = ApiClient(url, token=TOKEN).send("GET", "/log")
    assert answer.status_code == 200
    assert {k.lower(): v for k, v in answer.headers.items()}["x-cronlog-log-complete"] == "true"


def test_an_unreachable_api_is_status_0_naming_the_url() -> None:
    with pytest.raises(ApiError) as caught:
        ApiClient("http://127.0.0.1:9", token=TOKEN, timeout_s=5).request("GET", "/api/v1/jobs")
    assert caught.value.status == 0
    assert "cannot reach the API at http://127.0.0.1:9" in caught.value.describe()
