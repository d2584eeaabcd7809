"""What a task can reach, on a real broker (issue 14 item 6): a task's environment holds none
of the worker's secrets, and an http task aimed at 127.0.0.1 fails with a clear reason."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.model import HttpTask, JobSpec, TaskKind, main_task
from cronlog.vocabulary import FailureKind
from tests.integration.harness import Cluster, EventLog
from tests.integration.helpers import once_job

pytestmark = pytest.mark.broker
SECRET, TOKEN = "s3cret-x", "abc-token-value"
"""Values in the worker's environment that no task may see."""


def _job(**task: Any) -> JobSpec:
    """A one-off job of one task, of the kind ``task`` says (``main_task``'s fields)."""
    run_at = datetime.now(UTC) + timedelta(seconds=2)
    return replace(once_job(run_at), task_specs=main_task(**task))


def _finished(events: EventLog, *job_ids: str) -> bool:
    ended = (ev.RunSucceeded, ev.RunFailed)
    return {e.job_id for e in events.events() if isinstance(e.event, ended)} >= set(job_ids)


class _Api(BaseHTTPRequestHandler):
    """Stands for something on the worker's loopback (the API): it must never be asked."""

    hits: list[str] = []  # noqa: RUF012 - the server's request log

    def do_GET(self) -> None:
        self.hits.append(self.path)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"[]")

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def loopback_api() -> Iterator[int]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield int(httpd.server_address[1])
    httpd.shutdown()
    httpd.server_close()


def test_tasks_see_no_worker_secret_and_cannot_call_loopback(
    cluster: Cluster, events: EventLog, loopback_api: int
) -> None:
    cluster.scheduler()
    cluster.worker(  # PLAINTEXT: the SASL password is unused, but it is in the worker's env
        **{
            "CRONLOG_KAFKA_SASL_PASSWORD": SECRET,
            "FOO_TOKEN": TOKEN,
            "MY_SETTING": "passed-on",
            "CRONLOG_TASK_ENV_PASS": "MY_SETTING",
            "CRONLOG_HTTP_ALLOW": "",
        }
    )
    shell = _job(kind=TaskKind.SHELL, shell="env | sort")  # noqa: S604 - a shell task is the point
    cluster.send("env", cmd.RegisterJob(spec=shell))
    url = f"http://127.0.0.1:{loopback_api}/api/v1/jobs"
    cluster.send("to-api", cmd.RegisterJob(spec=_job(kind=TaskKind.HTTP, http=HttpTask(url))))
    assert events.wait_until(lambda log: _finished(log, "env", "to-api"), 90)
    seen = events.of_type(ev.TaskSucceeded, "env")[0].event.output_tail
    names = {line.split("=", 1)[0] for line in seen.splitlines()}
    assert SECRET not in seen and TOKEN not in seen
    assert "MY_SETTING=passed-on" in seen.splitlines()
    assert {n for n in names if n.startswith("CRONLOG_")} == {
        "CRONLOG_JOB_ID",
        "CRONLOG_RUN_ID",
        "CRONLOG_TASK",
        "CRONLOG_ATTEMPT",
        "CRONLOG_IDEM_KEY",
        "CRONLOG_SCHEDULED_FOR",
        "CRONLOG_EPOCH",
        "CRONLOG_WORKER_ID",
    }
    assert not {"FOO_TOKEN", "KAFKA_BOOTSTRAP", "CRONLOG_TOPIC_PREFIX"} & names
    failed = events.of_type(ev.TaskFailed, "to-api")[0].event
    assert (failed.exit_code, failed.failure_kind) == (None, FailureKind.SPAWN_ERROR)
    assert failed.output_tail == (
        "http destination 127.0.0.1 is loopback; allow it with CRONLOG_HTTP_ALLOW"
    )
    assert _Api.hits == []
