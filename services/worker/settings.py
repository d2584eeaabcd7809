"""Worker settings (env prefix ``CRONLOG_``)."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from cronlog.limits import MAX_CLAIM_NEXT, MAX_WORKER_ID_CHARS
from services.worker.reach import (
    DEFAULT_PYTHON_MODULES,
    AddressPolicy,
    Reach,
    check_env_pass,
    check_python_modules,
)
from services.worker.sandbox import TaskDirs, TaskUser, default_task_user, resolve_task_user
from topology.kafka.config import KafkaSettings
from topology.wire.log_chunks import DEFAULT_CAP_BYTES

ANSWER_FETCH_WAIT_MS = 500
"""``fetch.wait.max.ms`` of the replies and ready readers (librdkafka's default). The broker
answers a read_committed fetch as soon as the commit marker raises the partition's last stable
offset (it re-checks parked fetches on every append, the marker's included: ReplicaManager's
``addCompletePurgatoryAction``), so the wait bounds only how often an idle reader asks again.
Measured here: a record reached a read_committed consumer 2.4 ms (p50) after its
``commit_transaction`` returned with 500 ms, 1.6 ms with 20 ms; at 20 ms each reader cost the
broker 50 fetches a second when idle, at 500 ms 2 (docs/dispatch.md, "Figures")."""
STOP_POLL_WAIT_S = 5.0
"""Once stopping, how long polls out are still waited for (a grant is released)."""
STOP_OVERHEAD_S = STOP_POLL_WAIT_S + 10.0 + 5.0 + 10.0
"""What a stop takes beyond ``drain_s`` at most, seconds: the polls out, the releases' flush
(10 s), the attempts' logs closing (5 s) and the last flush (10 s); ``Worker._drain``."""


def _default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class WorkerSettings(KafkaSettings):
    """Settings of one worker process.

    Attributes:
        worker_id: unique per process; the lease holder's name, 1..128 identifier characters
            (``cronlog.limits.ID_CHARS``; the fold dead-letters commands with another).
            Default ``<host>-<pid>``.
        slots: how many attempts run at once. Default 4.
        group_id: prefix of the worker's consumer group ids (no group is shared: the ready
            topic is read by every worker, the replies by each its own partition). Default
            ``<topic_prefix>cronlog-workers``.
        claim_timeout_s: how long to wait for the fold's answer to a poll, seconds: past it
            the poll's slots are free again (a grant arriving later is run if a slot is free,
            else released). Default 30.
        drain_s: on SIGTERM, seconds running attempts get to finish before being released
            and killed. Default 30. A supervisor's stop grace must be at least
            ``stop_budget_s()``.
        poll_sweep_s: with free slots, every commands partition is polled at least this often
            even without a notification (a safety net), seconds. Default 30.
        log_cap_bytes: bytes of output kept per attempt on the logs topic; past it output is
            counted, not kept (``truncated``). Env ``CRONLOG_LOG_CAP_BYTES``. Default 1 MiB;
            0 keeps none.
        log_flush_s: seconds output may wait in the worker before it is sent as a LogChunk
            (a full 64 KiB chunk goes at once): how stale a running attempt's log can be.
            Env ``CRONLOG_LOG_FLUSH_S``. Default 0.5.
        heartbeat_s: seconds between two heartbeats on ``cronlog.workers`` (slots, free
            slots, held leases; ``services/worker/heartbeat.py``). A heartbeat vouches for
            the worker 3 intervals. Env ``CRONLOG_HEARTBEAT_S``. Default 2.
        task_env_pass: comma-separated names of the worker's variables its exec/shell tasks
            get besides ``PATH``, ``LANG``, ``LANGUAGE``, ``LC_*``, ``TZ``, ``HOME``,
            ``TMPDIR`` and their ``CRONLOG_*`` context; nothing else of the worker's
            environment reaches a task. Env ``CRONLOG_TASK_ENV_PASS``. Default: none. A name
            that looks like a secret or a cronlog setting (``reach.SECRET_NAME``) is refused.
        task_user: the user (name or uid) exec/shell tasks run as, with its own group and no
            supplementary groups; needs a worker running as root (else it refuses to start).
            Env ``CRONLOG_TASK_USER``. Default: with isolation on and a root worker, the first
            of ``cronlog-task`` and ``nobody`` that exists (``sandbox.DEFAULT_TASK_USERS``);
            else the worker's own user.
        task_isolation: ``on`` (default): a root worker's exec/shell tasks run as an
            unprivileged user (``task_user``) and every attempt in a private directory of its
            own (0700, its ``HOME`` and ``TMPDIR``, removed when it ends); ``off``: as the
            worker's user (unless ``task_user`` is set) in the worker's working directory,
            and the start line says so (``action=isolation_off``, warning). Env
            ``CRONLOG_TASK_ISOLATION``.
        task_dir: where the attempts' private directories go (env ``CRONLOG_TASK_DIR``).
            Default: a fresh ``cronlog-tasks-*`` directory in the system's temporary
            directory, removed at the worker's exit.
        python_modules: comma-separated module prefixes python tasks may come from
            (``myteam.`` allows ``myteam`` and ``myteam.*``); a task outside them fails
            (``spawn_error``) naming its module. Env ``CRONLOG_PYTHON_MODULES``. Default
            ``tests.unit.tasks_for_tests``; empty: no python task runs.
        http_allow: comma-separated CIDRs and host names http tasks may reach although
            loopback, link-local, private, reserved, multicast or not globally routable
            (``127.0.0.1/32,10.0.0.0/8,hooks.internal``). Env ``CRONLOG_HTTP_ALLOW``.
            Default: none. docs/security.md, "What a task can reach".
        metrics_port: TCP port of the Prometheus metrics (``/metrics``); env
            ``CRONLOG_METRICS_PORT``. Default 9465; 0 picks an ephemeral port (logged
            ``action=metrics_serving url=...``), -1 serves none.
        metrics_host: interface the metrics are served on; env ``CRONLOG_METRICS_HOST``.
            Default ``127.0.0.1`` (this machine only; ``0.0.0.0`` for a remote Prometheus).

    Raises:
        pydantic.ValidationError: a bad task policy setting, naming it (an unknown
            ``task_user``, ``task_user`` in a worker that is not root, …).
    """

    worker_id: str = Field(
        default_factory=_default_worker_id,
        min_length=1,
        max_length=MAX_WORKER_ID_CHARS,
        pattern=r"^[!#-\[\]-~]+$",  # cronlog.limits.ID_CHARS: the fold refuses others
    )
    slots: int = Field(default=4, ge=1, le=MAX_CLAIM_NEXT)
    group_id: str = ""
    claim_timeout_s: float = 30.0
    drain_s: float = 30.0
    poll_sweep_s: float = Field(default=30.0, gt=0)
    log_cap_bytes: int = Field(default=DEFAULT_CAP_BYTES, ge=0, le=1024**3)
    log_flush_s: float = Field(default=0.5, gt=0, le=60)
    heartbeat_s: float = Field(default=2.0, ge=0.1, le=300)
    task_env_pass: str = ""
    task_user: str = ""
    task_isolation: Literal["on", "off"] = "on"
    task_dir: str = ""
    python_modules: str = DEFAULT_PYTHON_MODULES
    http_allow: str = ""
    metrics_port: int = Field(default=9465, ge=-1, le=65535)
    metrics_host: str = "127.0.0.1"

    @field_validator("task_env_pass")
    @classmethod
    def _env_pass(cls, value: str) -> str:
        check_env_pass(value)
        return value

    @field_validator("task_user")
    @classmethod
    def _task_user(cls, value: str) -> str:
        if value.strip():
            resolve_task_user(value.strip(), os.geteuid())
        return value.strip()

    @field_validator("python_modules")
    @classmethod
    def _python_modules(cls, value: str) -> str:
        check_python_modules(value)
        return value

    @field_validator("http_allow")
    @classmethod
    def _http_allow(cls, value: str) -> str:
        AddressPolicy.parse(value)
        return value

    def reach(self) -> Reach:
        """Return the task policy these settings describe (``services/worker/reach.py``)."""
        isolated = self.task_isolation == "on"
        user: TaskUser | None
        if self.task_user:
            user = resolve_task_user(self.task_user, os.geteuid())
        else:
            user = default_task_user(os.geteuid()) if isolated else None
        return Reach(
            env_pass=check_env_pass(self.task_env_pass),
            user=user,
            dirs=TaskDirs(Path(self.task_dir) if self.task_dir else None) if isolated else None,
            python_modules=check_python_modules(self.python_modules),
            http=AddressPolicy.parse(self.http_allow),
        )

    def stop_budget_s(self) -> float:
        """Seconds from SIGTERM to this worker's exit at most: ``drain_s`` + STOP_OVERHEAD_S.

        What a supervisor must give it before SIGKILL (``cronlog up``'s stop grace, compose's
        ``stop_grace_period``, Kubernetes' ``terminationGracePeriodSeconds``); less kills
        attempts mid-drain.
        """
        return self.drain_s + STOP_OVERHEAD_S

    def ready_group(self) -> str:
        """Return the consumer group of the ready topic."""
        return self.group_id or f"{self.topic_prefix}cronlog-workers"
