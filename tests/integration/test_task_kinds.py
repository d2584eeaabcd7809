"""Task kinds on a real broker: python and http report success and failure; shell runs."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.ids import task_idem_key
from cronlog.model import HttpHeader, HttpTask, JobSpec, TaskKind, main_task
from cronlog.vocabulary import FailureKind
from tests.integration.harness import Cluster, EventLog
from tests.integration.helpers import once_job

pytestmark = pytest.mark.broker
TASKS = "tests.unit.tasks_for_tests"


def _job(**task: Any) -> JobSpec:
    """A one-off job of one task, of the kind ``task`` says (``main_task``'s fields)."""
    run_at = datetime.now(UTC) + timedelta(seconds=2)
    return replace(once_job(run_at), task_specs=main_task(**task))


def _finished(events: EventLog, *job_ids: str) -> bool:
    done = {
        e.job_id for e in events.events() if isinstance(e.event, ev.RunSucceeded | ev.RunFailed)
    }
    return done >= set(job_ids)


def test_python_task_return_succeeds_and_exception_fails(
    cluster: Cluster, events: EventLog
) -> None:
    cluster.scheduler()
    cluster.worker()
    cluster.send(
        "py-ok", cmd.RegisterJob(spec=_job(kind=TaskKind.PYTHON, callable=f"{TASKS}:echo_context"))
    )
    cluster.send(
        "py-fail", cmd.RegisterJob(spec=_job(kind=TaskKind.PYTHON, callable=f"{TASKS}:fail"))
    )
    assert events.wait_until(lambda log: _finished(log, "py-ok", "py-fail"), 90)
    assert events.of_type(ev.RunSucceeded, "py-ok") and events.of_type(ev.RunFailed, "py-fail")
    ok = events.of_type(ev.TaskSucceeded, "py-ok")[0].event
    context = json.loads(ok.output_tail)
    assert context["job_id"] == "py-ok"
    assert context["idem_key"] == task_idem_key(ok.run_id, "main")
    assert (context["attempt"], context["epoch"]) == (1, ok.epoch)
    failed = events.of_type(ev.TaskFailed, "py-fail")[0].event
    assert failed.failure_kind is FailureKind.NONZERO_EXIT
    assert "ValueError: task failed on attempt 1" in failed.output_tail


class _Hook(BaseHTTPRequestHandler):
    seen: list[dict[str, str]] = []  # noqa: RUF012 - the test server's request log

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.seen.append(dict(self.headers.items()))
        status = int(self.path.rsplit("/", 1)[-1])
        self.send_response(status)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def hook() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_http_task_succeeds_by_status_and_sends_context(
    cluster: Cluster, events: EventLog, hook: str
) -> None:
    cluster.scheduler()
    cluster.worker(CRONLOG_HTTP_ALLOW="127.0.0.1/32")  # the hook listens on loopback
    cluster.send(
        "http-ok",
        cmd.RegisterJob(
            spec=_job(
                kind=TaskKind.HTTP,
                http=HttpTask(f"{hook}/run/202", "POST", (HttpHeader("X-Token", "t"),), "{}"),
            )
        ),
    )
    cluster.send(
        "http-fail",
        cmd.RegisterJob(spec=_job(kind=TaskKind.HTTP, http=HttpTask(f"{hook}/run/503", "POST"))),
    )
    assert events.wait_until(lambda log: _finished(log, "http-ok", "http-fail"), 90)
    ok = events.of_type(ev.TaskSucceeded, "http-ok")[0].event
    assert ok.output_tail.startswith("HTTP 202")
    failed = events.of_type(ev.TaskFailed, "http-fail")[0].event
    assert (failed.exit_code, failed.failure_kind) == (503, FailureKind.NONZERO_EXIT)
    sent = next(h for h in _Hook.seen if h.get("X-Cronlog-Job-Id") == "http-ok")
    assert sent["X-Token"] == "t"
    assert sent["X-Cronlog-Idem-Key"] == task_idem_key(ok.run_id, "main")
    assert sent["X-Cronlog-Epoch"] == str(ok.epoch)


def test_shell_task_runs_its_string_with_sh(cluster: Cluster, events: EventLog) -> None:
    cluster.scheduler()
    cluster.worker()
    cluster.send(
        "sh",
        cmd.RegisterJob(
            spec=_job(  # noqa: S604 - a shell task is the point
                kind=TaskKind.SHELL, shell="echo job=$CRONLOG_JOB_ID | tr a-z A-Z && exit 0"
            )
        ),
    )
    assert events.wait_until(lambda log: _finished(log, "sh"), 90)
    assert events.of_type(ev.RunSucceeded, "sh")
    assert events.of_type(ev.TaskSucceeded, "sh")[0].event.output_tail == "JOB=SH\n"
