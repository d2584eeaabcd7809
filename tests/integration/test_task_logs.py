"""Task logs end to end: worker -> cronlog.logs -> the API's log read model -> HTTP and CLI."""

from __future__ import annotations

import subprocess
import sys
import time

import httpx
import pytest

from tests.integration.harness import ROOT

pytestmark = pytest.mark.broker

CAP = 1024 * 1024  # the worker's default CRONLOG_LOG_CAP_BYTES
BIG_LINES = 100_000
BIG = b"err-start\n" + b"".join(b"line %07d\n" % i for i in range(BIG_LINES)) + b"err-end\n"
BIG_SCRIPT = (
    "import sys\n"
    "sys.stderr.write('err-start\\n'); sys.stderr.flush()\n"
    f"for i in range({BIG_LINES}): sys.stdout.write('line %07d\\n' % i)\n"
    "sys.stdout.flush(); sys.stderr.write('err-end\\n'); sys.stderr.flush()\n"
)
SMALL = b"out\nerr\ntail"


def _manual(api: httpx.Client, job_id: str, command: list[str]) -> str:
    body = {
        "job_id": job_id,
        "name": job_id,
        "schedule": {"type": "manual"},
        "command": command,
        "timeout_s": 60,
    }
    assert api.post("/api/v1/jobs", json=body).status_code == 201
    trig = api.post(f"/api/v1/jobs/{job_id}/trigger")
    assert trig.status_code in (200, 201, 202), trig.text
    return str(trig.json()["run_id"])


def _log_url(run_id: str, attempt: int = 1) -> str:
    return f"/api/v1/runs/{run_id}/tasks/main/attempts/{attempt}/log"


def _wait(api: httpx.Client, run_id: str, until: object, timeout: float = 60) -> httpx.Response:
    deadline = time.monotonic() + timeout
    answer = None
    while time.monotonic() < deadline:
        answer = api.get(_log_url(run_id))
        if answer.status_code == 200 and until(answer):  # type: ignore[operator]
            return answer
        time.sleep(0.05)
    raise AssertionError(
        f"log of {run_id} never got there: {answer and (answer.status_code, dict(answer.headers))}"
    )


def _run_when_done(api: httpx.Client, run_id: str, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run: dict = api.get(f"/api/v1/runs/{run_id}").json()
        if run["state"] in ("succeeded", "failed"):
            return run
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} never ended")


def _complete(answer: httpx.Response) -> bool:
    return answer.headers["x-cronlog-log-complete"] == "true"


def test_logs_are_whole_up_to_the_cap_with_stdout_and_stderr(api: httpx.Client) -> None:
    small = _manual(api, "log-small", ["sh", "-c", "echo out; echo err >&2; printf tail"])
    big = _manual(api, "log-big", [sys.executable, "-c", BIG_SCRIPT])

    answer = _wait(api, small, _complete)
    assert answer.content == SMALL
    assert answer.headers["x-cronlog-log-truncated"] == "false"
    assert answer.headers["x-cronlog-log-bytes-total"] == str(len(SMALL))
    assert answer.headers["x-cronlog-log-cap-bytes"] == str(CAP)

    t0 = time.monotonic()
    answer = _wait(api, big, _complete)
    waited = time.monotonic() - t0
    assert answer.content == BIG[:CAP]
    assert (
        answer.headers["x-cronlog-log-truncated"],
        answer.headers["x-cronlog-log-cap-bytes"],
        answer.headers["x-cronlog-log-bytes-total"],
        answer.headers["x-cronlog-log-bytes"],
    ) == ("true", str(CAP), str(len(BIG)), str(CAP))
    doc = api.get(_log_url(big), params={"format": "json"}).json()
    assert (doc["truncated"], doc["cap_bytes"], doc["bytes_total"], doc["complete"]) == (
        True,
        CAP,
        len(BIG),
        True,
    )
    assert doc["text"].startswith("err-start\nline 0000000\n")
    run = _run_when_done(api, big)  # the final chunk goes before the completion
    assert run["state"] == "succeeded"
    assert run["output_tail"].endswith("line 0099999\nerr-end\n")  # the tail is the real end
    print(
        f"\n[figures] {len(BIG)} B of output: complete log readable {waited:.2f} s after "
        f"the small one; run took {run['started_at']} .. {run['finished_at']}"
    )

    cli = subprocess.run(
        [str(ROOT / ".venv/bin/cronlog"), "logs", small, "--api", str(api.base_url)],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert (cli.returncode, cli.stdout, cli.stderr) == (0, SMALL, b"")
    cli = subprocess.run(
        [
            str(ROOT / ".venv/bin/cronlog"),
            "logs",
            big,
            "--attempt",
            "1",
            "--api",
            str(api.base_url),
        ],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert cli.returncode == 0 and cli.stdout == BIG[:CAP]
    assert f"truncated: kept {CAP} of {len(BIG)} bytes (cap {CAP})".encode() in cli.stderr
    assert api.get(_log_url(small, attempt=2)).status_code == 404
    assert api.get(_log_url("no-such-run")).status_code == 404


def test_a_running_attempt_shows_its_partial_log(api: httpx.Client) -> None:
    run_id = _manual(api, "log-slow", ["sh", "-c", "echo first; sleep 4; echo second"])
    t0 = time.monotonic()
    partial = _wait(api, run_id, lambda a: a.content == b"first\n")
    seen = time.monotonic() - t0
    assert partial.headers["x-cronlog-log-complete"] == "false"
    assert partial.headers["x-cronlog-attempt-state"] == "running"
    whole = _wait(api, run_id, _complete)
    assert whole.content == b"first\nsecond\n"
    print(
        f"\n[figures] first line readable {seen:.2f} s after the trigger answered "
        "(claim + start + flush interval + API consume)"
    )
