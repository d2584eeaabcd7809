"""Python task functions for the task-kind tests (imported by the worker's pool processes)."""

from __future__ import annotations

import json
import os
import time
from typing import Any


def echo_context(context: dict[str, Any]) -> str:
    """Succeed, returning the run context as JSON (it becomes the output tail)."""
    return json.dumps(context, sort_keys=True)


def fail(context: dict[str, Any]) -> None:
    """Fail with an exception naming the attempt."""
    raise ValueError(f"task failed on attempt {context['attempt']}")


def sleep_then_write(context: dict[str, Any]) -> None:
    """Write this process's pid to ``context['pid_file']`` (when given), then sleep 60 s."""
    if "pid_file" in context:
        with open(context["pid_file"], "w") as out:
            out.write(str(os.getpid()))
    time.sleep(60)


def chatty(context: dict[str, Any]) -> str:
    """Print to stdout and stderr (5000 ``y`` after), then return ``"done"``."""
    import sys

    print("to stdout")
    print("to stderr", file=sys.stderr)
    sys.stdout.write("y" * 5000)
    return "done"


def prints_only(context: dict[str, Any]) -> None:
    """Print a line and return nothing (its output tail is what it printed)."""
    print("printed, returned nothing")


def noop(context: dict[str, Any]) -> None:
    """Do nothing (bench/dag_chain.py: the per-hop cost of a DAG without the task's own)."""


def environment(context: dict[str, Any]) -> str:
    """Return the names in this process's environment, sorted, as JSON (test_task_reach)."""
    return json.dumps(sorted(os.environ))


reexported = os.getcwd
"""A function of another module under this module's name: the worker refuses to call it."""
