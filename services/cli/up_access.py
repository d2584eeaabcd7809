"""What ``cronlog up`` secures before it starts anything: the files in ``state/`` and the
broker (docs/security.md, "The default set-up").

- ``state/`` and ``.cache/logs`` become 0700 (the tokens, passwords, read models and logs are
  the services' user's alone: a task runs as another user);
- the local broker starts in ``ops/kafka``'s secure mode (``CRONLOG_KAFKA_SECURE=1``, unless
  set to 0): every listener authenticates and ACLs are enforced; ``User:admin``'s password
  and the services' are made once in ``state/kafka/`` (0600);
- the services' user ``cronlog`` gets the deployment's prefixed ACLs, and the services get
  its password as a file (``CRONLOG_KAFKA_SASL_PASSWORD_FILE``), never the admin's.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cronlog.errors import CronlogError
from services.cli import broker_access as access
from services.worker.sandbox import isolation_line
from services.worker.settings import WorkerSettings
from topology.kafka.config import KafkaSettings

OpsKafka = Callable[..., "subprocess.CompletedProcess[str]"]
"""Runs ``ops/kafka <action>`` (``up._ops_kafka``)."""
STATUS_OTHER_MODE = 3
"""``ops/kafka status``'s exit status when its broker runs in the other mode."""


@dataclass(frozen=True)
class BrokerAccess:
    """How ``cronlog up`` reaches the broker, and what it says about it.

    Attributes:
        bootstrap: the broker's address.
        started_here: ``up`` started it (and stops it at the end).
        admin: settings to create topics and ACLs with (the admin's, on the secure broker).
        service_env: the services' Kafka security variables (empty: the caller's own).
        summary: the start line about the broker's isolation.
        secure: the local broker is the secure one: the caller creates the topics as
            ``admin``, then ``broker_access.grant_service(admin, service_password)``.
    """

    bootstrap: str
    started_here: bool
    admin: KafkaSettings
    service_env: dict[str, str] = field(default_factory=dict)
    summary: str = ""
    secure: bool = False
    service_password: str = field(default="", repr=False)
    """The services' user's password (secure only): ``grant_service`` gives it its ACLs."""


def lock_down(home: Path) -> None:
    """Make ``home/state`` and ``home/.cache/logs`` (if missing) and set both to 0700."""
    for path in (home / "state", home / ".cache" / "logs"):
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o700)


def broker_access(home: Path, ops_kafka: OpsKafka, say: Callable[[str], None]) -> BrokerAccess:
    """Reach (or start) the broker ``up`` uses, secured unless told otherwise.

    ``KAFKA_BOOTSTRAP`` set: that cluster, as the caller's ``CRONLOG_KAFKA_*`` settings
    reach it. Else the local broker of ``ops/kafka``: secure (``CRONLOG_KAFKA_SECURE``
    unset or 1), or plaintext with ``CRONLOG_KAFKA_SECURE=0`` (the summary says so).

    Args:
        home: the directory of ``state/``.
        ops_kafka: runs ``ops/kafka``.
        say: prints a line for people.

    Raises:
        CronlogError: the broker did not start, or the one running is in the other mode.
    """
    if os.environ.get("KAFKA_BOOTSTRAP"):
        given = KafkaSettings()
        return BrokerAccess(
            given.bootstrap,
            False,
            given,
            summary=f"broker: {given.bootstrap} (KAFKA_BOOTSTRAP), security as the "
            f"CRONLOG_KAFKA_* settings say: {given.kafka_security_protocol}",
        )
    if os.environ.get("CRONLOG_KAFKA_SECURE", "1").strip() == "0":
        bootstrap, started = start_broker(ops_kafka, {"CRONLOG_KAFKA_SECURE": "0"}, say)
        return BrokerAccess(
            bootstrap,
            started,
            KafkaSettings(bootstrap=bootstrap),
            summary="isolation off (CRONLOG_KAFKA_SECURE=0): the broker takes every client "
            "without authentication, tasks included",
        )
    kafka = home / "state" / "kafka"
    admin_file, service_file = kafka / "admin.password", kafka / "cronlog.password"
    access.ensure_password(admin_file)
    service_password = access.ensure_password(service_file)
    bootstrap, started = start_broker(
        ops_kafka,
        {"CRONLOG_KAFKA_SECURE": "1", "CRONLOG_KAFKA_ADMIN_PASSWORD_FILE": str(admin_file)},
        say,
    )
    admin = access.admin_settings(KafkaSettings(bootstrap=bootstrap), _first_line(admin_file))
    return BrokerAccess(
        bootstrap,
        started,
        admin,
        service_env=access.service_env(service_file),
        summary="broker: every client authenticates (SASL, no anonymous listener), ACLs "
        f"enforced; services as User:{access.SERVICE_USER}, tasks without credentials",
        secure=True,
        service_password=service_password,
    )


def _first_line(path: Path) -> str:
    return path.read_text().splitlines()[0].strip()


def start_broker(
    ops_kafka: OpsKafka, extra_env: dict[str, str], say: Callable[[str], None]
) -> tuple[str, bool]:
    """Return ``(bootstrap, started_here)``: reuse the local broker if it runs, else start it
    (``say`` tells the terminal so first).

    Raises:
        CronlogError: it did not start, or runs in the other mode (``ops/kafka``'s message).
    """
    env: dict[str, Any] = {**os.environ, **extra_env}
    status = ops_kafka("status", capture_output=True, env=env)
    if status.returncode == 0 and status.stdout.strip():
        return status.stdout.strip().splitlines()[-1], False
    if status.returncode == STATUS_OTHER_MODE:
        raise CronlogError(status.stderr.strip().splitlines()[-1].removeprefix("ops/kafka: "))
    say("starting the local Kafka broker (ops/kafka start; the first start downloads the jars) …")
    started = ops_kafka("start", stdout=subprocess.PIPE, env=env)
    lines = started.stdout.strip().splitlines()
    if started.returncode != 0 or not lines:
        raise CronlogError(f"ops/kafka start failed (exit {started.returncode})")
    return lines[-1], True


def task_summary() -> tuple[bool, str]:
    """Return (isolated, the start line about the worker's tasks), from the settings the
    worker will read (``CRONLOG_TASK_*``): ``services/worker/sandbox.py``'s own line."""
    try:
        settings = WorkerSettings()
        reach = settings.reach()
    except ValueError as exc:  # the worker will refuse to start, naming the setting
        return False, f"the worker's task settings are refused: {exc}"
    _level, message, fields = isolation_line(
        settings.task_isolation, reach.user, reach.dirs, os.geteuid()
    )
    isolated = fields["action"] == "task_isolation"
    if isolated:
        return True, (
            f"tasks: exec/shell run as {fields['task_user']} (uid {fields['task_uid']}), each "
            f"attempt in a private directory under {fields['task_dirs']}; state/ is 0700"
        )
    return False, f"{message} ({fields['reason']}); state/ is 0700"
