"""Task kinds without Kafka: validation naming the field, and each Execution's Outcome."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from cronlog.errors import InvalidDefinition
from cronlog.model import (
    HttpHeader,
    HttpTask,
    Isolation,
    JobSpec,
    Schedule,
    ScheduleKind,
    TaskKind,
    TaskSpec,
)
from cronlog.validation import validate_spec, validate_task
from cronlog.vocabulary import FailureKind
from services.api.shapes.definition import JobDefinition
from services.api.shapes.mapping import spec_to_json, to_spec
from services.worker.execute import Outcome
from services.worker.kinds import HttpExecution, PythonPool, execution_for
from services.worker.reach import AddressPolicy, Reach
from services.worker.threads import Threads

BASE = TaskSpec("main", ("true",))
"""The task the tests vary (what a worker runs); ``job`` wraps one in a definition."""
CONTEXT = {
    "CRONLOG_JOB_ID": "j",
    "CRONLOG_RUN_ID": "r1",
    "CRONLOG_TASK": "main",
    "CRONLOG_ATTEMPT": "2",
    "CRONLOG_EPOCH": "3",
    "CRONLOG_IDEM_KEY": "k",
    "CRONLOG_SCHEDULED_FOR": "2026-01-01T00:00:00Z",
}
HTTP = HttpTask(url="http://127.0.0.1:1/x")
LOCAL = Reach(http=AddressPolicy.parse("127.0.0.1/32"))
"""The task policy of these tests: their http server listens on loopback."""


def job(task: TaskSpec) -> JobSpec:
    """A manual job of the one task ``task``."""
    return JobSpec("kinds", Schedule(ScheduleKind.MANUAL), (task,))


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"command": ()}, "command"),
        ({"kind": TaskKind.SHELL}, "command"),
        ({"kind": TaskKind.SHELL, "command": ()}, "shell"),
        ({"kind": TaskKind.SHELL, "command": (), "shell": "  "}, "shell"),
        ({"shell": "echo hi"}, "shell"),
        ({"kind": TaskKind.PYTHON, "command": ()}, "callable"),
        ({"kind": TaskKind.PYTHON, "command": (), "callable": "no-colon"}, "callable"),
        ({"kind": TaskKind.PYTHON, "command": (), "callable": "m:f", "http": HTTP}, "http"),
        ({"kind": TaskKind.HTTP, "command": ()}, "http"),
        ({"kind": TaskKind.HTTP, "command": (), "http": HttpTask(url="ftp://h/")}, "http.url"),
        (
            {"kind": TaskKind.HTTP, "command": (), "http": replace(HTTP, method="BREW")},
            "http.method",
        ),
        (
            {
                "kind": TaskKind.HTTP,
                "command": (),
                "http": replace(HTTP, headers=(HttpHeader("X-A", "a\r\nb"),)),
            },
            "http.headers",
        ),
        (
            {"kind": TaskKind.HTTP, "command": (), "http": replace(HTTP, success_codes=(42,))},
            "http.success_codes",
        ),
        ({"kind": TaskKind.HTTP, "command": (), "http": replace(HTTP, body="x" * 70_000)}, "http"),
    ],
)
def test_invalid_task_definition_names_the_field(changes: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidDefinition) as err:
        validate_task(replace(BASE, **changes))  # type: ignore[arg-type]
    assert err.value.field == field


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"kind": TaskKind.SHELL, "command": (), "shell": "echo hi | wc -c"},
        {"kind": TaskKind.PYTHON, "command": (), "callable": "tests.unit.tasks_for_tests:fail"},
        {
            "kind": TaskKind.PYTHON,
            "command": (),
            "callable": "tests.unit.tasks_for_tests:noop",
            "isolation": Isolation.THREAD,
        },
        {
            "kind": TaskKind.HTTP,
            "command": (),
            "http": HttpTask(
                "https://example.org/hook", "POST", (HttpHeader("X-A", "1"),), "{}", (200, 202)
            ),
        },
    ],
)
def test_valid_task_definitions_pass_and_survive_the_api_shape(changes: dict[str, object]) -> None:
    spec = job(replace(BASE, **changes))  # type: ignore[arg-type]
    validate_spec(spec)
    assert to_spec(JobDefinition.model_validate(spec_to_json(spec))) == spec


def test_api_definition_without_command_is_an_exec_job_that_fails_validation() -> None:
    spec = to_spec(JobDefinition.model_validate({"name": "n", "schedule": {"type": "manual"}}))
    assert spec.task_specs == (TaskSpec("main"),)
    with pytest.raises(InvalidDefinition, match="command"):
        validate_spec(spec)


# -- executions -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pool() -> Iterator[PythonPool]:
    p = PythonPool(2)
    yield p
    p.shutdown()


def _run(
    spec: TaskSpec, pool: PythonPool, timeout_s: float = 20.0, context: dict[str, str] | None = None
):  # type: ignore[no-untyped-def]
    ctx = context or CONTEXT
    return execution_for(
        spec.action(),
        spec.command,
        ctx,
        reach=LOCAL,
        timeout_s=timeout_s,
        grace_s=1.0,
        pool=pool,
    )


def test_exec_kind_runs_argv_with_context_env(pool: PythonPool) -> None:
    out = _run(replace(BASE, command=("sh", "-c", "echo $CRONLOG_IDEM_KEY; exit 4")), pool).run()
    assert (out.exit_code, out.failure_kind, out.output_tail) == (
        4,
        FailureKind.NONZERO_EXIT,
        "k\n",
    )


def test_shell_kind_runs_the_string_with_sh(pool: PythonPool) -> None:
    spec = replace(  # noqa: S604 - shell is the point
        BASE,
        kind=TaskKind.SHELL,
        command=(),
        shell="echo $CRONLOG_RUN_ID-$CRONLOG_ATTEMPT | tr r R",
    )
    out = _run(spec, pool).run()
    assert (out.exit_code, out.failure_kind, out.output_tail) == (0, None, "R1-2\n")


def _python(ref: str) -> TaskSpec:
    return replace(
        BASE, kind=TaskKind.PYTHON, command=(), callable=f"tests.unit.tasks_for_tests:{ref}"
    )


def test_python_kind_return_is_success_with_the_run_context(pool: PythonPool) -> None:
    out = _run(_python("echo_context"), pool).run()
    assert (out.exit_code, out.failure_kind) == (0, None)
    assert json.loads(out.output_tail) == {
        "job_id": "j",
        "run_id": "r1",
        "task": "main",
        "attempt": 2,
        "epoch": 3,
        "idem_key": "k",
        "scheduled_for": "2026-01-01T00:00:00Z",
    }


def test_python_kind_exception_is_failure_with_traceback_tail(pool: PythonPool) -> None:
    out = _run(_python("fail"), pool).run()
    assert out.failure_kind is FailureKind.NONZERO_EXIT
    assert "Traceback" in out.output_tail
    assert "ValueError: task failed on attempt 2" in out.output_tail


def test_python_kind_unimportable_callable_is_failure(pool: PythonPool) -> None:
    missing = "tests.unit.tasks_for_tests.no_such_module_here:f"  # inside the allowed modules
    out = _run(replace(_python("x"), callable=missing), pool).run()
    assert out.failure_kind is FailureKind.NONZERO_EXIT
    assert "ModuleNotFoundError" in out.output_tail


def _pid_when_written(path: Path) -> int:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return int(path.read_text())
        time.sleep(0.05)
    raise AssertionError("the task never started")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _gone(pid: int) -> bool:
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


def test_python_kind_timeout_kills_its_pool_process(pool: PythonPool, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    execution = _run(
        _python("sleep_then_write"),
        pool,
        timeout_s=3.0,
        context={**CONTEXT, "CRONLOG_PID_FILE": str(pid_file)},
    )
    started = time.monotonic()
    out = execution.run()
    assert out.failure_kind is FailureKind.TIMEOUT
    assert time.monotonic() - started < 10
    assert _gone(_pid_when_written(pid_file))
    assert _run(_python("echo_context"), pool).run().failure_kind is None  # the pool recovers


def test_python_kind_revoke_kills_its_pool_process(pool: PythonPool, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    execution = _run(
        _python("sleep_then_write"),
        pool,
        timeout_s=60.0,
        context={**CONTEXT, "CRONLOG_PID_FILE": str(pid_file)},
    )
    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(execution.run()))
    thread.start()
    pid = _pid_when_written(pid_file)
    execution.kill()
    thread.join(10)
    assert not thread.is_alive() and result
    assert _gone(pid)


# -- http -----------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    seen: list[tuple[str, str, dict[str, str], bytes]] = []  # noqa: RUF012 - test server log

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.seen.append((self.command, self.path, dict(self.headers.items()), body))
        if self.path.startswith("/slow"):
            time.sleep(5)
        status = int(self.path.rsplit("/", 1)[-1]) if self.path[-3:].isdigit() else 200
        payload = f"answer {status}".encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = _answer

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def _http(task: HttpTask) -> TaskSpec:
    return replace(BASE, kind=TaskKind.HTTP, command=(), http=task)


def test_http_kind_2xx_is_success_and_sends_context_headers(pool: PythonPool, server: str) -> None:
    task = HttpTask(f"{server}/hook/201", "POST", (HttpHeader("X-Mine", "yes"),), '{"a": 1}')
    out = _run(_http(task), pool).run()
    assert (out.exit_code, out.failure_kind) == (0, None)
    assert out.output_tail == "HTTP 201\nanswer 201"
    method, path, headers, body = _Handler.seen[-1]
    assert (method, path, body) == ("POST", "/hook/201", b'{"a": 1}')
    assert headers["X-Mine"] == "yes"
    assert headers["X-Cronlog-Idem-Key"] == "k"
    assert headers["X-Cronlog-Run-Id"] == "r1"
    assert headers["X-Cronlog-Attempt"] == "2"


def test_http_kind_status_outside_the_success_set_is_failure(pool: PythonPool, server: str) -> None:
    out = _run(_http(HttpTask(f"{server}/x/500")), pool).run()
    assert (out.exit_code, out.failure_kind) == (500, FailureKind.NONZERO_EXIT)
    custom = HttpTask(f"{server}/x/404", success_codes=(404,))
    assert _run(_http(custom), pool).run().failure_kind is None
    assert (
        _run(_http(HttpTask(f"{server}/x/200", success_codes=(204,))), pool).run().failure_kind
        is FailureKind.NONZERO_EXIT
    )


def test_http_kind_timeout_and_unreachable(pool: PythonPool, server: str) -> None:
    out = _run(_http(HttpTask(f"{server}/slow")), pool, timeout_s=0.5).run()
    assert out.failure_kind is FailureKind.TIMEOUT
    closed = _run(_http(HttpTask("http://127.0.0.1:9/")), pool).run()
    assert closed.failure_kind is FailureKind.SPAWN_ERROR


def test_http_kind_revoke_cancels_the_request(server: str) -> None:
    execution = HttpExecution(HttpTask(f"{server}/slow"), {}, 60.0, policy=LOCAL.http)
    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(execution.run()))
    started = time.monotonic()
    thread.start()
    time.sleep(0.5)
    execution.kill()
    thread.join(10)
    assert result and time.monotonic() - started < 4


# --- isolation: thread (issue 13: a cheap python task without a process round trip) -------


def _threaded(ref: str) -> TaskSpec:
    return replace(_python(ref), isolation=Isolation.THREAD)


def test_a_thread_isolated_call_runs_in_the_workers_process(pool: PythonPool) -> None:
    out = _run(_threaded("echo_context"), pool).run()
    assert (out.exit_code, out.failure_kind) == (0, None)
    assert json.loads(out.output_tail)["run_id"] == "r1"


def test_a_thread_isolated_exception_is_a_failure_with_its_traceback(pool: PythonPool) -> None:
    out = _run(_threaded("fail"), pool).run()
    assert out.failure_kind is FailureKind.NONZERO_EXIT
    assert "ValueError: task failed on attempt 2" in out.output_tail


def test_a_thread_isolated_call_past_its_timeout_is_reported_not_killed(pool: PythonPool) -> None:
    started = time.monotonic()
    out = _run(_threaded("sleep_then_write"), pool, timeout_s=0.3).run()
    assert time.monotonic() - started < 2.0
    assert out.failure_kind is FailureKind.TIMEOUT
    assert "cannot be killed" in out.output_tail


def test_thread_isolated_calls_reuse_the_workers_threads_and_a_kill_ends_the_wait(
    pool: PythonPool,
) -> None:
    threads = Threads("call")
    spec = _threaded("echo_context")

    def make(action: Any) -> Any:
        return execution_for(
            action, (), CONTEXT, reach=LOCAL, timeout_s=20, grace_s=1, pool=pool, threads=threads
        )

    for _ in range(3):
        run = make(spec.action())
        assert run.run().exit_code == 0
        deadline = time.monotonic() + 10
        while threads.idle() != 1 and time.monotonic() < deadline:
            time.sleep(0.005)  # the call's thread is back before the next call comes
    assert threads.started == 1
    slow = _threaded("sleep_then_write")
    execution = make(slow.action())
    result: list[Outcome] = []
    waiting = threading.Thread(target=lambda: result.append(execution.run()))
    waiting.start()
    time.sleep(0.2)
    execution.kill()
    waiting.join(10)
    assert result[0].failure_kind is FailureKind.TIMEOUT
    assert "lease revoked" in result[0].output_tail


def test_isolation_is_only_for_python_tasks() -> None:
    with pytest.raises(InvalidDefinition) as info:
        validate_task(replace(BASE, isolation=Isolation.THREAD))
    assert info.value.field == "isolation"
