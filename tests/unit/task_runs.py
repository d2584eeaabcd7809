"""One task run by the worker's executor in process (no Kafka, no lease): the CRONLOG_* context
of attempt 1 of run ``r1``, a 20 s timeout and a 1 s grace. The Python pool it takes is the
``pool`` fixture of ``tests/unit/conftest.py``."""

from __future__ import annotations

from typing import Any

from cronlog.model import TaskSpec
from services.worker.execute import Outcome
from services.worker.kinds import PythonPool, execution_for
from services.worker.reach import Reach

CONTEXT = {"CRONLOG_RUN_ID": "r1", "CRONLOG_ATTEMPT": "1", "CRONLOG_EPOCH": "1"}
"""The context every task of these tests is given (run ``r1``, attempt 1, epoch 1)."""


def run_task(spec: TaskSpec, pool: PythonPool, reach: Reach, **options: Any) -> Outcome:
    """Run ``spec`` under the task policy ``reach`` and return its outcome.

    Args:
        spec: the task (any kind).
        pool: the Python pool for python tasks.
        reach: the worker's task policy.
        options: further ``execution_for`` options (``output``, ``capture_bytes``).
    """
    return execution_for(
        spec.action(),
        spec.command,
        CONTEXT,
        reach=reach,
        timeout_s=20,
        grace_s=1,
        pool=pool,
        **options,
    ).run()
