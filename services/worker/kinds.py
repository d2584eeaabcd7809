"""The python and http task kinds, and the choice of an Execution for a grant.

python: ``module:function`` called with the run context in a process pool shared by the
worker (no process spawn per attempt); timeout or revoke SIGKILLs the pool process running it.
Only modules under ``CRONLOG_PYTHON_MODULES`` run (``reach.python_refusal``). http: one
request to a checked address (``services/worker/http_kind.py``).
"""

from __future__ import annotations

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

from cronlog.model import Isolation, TaskAction, TaskKind
from cronlog.vocabulary import FailureKind
from services.worker.execute import (
    DISCARD,
    Execution,
    Outcome,
    Output,
    ProcessExecution,
    Refused,
    tail,
)
from services.worker.http_kind import HttpExecution
from services.worker.reach import Reach, callable_refusal, python_refusal, task_env
from services.worker.threads import Threads

__all__ = ["HttpExecution", "PythonPool", "execution_for"]

_started: Any = None
"""In a pool process only: the queue on which it reports (token, pid) as a call starts."""
_modules: tuple[str, ...] = ()
"""In a pool process only: the module prefixes its calls may come from."""


def _init_pool_process(started: Any, env: dict[str, str], modules: tuple[str, ...]) -> None:
    global _started, _modules  # set once per pool child by its initializer; never in the worker
    _started, _modules = started, modules
    # Not the worker's environment (its Kafka credentials): a call sees what exec tasks see.
    os.environ.clear()
    os.environ.update(env)
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
        with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured):
            result = _resolve(ref, _modules)(context)
    except BaseException:  # the task's failure is data: the traceback is its output
        return False, traceback.format_exc(), bytes(captured.kept), captured.total
    return True, "" if result is None else str(result), bytes(captured.kept), captured.total


def _resolve(ref: str, modules: tuple[str, ...]) -> Any:
    """Import ``module:function`` (``python_refusal`` was checked by the worker).

    Raises:
        PermissionError: the function is re-exported from a module outside ``modules``.
    """
    module, _, name = ref.partition(":")
    function = getattr(importlib.import_module(module), name)
    why = callable_refusal(function, ref, modules)
    if why is not None:
        raise PermissionError(why)
    return function


class PythonPool:
    """The worker's process pool for python tasks, and which pool process runs which call.

    Killing a pool process breaks a ``ProcessPoolExecutor`` for every call it runs: calls
    running beside a killed one fail too (their attempts are retried per policy), and the
    next submit starts a fresh pool.

    Pool processes run as the worker's user, with the environment of an exec task without
    context (``reach.task_env``), and call only functions of ``reach.python_modules``.
    """

    def __init__(self, workers: int, reach: Reach | None = None) -> None:
        self._ctx = multiprocessing.get_context("spawn")  # the worker has threads: no fork
        self._workers = workers
        reach = reach or Reach()
        self._initargs = (task_env(os.environ, {}, reach.env_pass),)
        self._modules = reach.python_modules
        self._reports: Any = self._ctx.Queue()
        # a pool process killed (SIGKILL of a timed-out call) while writing a report can
        # leave the queue's pipe locked; the process's exit must not wait to flush it (a
        # test run's pytest hung at exit joining the feeder thread)
        self._reports.cancel_join_thread()
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
            initargs=(self._reports, *self._initargs, self._modules),
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
        # The tail is the result (or traceback); a call that returned nothing but printed
        # ends its output with the prints: an empty tail means an empty log (the worker then
        # sends no log record, and the API reads the completion's "" as a complete log).
        shown = output or captured.decode("utf-8", "replace")
        if ok:
            return Outcome(0, None, tail(shown), started, datetime.now(UTC))
        return Outcome(1, FailureKind.NONZERO_EXIT, tail(shown), started, datetime.now(UTC))

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
        self,
        ref: str,
        context: dict[str, Any],
        timeout_s: float,
        output: Output = DISCARD,
        modules: tuple[str, ...] = (),
        threads: Threads | None = None,
    ) -> None:
        self.ref, self.context, self.timeout_s, self.output = ref, context, timeout_s, output
        self.modules = modules
        """The module prefixes ``ref``'s function must come from (re-exports: ``_resolve``)."""
        self.threads = threads
        """Where the call runs (the worker's reused threads); None: a thread of its own."""
        self._killed = False
        self._done = False
        self._wake = threading.Event()
        """Set by the call's end or by a kill: the one thing ``run`` waits on."""
        self._answer: tuple[bool, str] = (False, "")

    def kill(self) -> None:
        """Stop waiting for the call (it cannot be killed; it finishes in the background)."""
        self._killed = True
        self._wake.set()

    def _call(self) -> None:
        try:
            result = _resolve(self.ref, self.modules)(self.context)
            self._answer = (True, "" if result is None else str(result))
        except BaseException:  # the task's failure is data: the traceback is its output
            self._answer = (False, traceback.format_exc())
        finally:
            self._done = True
            self._wake.set()

    def run(self) -> Outcome:
        """Call it, wait for the answer, the timeout or a kill, and return the outcome."""
        started = datetime.now(UTC)
        if self.threads is not None:
            self.threads.submit(self._call)
        else:
            threading.Thread(target=self._call, daemon=True, name=f"call-{self.ref}").start()
        # one wait until the answer, a kill or the timeout (no polling while a call runs)
        self._wake.wait(self.timeout_s)
        if not self._done:  # only the call's end, a kill or the timeout end the wait
            why = "lease revoked" if self._killed else "timed out"
            msg = f"{self.ref} {why} after {datetime.now(UTC) - started}; a thread-isolated "
            msg += "call cannot be killed: it goes on in the background"
            self.output.write(msg.encode())
            return Outcome(None, FailureKind.TIMEOUT, msg, started, datetime.now(UTC))
        ok, text = self._answer
        self.output.write(text.encode("utf-8", "replace"))
        if ok:
            return Outcome(0, None, tail(text), started, datetime.now(UTC))
        return Outcome(1, FailureKind.NONZERO_EXIT, tail(text), started, datetime.now(UTC))


def execution_for(
    action: TaskAction | None,
    command: tuple[str, ...],
    context: dict[str, str],
    *,
    reach: Reach,
    timeout_s: float,
    grace_s: float,
    pool: PythonPool,
    output: Output = DISCARD,
    capture_bytes: int = 0,
    threads: Threads | None = None,
) -> Execution:
    """Return the Execution of a grant's task kind.

    Args:
        action: the grant's TaskAction; None (grants before task kinds) means exec.
        command: the grant's argv (kind exec).
        context: the CRONLOG_* context, e.g. ``{"CRONLOG_RUN_ID": ...}``; python tasks get it
            as a dict keyed by the lower-case name without the prefix (``run_id``; ``attempt``
            and ``epoch`` as int), http tasks
            as ``X-Cronlog-Run-Id`` headers; exec and shell tasks find it in their environment.
        reach: the worker's task policy: the environment and user of exec and shell tasks,
            the modules of python tasks (one outside them is ``Refused``: spawn_error), the
            destinations of http tasks.
        timeout_s, grace_s: timeout and SIGTERM-to-SIGKILL grace, seconds.
        pool: the worker's process pool for python tasks.
        output: where the attempt's full output goes (exec/shell: stdout+stderr as read;
            python: its captured prints, then the result or traceback; http: the status line
            and the body).
        capture_bytes: python tasks: bytes of printed output shipped back from the pool
            process at most (the log cap); the rest is only counted.
        threads: where ``isolation: thread`` calls run (the worker's reused threads); None:
            a thread of their own.
    """
    action = action or TaskAction()
    if action.kind is TaskKind.SHELL and action.shell is not None:
        argv = ["/bin/sh", "-c", action.shell]
        env = reach.task_env(context)
        return ProcessExecution(argv, env, timeout_s, grace_s, output, reach.user, dirs=reach.dirs)
    if action.kind is TaskKind.PYTHON and action.callable is not None:
        refused = python_refusal(action.callable, reach.python_modules)
        if refused is not None:
            return Refused(refused, output)
        ctx: dict[str, Any] = {k.removeprefix("CRONLOG_").lower(): v for k, v in context.items()}
        for number in ("attempt", "epoch"):
            if number in ctx:
                ctx[number] = int(ctx[number])
        if action.isolation is Isolation.THREAD:
            return ThreadExecution(
                action.callable, ctx, timeout_s, output, reach.python_modules, threads
            )
        return PythonExecution(pool, action.callable, ctx, timeout_s, output, capture_bytes)
    if action.kind is TaskKind.HTTP and action.http is not None:
        headers = {
            "X-Cronlog-"
            + "-".join(p.capitalize() for p in k.removeprefix("CRONLOG_").split("_")): v
            for k, v in context.items()
        }
        return HttpExecution(action.http, headers, timeout_s, output, reach.http)
    env = reach.task_env(context)
    return ProcessExecution(
        list(command), env, timeout_s, grace_s, output, reach.user, dirs=reach.dirs
    )
