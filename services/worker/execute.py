"""Running one attempt: the Execution interface and its argv kind (exec, and shell via sh -c).

Every kind returns the same Outcome; ``kill()`` (lease revoked) may come from another thread.
The python and http kinds live in ``services/worker/kinds.py``.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import io
import os
import signal
import subprocess
import sys
import threading
import typing
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from cronlog.vocabulary import FailureKind
from services.worker.sandbox import TaskDirs, TaskUser

TAIL_BYTES = 4096
"""How much of the end of the combined stdout/stderr travels with the completion."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """How an attempt ended.

    Attributes:
        exit_code: process exit code; None when it was killed by a signal or never started.
        failure_kind: None on success.
        output_tail: last ``TAIL_BYTES`` of output, decoded as UTF-8 (replacement on error).
        started_at, finished_at: aware UTC instants.
    """

    exit_code: int | None
    failure_kind: FailureKind | None
    output_tail: str
    started_at: datetime
    finished_at: datetime


class Output(Protocol):
    """Where an execution streams its full output (``logsink.LogSink``); thread-safe."""

    def write(self, data: bytes) -> None:
        """Take output bytes, verbatim, in order."""
        ...

    def count(self, n: int) -> None:
        """Count ``n`` bytes of output that were produced but not passed to ``write``."""
        ...


class _Discard:
    """The Output of an execution whose log nobody keeps."""

    def write(self, data: bytes) -> None:
        """Drop ``data``."""

    def count(self, n: int) -> None:
        """Drop the count."""


DISCARD: Output = _Discard()
"""An Output that keeps nothing."""


class Execution(Protocol):
    """One attempt of any task kind."""

    def run(self) -> Outcome:
        """Run to completion, failure or timeout and return the outcome. Blocks."""
        ...

    def kill(self) -> None:
        """Stop the attempt at once (its lease was lost); thread-safe, idempotent."""
        ...


def tail(text: str) -> str:
    """Return the last ``TAIL_BYTES`` bytes of ``text`` (cut on a character boundary)."""
    return text.encode()[-TAIL_BYTES:].decode("utf-8", "ignore")


_PR_SET_PDEATHSIG = 1
"""prctl(2) option: the signal the kernel sends a process when its parent thread dies."""


@functools.cache
def _prctl() -> Callable[..., int] | None:
    """Return libc's prctl, or None off Linux (the guard is then skipped)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _die_with_worker() -> Callable[[], None] | None:
    """Return a preexec_fn that makes the child get SIGKILL when the worker dies (kill -9).

    Without it a dead worker's task runs on beside its retry (its own session is out of
    reach of the worker's process group). PR_SET_PDEATHSIG fires on the death of the parent
    *thread*: ``ProcessExecution.run`` spawns and reaps in one thread, so it outlives the child.
    It covers the direct child only (kept across exec); grandchildren it leaves, a shell's
    background jobs for instance, are orphaned and run on.

    preexec_fn runs Python between fork and exec, which the docs call unsafe with threads
    (a lock held by another thread at fork time). This one only calls prctl and getppid
    through a function resolved before the fork, after setsid: should it ever hang, the
    child is already in its own process group and the attempt's timeout kills it.
    """
    prctl = _prctl()
    if prctl is None:
        return None
    worker_pid = os.getpid()

    def guard() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
        if os.getppid() != worker_pid:  # the worker died before prctl: nobody will signal
            os._exit(137)

    return guard


class Refused:
    """An attempt the worker's policy does not run (``services/worker/reach.py``): it fails at
    once as a ``spawn_error`` with ``why`` as its output."""

    def __init__(self, why: str, output: Output = DISCARD) -> None:
        self.why, self.output = why, output

    def run(self) -> Outcome:
        """Fail with the reason."""
        now = datetime.now(UTC)
        self.output.write(self.why.encode())
        return Outcome(None, FailureKind.SPAWN_ERROR, self.why, now, now)

    def kill(self) -> None:
        """Nothing runs."""


class ProcessExecution:
    """One running command (kinds exec and shell): argv in its own process group.

    ``user``: run it as that user, with its group and no supplementary groups
    (``services/worker/sandbox.py``); None: as the worker's user. ``dirs``: run it in a
    private directory of its own, made for this attempt (its ``HOME`` and ``TMPDIR`` too) and
    removed when it ends; None: in the worker's working directory.
    """

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        timeout_s: float,
        grace_s: float = 10.0,
        output: Output = DISCARD,
        user: TaskUser | None = None,
        *,
        dirs: TaskDirs | None = None,
    ) -> None:
        self.user = user
        self.dirs = dirs
        self.output = output
        self.argv = argv
        self.env = env
        self.timeout_s = timeout_s
        self.grace_s = grace_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._killed = threading.Event()

    def kill(self) -> None:
        """SIGKILL the whole process group (the lease was lost; nothing may go on running)."""
        self._killed.set()
        self._signal_group(signal.SIGKILL)

    def _signal_group(self, sig: signal.Signals) -> None:
        proc = self._proc
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)

    def run(self) -> Outcome:
        """Run to completion (or timeout) in its own directory and return the outcome. Blocks."""
        if self.dirs is None:
            return self._run_in(None)
        started = datetime.now(UTC)
        try:
            workdir = self.dirs.create(self.user)
        except OSError as exc:
            why = f"cannot make the attempt's directory: {exc}"
            self.output.write(why.encode())
            return Outcome(None, FailureKind.SPAWN_ERROR, why, started, datetime.now(UTC))
        self.env = {**self.env, "HOME": str(workdir), "TMPDIR": str(workdir)}
        try:
            return self._run_in(workdir)
        finally:
            self.dirs.remove(workdir)

    def _run_in(self, cwd: Path | None) -> Outcome:
        started = datetime.now(UTC)
        tail: deque[bytes] = deque()
        try:
            # argv comes from the job definition: running it is the point (no shell).
            self._proc = subprocess.Popen(  # noqa: S603
                self.argv,
                cwd=cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group
                preexec_fn=_die_with_worker(),  # threads and preexec_fn: see its docstring
                **_as_user(self.user),
            )
        except OSError as exc:
            why = f"cannot start {self.argv[0]!r}: {exc}"
            self.output.write(why.encode())
            return Outcome(None, FailureKind.SPAWN_ERROR, why, started, datetime.now(UTC))
        reader = threading.Thread(
            target=_read_tail, args=(self._proc, tail, self.output), daemon=True
        )
        reader.start()
        timed_out = False
        try:
            self._proc.wait(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            self._signal_group(signal.SIGTERM)
            try:
                self._proc.wait(timeout=self.grace_s)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                self._proc.wait()
        self._signal_group(signal.SIGKILL)  # reap stragglers left in the group
        reader.join(timeout=2.0)
        code = self._proc.returncode
        output = b"".join(tail)[-TAIL_BYTES:].decode("utf-8", "replace")
        finished = datetime.now(UTC)
        if timed_out:
            return Outcome(None, FailureKind.TIMEOUT, output, started, finished)
        if code == 0:
            return Outcome(0, None, output, started, finished)
        return Outcome(
            code if code >= 0 else None, FailureKind.NONZERO_EXIT, output, started, finished
        )


def _as_user(user: TaskUser | None) -> dict[str, typing.Any]:
    """Popen's arguments that start the child as ``user`` (CPython switches user and groups
    before the preexec_fn, so the death signal it sets survives the switch)."""
    if user is None:
        return {}
    return {"user": user.uid, "group": user.gid, "extra_groups": []}


def _read_tail(proc: subprocess.Popen[bytes], tail: deque[bytes], output: Output) -> None:
    """Read the combined stdout/stderr pipe to its end: all of it to ``output``, the last
    ``TAIL_BYTES`` (at least) into ``tail``."""
    if proc.stdout is None:
        return
    stdout = typing.cast(io.BufferedReader, proc.stdout)  # Popen pipes are buffered readers
    size = 0
    with stdout:  # closed at EOF: the pipe's fd is not left to the garbage collector
        for chunk in iter(lambda: stdout.read1(65536), b""):
            output.write(chunk)
            tail.append(chunk)
            size += len(chunk)
            while size - len(tail[0]) >= TAIL_BYTES and len(tail) > 1:
                size -= len(tail.popleft())
