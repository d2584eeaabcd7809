"""The python and http task kinds, and the choice of an Execution for a grant.

python: ``module:function`` called with the run context in a process pool shared by the
worker (no process spawn per attempt); timeout or revoke SIGKILLs the pool process running it.
http: one request (httpx, asyncio); timeout or revoke cancels it.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import io
import multiprocessing
import os
import signal
import threading
import traceback
import uuid
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from datetime import UTC, datetime
from typing import Any

import httpx

from cronlog.model import HttpTask, Isolation, TaskAction, TaskKind
from cronlog.vocabulary import FailureKind
from services.worker.execute import DISCARD, Execution, Outcome, Output, ProcessExecution, tail

_started: Any = None
"""In a pool process only: the queue on which it reports (token, pid) as a call starts."""


def _init_pool_process(started: Any) -> None:
    global _started  # set once per pool child by its initializer; never in the worker
    _started = started
    # A SIGTERM or Ctrl-C sent to the worker's whole process group must not kill running
    # calls: the worker drains them, then releases and SIGKILLs what is left.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class _Capture(io.TextIOBase):
    """A text stream keeping the first ``cap`` bytes written to it (UTF-8) and counting all."""

    def __init__(self, cap: int) -> None:
        self.cap, self.kept, self.total = cap, bytearray(), 0

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        data = text.encode("utf-8", "replace")
        self.total += len(data)
        self.kept += data[: max(self.cap - len(self.kept), 0)]
        return len(text)


def _call(
    token: str, ref: str, context: dict[str, Any], cap: int = 0
) -> tuple[bool, str, bytes, int]:
    """In a pool process: call ``ref`` with ``context``, never raising.

    Returns:
        ``(succeeded, result text or traceback, captured stdout+stderr (first ``cap`` bytes),
        bytes written to them in all)``. Only Python-level writes to ``sys.stdout`` and
        ``sys.stderr`` are captured, not those of C code or child processes to fds 1 and 2.
    """
    _started.put((token, os.getpid()))
    captured = _Capture(cap)
    try:
        module, _, name = ref.partition(":")
        with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured):
            result = getattr(importlib.import_module(module), name)(context)
    except BaseException:  # the task's failure is data: the traceback is its output
        return False, traceback.format_exc(), bytes(captured.kept), captured.total
    return True, "" if result is None else str(result), bytes(captured.kept), captured.total


class PythonPool:
    """The worker's process pool for python tasks, and which pool process runs which call.

    Killing a pool process breaks a ``ProcessPoolExecutor`` for every call it runs: calls
    running beside a killed one fail too (their attempts are retried per policy), and the
    next submit starts a fresh pool.
    """

    def __init__(self, workers: int) -> None:
        self._ctx = multiprocessing.get_context("spawn")  # the worker has threads: no fork
        self._workers = workers
        self._reports: Any = self._ctx.Queue()
        self._lock = threading.Lock()
        self._pids: dict[str, int] = {}
        self._doomed: set[str] = set()
        self._executor = self._new()
        self._reader = threading.Thread(
            target=self._read_reports, daemon=True, name="python-pool-pids"
        )
        self._reader.start()

    def _new(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(
            self._workers,
            mp_context=self._ctx,
            initializer=_init_pool_process,
            initargs=(self._reports,),
        )

    def submit(
        self, ref: str, context: dict[str, Any], cap: int = 0
    ) -> tuple[str, Future[tuple[bool, str, bytes, int]]]:
        """Start ``ref(context)`` in a pool process, capturing up to ``cap`` bytes of its
        stdout/stderr; returns (token, future of ``_call``'s answer)."""
        token = uuid.uuid4().hex
        with self._lock:
            try:
                return token, self._executor.submit(_call, token, ref, context, cap)
            except BrokenProcessPool:
                self._executor.shutdown(wait=False, cancel_futures=True)
                self._executor = self._new()
                return token, self._executor.submit(_call, token, ref, context, cap)

    def kill(self, token: str) -> None:
        """SIGKILL the pool process running ``token``'s call (now, or as soon as it starts)."""
        with self._lock:
            self._doomed.add(token)
            pid = self._pids.get(token)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def forget(self, token: str) -> None:
        """Drop what is known of a finished call."""
        with self._lock:
            self._pids.pop(token, None)
            self._doomed.discard(token)

    def shutdown(self) -> None:
        """Stop the pool (running calls are cancelled when their process goes)."""
        self._reports.put(None)
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _read_reports(self) -> None:
        while True:
            try:
                report = self._reports.get()
            except (EOFError, OSError):
                return
            if report is None:
                return
            token, pid = report
            with self._lock:
                self._pids[token] = pid
                doomed = token in self._doomed
            if doomed:
                self.kill(token)


class PythonExecution:
    """A python task: ``ref(context)`` in the pool; a return is success, an exception failure."""

    def __init__(
        self,
        pool: PythonPool,
        ref: str,
        context: dict[str, Any],
        timeout_s: float,
        output: Output = DISCARD,
        capture_bytes: int = 0,
    ) -> None:
        self.pool, self.ref, self.context, self.timeout_s = pool, ref, context, timeout_s
        self.output, self.capture_bytes = output, capture_bytes
        self._token: str | None = None
        self._killed = threading.Event()

    def kill(self) -> None:
        """SIGKILL the pool process running the call."""
        self._killed.set()
        if self._token is not None:
            self.pool.kill(self._token)

    def run(self) -> Outcome:
        """Run the call to completion or timeout and return the outcome. Blocks."""
        started = datetime.now(UTC)
        self._token, future = self.pool.submit(self.ref, self.context, self.capture_bytes)
        if self._killed.is_set():
            self.pool.kill(self._token)
        try:
            ok, output, captured, captured_total = future.result(timeout=self.timeout_s)
        except FutureTimeout:
            self.pool.kill(self._token)
            return self._failed(
                None,
                FailureKind.TIMEOUT,
                f"{self.ref} timed out after {self.timeout_s:g} s; its pool process was killed",
                started,
            )
        except BrokenProcessPool:
            return self._failed(
                None, FailureKind.NONZERO_EXIT, f"the pool process running {self.ref} died", started
            )
        finally:
            self.pool.forget(self._token)
        # The log: what the call printed, then its result (or traceback) on a line of its own.
        self.output.write(captured)
        self.output.count(captured_total - len(captured))
        if output:
            self.output.write(
                (b"\n" if captured and not captured.endswith(b"\n") else b"")
                + output.encode("utf-8", "replace")
            )
        if ok:
            return Outcome(0, None, tail(output), started, datetime.now(UTC))
        return Outcome(1, FailureKind.NONZERO_EXIT, tail(output), started, datetime.now(UTC))

    def _failed(self, code: int | None, kind: FailureKind, why: str, started: datetime) -> Outcome:
        """An outcome without the call's answer (its printed output died with it)."""
        self.output.write(why.encode())
        return Outcome(code, kind, why, started, datetime.now(UTC))


class ThreadExecution:
    """A python task with ``isolation: thread``: ``ref(context)`` called in this process.

    No round trip to a pool process, so a cheap call costs microseconds. What it gives up: a
    call cannot be killed (a timeout or a revoked lease is reported and the call is left to
    finish in a daemon thread), and ``sys.stdout`` is the worker's, so prints are not captured
    (the return value, or the traceback, is the call's output).
    """

    def __init__(
        self, ref: str, context: dict[str, Any], timeout_s: float, output: Output = DISCARD
    ) -> None:
        self.ref, self.context, self.timeout_s, self.output = ref, context, timeout_s, output
        self._killed = threading.Event()
        self._done = threading.Event()
        self._answer: tuple[bool, str] = (False, "")

    def kill(self) -> None:
        """Stop waiting for the call (it cannot be killed; it finishes in the background)."""
        self._killed.set()

    def _call(self) -> None:
        try:
            module, _, name = self.ref.partition(":")
            result = getattr(importlib.import_module(module), name)(self.context)
            self._answer = (True, "" if result is None else str(result))
        except BaseException:  # the task's failure is data: the traceback is its output
            self._answer = (False, traceback.format_exc())
        finally:
            self._done.set()

    def run(self) -> Outcome:
        """Call it, wait for the answer, the timeout or a kill, and return the outcome."""
        started = datetime.now(UTC)
        threading.Thread(target=self._call, daemon=True, name=f"call-{self.ref}").start()
        deadline = started.timestamp() + self.timeout_s
        while not self._done.wait(0.05):
            if self._killed.is_set() or datetime.now(UTC).timestamp() >= deadline:
                why = "lease revoked" if self._killed.is_set() else "timed out"
                msg = f"{self.ref} {why} after {datetime.now(UTC) - started}; a thread-isolated "
                msg += "call cannot be killed: it goes on in the background"
                self.output.write(msg.encode())
                return Outcome(None, FailureKind.TIMEOUT, msg, started, datetime.now(UTC))
        ok, text = self._answer
        self.output.write(text.encode("utf-8", "replace"))
        if ok:
            return Outcome(0, None, tail(text), started, datetime.now(UTC))
        return Outcome(1, FailureKind.NONZERO_EXIT, tail(text), started, datetime.now(UTC))


class HttpExecution:
    """An http task: one request; success when the status is in the task's success set."""

    def __init__(
        self,
        task: HttpTask,
        context_headers: dict[str, str],
        timeout_s: float,
        output: Output = DISCARD,
    ) -> None:
        self.task, self.context_headers, self.timeout_s = task, context_headers, timeout_s
        self.output = output
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._request: asyncio.Task[httpx.Response] | None = None
        self._killed = False

    def kill(self) -> None:
        """Cancel the request."""
        with self._lock:
            self._killed = True
            if self._loop is not None and self._request is not None:
                self._loop.call_soon_threadsafe(self._request.cancel)

    def run(self) -> Outcome:
        """Send the request and return the outcome. Blocks."""
        started = datetime.now(UTC)
        try:
            response = asyncio.run(self._send())
        except TimeoutError:
            return self._failed(
                FailureKind.TIMEOUT, f"no response within {self.timeout_s:g} s", started
            )
        except asyncio.CancelledError:
            return self._failed(FailureKind.NONZERO_EXIT, "request cancelled", started)
        except httpx.HTTPError as exc:
            return self._failed(FailureKind.SPAWN_ERROR, f"{type(exc).__name__}: {exc}", started)
        codes = self.task.success_codes
        ok = response.status_code in codes if codes else 200 <= response.status_code < 300
        # The log: the status line, then the body's bytes (the sink keeps its head, up to the cap).
        self.output.write(
            f"{response.http_version} {response.status_code} {response.reason_phrase}\n".encode()
        )
        self.output.write(response.content)
        output = tail(f"HTTP {response.status_code}\n{response.text}")
        return Outcome(
            0 if ok else response.status_code,
            None if ok else FailureKind.NONZERO_EXIT,
            output,
            started,
            datetime.now(UTC),
        )

    def _failed(self, kind: FailureKind, why: str, started: datetime) -> Outcome:
        self.output.write(why.encode())
        return Outcome(None, kind, why, started, datetime.now(UTC))

    async def _send(self) -> httpx.Response:
        headers = [(h.name, h.value) for h in self.task.headers]
        headers += list(self.context_headers.items())
        async with httpx.AsyncClient(follow_redirects=False) as client:
            request = asyncio.ensure_future(
                client.request(
                    self.task.method,
                    self.task.url,
                    headers=headers,
                    content=None if self.task.body is None else self.task.body.encode(),
                )
            )
            with self._lock:
                self._loop, self._request = asyncio.get_running_loop(), request
                if self._killed:
                    request.cancel()
            return await asyncio.wait_for(request, self.timeout_s)


def execution_for(
    action: TaskAction | None,
    command: tuple[str, ...],
    context: dict[str, str],
    *,
    env: dict[str, str],
    timeout_s: float,
    grace_s: float,
    pool: PythonPool,
    output: Output = DISCARD,
    capture_bytes: int = 0,
) -> Execution:
    """Return the Execution of a grant's task kind.

    Args:
        action: the grant's TaskAction; None (grants before task kinds) means exec.
        command: the grant's argv (kind exec).
        context: the CRONLOG_* context, e.g. ``{"CRONLOG_RUN_ID": ...}``; python tasks get it
            as a dict keyed by the lower-case name without the prefix (``run_id``; ``attempt``
            and ``epoch`` as int), http tasks
            as ``X-Cronlog-Run-Id`` headers; exec and shell tasks find it in ``env``.
        env: the process environment of exec and shell tasks (context included).
        timeout_s, grace_s: timeout and SIGTERM-to-SIGKILL grace, seconds.
        pool: the worker's process pool for python tasks.
        output: where the attempt's full output goes (exec/shell: stdout+stderr as read;
            python: its captured prints, then the result or traceback; http: the status line
            and the body).
        capture_bytes: python tasks: bytes of printed output shipped back from the pool
            process at most (the log cap); the rest is only counted.
    """
    action = action or TaskAction()
    if action.kind is TaskKind.SHELL and action.shell is not None:
        return ProcessExecution(["/bin/sh", "-c", action.shell], env, timeout_s, grace_s, output)
    if action.kind is TaskKind.PYTHON and action.callable is not None:
        ctx: dict[str, Any] = {k.removeprefix("CRONLOG_").lower(): v for k, v in context.items()}
        for number in ("attempt", "epoch"):
            if number in ctx:
                ctx[number] = int(ctx[number])
        if action.isolation is Isolation.THREAD:
            return ThreadExecution(action.callable, ctx, timeout_s, output)
        return PythonExecution(pool, action.callable, ctx, timeout_s, output, capture_bytes)
    if action.kind is TaskKind.HTTP and action.http is not None:
        headers = {
            "X-Cronlog-"
            + "-".join(p.capitalize() for p in k.removeprefix("CRONLOG_").split("_")): v
            for k, v in context.items()
        }
        return HttpExecution(action.http, headers, timeout_s, output)
    return ProcessExecution(list(command), env, timeout_s, grace_s, output)
