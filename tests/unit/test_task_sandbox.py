"""Isolation on by default (services/worker/sandbox.py): a root worker's exec/shell tasks run as
an unprivileged user, each attempt in a private directory removed when it ends, and the
worker's start line says what is on or off."""

from __future__ import annotations

import logging
import os
import pwd
from dataclasses import replace
from pathlib import Path

import pytest

from cronlog.model import TaskKind, TaskSpec
from services.worker.execute import Outcome
from services.worker.kinds import PythonPool
from services.worker.reach import Reach
from services.worker.sandbox import (
    TaskDirs,
    TaskUser,
    default_task_user,
    isolation_line,
    resolve_task_user,
)
from services.worker.settings import WorkerSettings
from tests.unit.task_runs import run_task

BASE = TaskSpec("main", ("true",))
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="another user's tasks need a root worker")


def _expected_default() -> TaskUser | None:
    for name in ("cronlog-task", "nobody"):
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        return TaskUser(entry.pw_name, entry.pw_uid, entry.pw_gid, entry.pw_dir)
    return None


def _run(shell: str, pool: PythonPool, reach: Reach) -> Outcome:
    return run_task(replace(BASE, kind=TaskKind.SHELL, command=(), shell=shell), pool, reach)


def test_a_root_worker_picks_the_first_default_user_that_exists() -> None:
    assert default_task_user(0) == _expected_default()
    assert default_task_user(0, ("no-such-user-x", "nobody")) == resolve_task_user("nobody", 0)
    assert default_task_user(0, ("no-such-user-x", "root")) is None  # root is never a task user
    assert default_task_user(1000) is None  # a worker that is not root cannot switch


def test_isolation_is_on_by_default_and_off_only_when_asked(tmp_path: Path) -> None:
    on = WorkerSettings(task_dir=str(tmp_path)).reach()
    assert on.dirs is not None and on.dirs.where() == str(tmp_path)
    assert on.user == (_expected_default() if os.geteuid() == 0 else None)
    off = WorkerSettings(task_isolation="off").reach()
    assert (off.user, off.dirs) == (None, None)


@ROOT_ONLY
def test_an_isolated_task_runs_as_the_user_in_a_private_directory_removed_after(
    pool: PythonPool, tmp_path: Path
) -> None:
    user = resolve_task_user("nobody", 0)
    dirs = TaskDirs(tmp_path / "tasks")
    out = _run(
        'id -u; pwd; echo "$HOME $TMPDIR"; stat -c %a:%u .', pool, Reach(user=user, dirs=dirs)
    )
    uid, cwd, home, mode = out.output_tail.splitlines()
    assert out.exit_code == 0 and uid == str(user.uid)
    assert Path(cwd).parent == tmp_path / "tasks" and home == f"{cwd} {cwd}"
    assert mode == f"700:{user.uid}"
    assert not Path(cwd).exists()  # removed when the attempt ended
    assert oct((tmp_path / "tasks").stat().st_mode & 0o777) == "0o711"


@ROOT_ONLY
def test_an_isolated_task_cannot_read_the_workers_files(pool: PythonPool, tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "api-token").write_text("clt_secret\n")
    reach = Reach(user=resolve_task_user("nobody", 0), dirs=TaskDirs(tmp_path / "tasks"))
    out = _run(f"cat {state}/api-token; ls {state}; echo rc=$?", pool, reach)
    assert "clt_secret" not in out.output_tail
    assert "Permission denied" in out.output_tail and out.output_tail.endswith("rc=2\n")


def test_an_attempt_directory_that_cannot_be_made_is_a_spawn_error(
    pool: PythonPool, tmp_path: Path
) -> None:
    (tmp_path / "file").write_text("")
    out = _run("true", pool, Reach(dirs=TaskDirs(tmp_path / "file" / "below")))
    assert out.failure_kind is not None and out.failure_kind.value == "spawn_error"
    assert out.output_tail.startswith("cannot make the attempt's directory: ")


def test_a_fresh_base_is_removed_at_close_and_a_given_one_is_kept(tmp_path: Path) -> None:
    fresh = TaskDirs()
    made = fresh.create(None)
    assert made.parent.name.startswith("cronlog-tasks-")
    fresh.close()
    assert not made.parent.exists()
    given = TaskDirs(tmp_path)
    given.remove(given.create(None))
    given.close()
    assert tmp_path.exists() and list(tmp_path.iterdir()) == []


def test_the_start_line_says_what_is_on_and_what_is_off(tmp_path: Path) -> None:
    user, dirs = resolve_task_user("nobody", 0), TaskDirs(tmp_path)
    level, _, fields = isolation_line("on", user, dirs, 0)
    assert (level, fields["action"], fields["task_user"]) == (
        logging.INFO,
        "task_isolation",
        "nobody",
    )
    assert fields["task_dirs"] == str(tmp_path)
    level, _, fields = isolation_line("off", None, None, 0)
    assert (level, fields["action"]) == (logging.WARNING, "isolation_off")
    assert fields["reason"] == "CRONLOG_TASK_ISOLATION=off"
    assert fields["task_dirs"] == "the worker's working directory"
    _, _, fields = isolation_line("on", None, dirs, 1000)
    assert fields["reason"] == "the worker runs as uid 1000, not root: tasks run as its user"
    _, _, fields = isolation_line("on", None, dirs, 0)
    assert fields["reason"] == "none of the users cronlog-task, nobody exists"
