"""Where an exec/shell task runs: its user by default, and a private directory per attempt.

Isolation is on unless the deployment turns it off (``CRONLOG_TASK_ISOLATION=off``):

- a worker running as root starts its tasks as an unprivileged user: ``CRONLOG_TASK_USER``,
  else the first of ``DEFAULT_TASK_USERS`` that exists (``cronlog-task``, which ``ops/up`` and
  the Dockerfile make, then ``nobody``);
- each attempt runs in a directory of its own (``TaskDirs``), mode 0700 and owned by the
  task's user, which is also its ``HOME`` and ``TMPDIR``, and is removed when the attempt ends.

docs/security.md, "What a task can reach".
"""

from __future__ import annotations

import logging
import os
import pwd
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("cronlog.worker")

DEFAULT_TASK_USERS = ("cronlog-task", "nobody")
"""The users a root worker's tasks run as when ``CRONLOG_TASK_USER`` is not set: the first
that exists on the machine and is not root."""


@dataclass(frozen=True, slots=True)
class TaskUser:
    """The unprivileged user exec/shell tasks run as."""

    name: str
    uid: int
    gid: int
    home: str


def _user(entry: pwd.struct_passwd) -> TaskUser:
    return TaskUser(entry.pw_name, entry.pw_uid, entry.pw_gid, entry.pw_dir)


def resolve_task_user(name: str, euid: int) -> TaskUser:
    """Look ``name`` (a user name or a numeric uid) up for a worker running as ``euid``.

    Raises:
        ValueError: no such user, or the worker is not root (``euid`` != 0) and so cannot
            start processes as another user, or ``name`` is root.
    """
    try:
        entry = pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
    except KeyError:
        raise ValueError(f"CRONLOG_TASK_USER: no user {name!r} on this machine") from None
    if euid != 0:
        raise ValueError(
            f"CRONLOG_TASK_USER={name}: the worker runs as uid {euid}, not root, and cannot "
            "start tasks as another user; run the worker as root or unset CRONLOG_TASK_USER"
        )
    if entry.pw_uid == 0:
        raise ValueError(f"CRONLOG_TASK_USER: {name!r} is root; name an unprivileged user")
    return _user(entry)


def default_task_user(euid: int, names: tuple[str, ...] = DEFAULT_TASK_USERS) -> TaskUser | None:
    """Return the user a worker running as ``euid`` starts its tasks as by default.

    Returns:
        The first of ``names`` that exists and is not root; None when the worker is not root
        (it cannot start processes as another user) or none of them exists.
    """
    if euid != 0:
        return None
    for name in names:
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        if entry.pw_uid != 0:
            return _user(entry)
    return None


class TaskDirs:
    """The private working directories of one worker's attempts, under one base directory.

    The base (``base``, else a fresh ``cronlog-tasks-*`` directory in the system's temporary
    directory, made at the first attempt) is mode 0711: a task may enter its own directory,
    whose random name it is given, but not list the others. Each attempt's directory is
    mode 0700 and owned by the task's user. Thread-safe.

    Args:
        base: where the attempts' directories go; created if missing. None: a fresh one.
    """

    def __init__(self, base: Path | None = None) -> None:
        self._given = base
        self._base: Path | None = None
        self._lock = threading.Lock()

    def where(self) -> str:
        """Return the base directory, or where a fresh one will be made (for the start line)."""
        with self._lock:
            if self._base is not None:
                return str(self._base)
        return str(self._given) if self._given else f"{tempfile.gettempdir()}/cronlog-tasks-*"

    def _ensure_base(self) -> Path:
        with self._lock:
            if self._base is None:
                if self._given is None:
                    base = Path(tempfile.mkdtemp(prefix="cronlog-tasks-"))
                else:
                    base = self._given
                    base.mkdir(parents=True, exist_ok=True)
                os.chmod(base, 0o711)  # noqa: S103 - traversable, not listable: see the docstring
                self._base = base
            return self._base

    def create(self, user: TaskUser | None) -> Path:
        """Make one attempt's directory (0700), owned by ``user`` (None: the worker's user).

        Raises:
            OSError: it cannot be made (a full disk, a base removed under the worker).
        """
        path = Path(tempfile.mkdtemp(prefix="attempt-", dir=self._ensure_base()))
        if user is not None:
            os.chown(path, user.uid, user.gid)
        os.chmod(path, 0o700)
        return path

    def remove(self, path: Path) -> None:
        """Delete an attempt's directory and everything the task left in it (symlinks are
        removed, never followed: ``shutil.rmtree`` works on file descriptors on Linux)."""
        shutil.rmtree(path, onerror=_log_left)

    def close(self) -> None:
        """Delete the base directory if this object made it (at the worker's exit)."""
        with self._lock:
            base, self._base = self._base, None
        if base is not None and self._given is None:
            shutil.rmtree(base, onerror=_log_left)


def _log_left(_function: object, path: str, exc_info: tuple[object, object, object]) -> None:
    log.warning(
        "task directory not removed",
        extra={"action": "task_dir_left", "path": path, "error": exc_info[1]},
    )


def isolation_line(
    setting: str, user: TaskUser | None, dirs: TaskDirs | None, euid: int
) -> tuple[int, str, dict[str, object]]:
    """Return the worker's start line about its tasks' isolation: (level, message, fields).

    Args:
        setting: ``CRONLOG_TASK_ISOLATION`` (``on`` or ``off``).
        user: the user exec/shell tasks run as (None: the worker's own).
        dirs: the attempts' private directories (None: the worker's working directory).
        euid: the worker's effective uid.

    Returns:
        ``action=task_isolation`` at info when tasks run as another user in private
        directories; else ``action=isolation_off`` at warning, whose ``reason`` says what is
        off and why.
    """
    fields: dict[str, object] = {
        "task_user": user.name if user is not None else f"uid {euid} (the worker's)",
        "task_uid": user.uid if user is not None else euid,
        "task_dirs": dirs.where() if dirs is not None else "the worker's working directory",
    }
    reasons = []
    if setting == "off":
        reasons.append("CRONLOG_TASK_ISOLATION=off")
    elif user is None and euid != 0:
        reasons.append(f"the worker runs as uid {euid}, not root: tasks run as its user")
    elif user is None:
        reasons.append(f"none of the users {', '.join(DEFAULT_TASK_USERS)} exists")
    if not reasons:
        return logging.INFO, "exec/shell tasks isolated", {"action": "task_isolation", **fields}
    return (
        logging.WARNING,
        "task isolation off: tasks can reach what the worker's user can",
        {"action": "isolation_off", "reason": "; ".join(reasons), **fields},
    )
