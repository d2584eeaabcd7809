"""Test harness: cronlog processes as real subprocesses against a real broker, and log readers."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from cronlog import commands as cmd
from cronlog import events as ev
from services.api.access.auth import Role, add_token
from topology.kafka.config import KafkaSettings
from topology.kafka.topics import Topics
from topology.wire.codec import decode_dead_letter, decode_event, encode_command

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Proc:
    """A cronlog service subprocess (``python -m services.<name>``)."""

    name: str
    env: dict[str, str]
    log_path: Path
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        """Start (or restart) the process; its output is appended to ``log_path``."""
        with self.log_path.open("ab") as log:  # the child keeps its own copy of the fd
            self.popen = subprocess.Popen(
                [sys.executable, "-m", f"services.{self.name}"],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    def kill9(self) -> None:
        """SIGKILL the process (no shutdown of any kind)."""
        if self.popen and self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait()

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds."""
        if self.popen and self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill9()

    def metrics_url(self, timeout: float = 30.0) -> str:
        """Return the URL of the process's Prometheus metrics, from its last
        ``action=metrics_serving`` log line (the cluster serves them on an ephemeral port).

        Raises:
            TimeoutError: no such line within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
            urls = re.findall(r"action=metrics_serving url=(\S+)", text)
            if urls:
                return urls[-1]
            time.sleep(0.1)
        raise TimeoutError(f"{self.name}: no action=metrics_serving line\n{self.log_tail()}")

    def log_tail(self, n: int = 60) -> str:
        """Return the last ``n`` lines of the process log."""
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])


SECURITY_FIELDS = (
    "kafka_security_protocol",
    "kafka_sasl_mechanism",
    "kafka_sasl_username",
    "kafka_ssl_ca_location",
    "kafka_ssl_certificate_location",
    "kafka_ssl_key_location",
)


def client_env(settings: KafkaSettings) -> dict[str, str]:
    """Return the ``CRONLOG_KAFKA_*`` security variables that give a subprocess the same
    Kafka clients as ``settings`` (protocol, SASL, TLS)."""
    env = {f"CRONLOG_{name.upper()}": str(getattr(settings, name)) for name in SECURITY_FIELDS}
    env["CRONLOG_KAFKA_SASL_PASSWORD"] = settings.kafka_sasl_password.get_secret_value()
    return env


@dataclass
class Cluster:
    """One test's isolated cronlog: its own topic prefix, state dirs and processes."""

    settings: KafkaSettings
    tmp: Path
    procs: list[Proc] = field(default_factory=list)
    clients: list[Any] = field(default_factory=list)
    """Things with a ``close()`` (HTTP clients) closed by ``stop_all``."""
    _tokens: dict[tuple[str, str], str] = field(default_factory=dict)

    @property
    def topics(self) -> Topics:
        return Topics.of(self.settings)

    def env(self, **extra: str) -> dict[str, str]:
        """Environment for a service subprocess of this cluster."""
        env = dict(os.environ)
        env.update(
            {
                "KAFKA_BOOTSTRAP": self.settings.bootstrap,
                "CRONLOG_TOPIC_PREFIX": self.settings.topic_prefix,
                "CRONLOG_PARTITIONS": str(self.settings.partitions),
                "PYTHONUNBUFFERED": "1",
                "CRONLOG_METRICS_PORT": "0",  # ephemeral: Proc.metrics_url() finds it
                # the tests' tasks write marker files into the test's tmp dir (root's, 0700):
                # tasks run as the worker's user here. The default (isolated) path has its
                # own tests: tests/integration/test_isolation_default.py.
                "CRONLOG_TASK_ISOLATION": "off",
            }
        )
        env.update(client_env(self.settings))
        env["CRONLOG_API_TOKENS_FILE"] = str(self.tokens_file)
        env["CRONLOG_API_TOKEN"] = self.token()
        env.update(extra)
        return env

    @property
    def tokens_file(self) -> Path:
        """The API processes' static tokens (``services.api.access.auth``)."""
        return self.tmp / "api-tokens.json"

    def token(self, tenant: str = "default", role: str = "admin") -> str:
        """Return a static API token of ``tenant`` with ``role`` (made once per cluster)."""
        key = (tenant, role)
        if key not in self._tokens:
            self._tokens[key] = add_token(
                self.tokens_file, f"{tenant}-{role}", tenant, Role.parse(role)
            )
        return self._tokens[key]

    def scheduler(self, name: str = "s1", **extra: str) -> Proc:
        """Start a scheduler process with a persistent state dir under the test's tmp dir."""
        proc = Proc(
            "scheduler",
            self.env(
                CRONLOG_INSTANCE_ID=f"{self.settings.topic_prefix}{name}",
                CRONLOG_STATE_DIR=str(self.tmp / f"state-{name}"),
                **extra,
            ),
            self.tmp / f"{name}.log",
        )
        self.procs.append(proc)
        return proc.start()

    def worker(self, name: str = "w1", **extra: str) -> Proc:
        """Start a worker process."""
        proc = Proc(
            "worker",
            self.env(CRONLOG_WORKER_ID=f"{self.settings.topic_prefix}{name}", **extra),
            self.tmp / f"{name}.log",
        )
        self.procs.append(proc)
        return proc.start()

    def api(self, port: int, name: str = "api", **extra: str) -> Proc:
        """Start an API process on ``port`` with its read model under the test's tmp dir."""
        proc = Proc(
            "api",
            self.env(
                CRONLOG_API_PORT=str(port),
                CRONLOG_API_STATE_DIR=str(self.tmp / f"state-{name}"),
                **extra,
            ),
            self.tmp / f"{name}.log",
        )
        self.procs.append(proc)
        return proc.start()

    def send(self, job_id: str, command: cmd.Command, idem_key: str | None = None) -> str:
        """Append one command for ``job_id``; returns its idem_key."""
        idem_key = idem_key or uuid.uuid4().hex
        self.send_raw(
            job_id.encode(),
            encode_command(cmd.Envelope(idem_key=idem_key, job_id=job_id, command=command)),
        )
        return idem_key

    def send_raw(self, key: bytes | None, value: bytes, partition: int | None = None) -> None:
        """Append raw bytes to the commands topic (murmur2 partitioning unless given)."""
        producer = Producer(self.settings.producer_config())
        if partition is None:
            producer.produce(self.topics.commands, key=key, value=value)
        else:
            producer.produce(self.topics.commands, key=key, value=value, partition=partition)
        producer.flush(10)

    def stop_all(self, timeout: float = 10.0) -> None:
        """SIGTERM every process at once, SIGKILL what is left after ``timeout`` seconds.

        At once, not one after the other: 30 workers stopped in turn under load took longer
        than a test's teardown may (pytest-timeout, 120 s).
        """
        running = [p for p in self.procs if p.popen is not None and p.popen.poll() is None]
        for proc in running:
            assert proc.popen is not None
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.popen.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in running:
            assert proc.popen is not None
            try:
                proc.popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill9()
        for client in self.clients:  # HTTP clients of the test (start_api)
            client.close()


def planned_exit(name: str, returncode: int | None, last_line: str) -> bool:
    """Whether a process's own exit is one a scheduler takes on purpose, to be restarted.

    Three, all a scheduler's exit 70 (README, "Known limitations"): its watchdog ended a
    transactional call librdkafka left blocked in a broker outage (``action=fatal
    thread=fold … blocked``; librdkafka #5456, #5511); an abort that timed out on every try
    after such an outage (``action=fenced … abort_transaction did not complete``); or its
    consumer was fenced as a static member by its own rejoin after a coordinator stall
    (``action=fenced … Static consumer fenced``; KAFKA-20985). ``last_line`` is its last
    ``action=fatal``/``action=fenced`` line.
    """
    if not name.startswith("s") or returncode != 70:
        return False
    watchdog = "action=fatal" in last_line and "thread=fold" in last_line and "blocked" in last_line
    fenced = "action=fenced" in last_line and (
        "Static consumer fenced" in last_line or "abort_transaction did not complete" in last_line
    )
    return watchdog or fenced


def last_fatal_line(log_path: Path) -> str:
    """The last ``action=fatal`` or ``action=fenced`` line of a process's log ("" if none)."""
    lines = [
        line
        for line in log_path.read_text(errors="replace").splitlines()
        if "action=fatal" in line or "action=fenced" in line
    ]
    return lines[-1] if lines else ""


class Supervisor:
    """Restarts the cluster's processes that exit by themselves, as ``./ops/up`` does, and
    records each exit (name, exit status, its last ``action=fatal``/``action=fenced`` line).

    A process ends itself only on purpose (exit 70, ``topology.kafka.retrying.fatal``); tests that
    allow that assert on ``exits``.
    """

    def __init__(self, cluster: Cluster, every_s: float = 0.5) -> None:
        self.cluster = cluster
        self.every_s = every_s
        self.exits: list[tuple[str, int, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="supervisor", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            for proc in list(self.cluster.procs):
                if proc.popen is None or proc.popen.poll() is None or self._stop.is_set():
                    continue
                fatal = last_fatal_line(proc.log_path)
                self.exits.append((proc.name, proc.popen.returncode, fatal))
                proc.start()

    def stop(self) -> None:
        """Stop restarting (before the cluster is stopped)."""
        self._stop.set()
        self._thread.join()


class TopicReader:
    """Reads a whole topic from the beginning, incrementally (manual assignment, no group)."""

    def __init__(self, settings: KafkaSettings, topic: str) -> None:
        self.consumer = Consumer(settings.consumer_config(f"reader-{uuid.uuid4().hex}"))
        meta = self.consumer.list_topics(topic, timeout=10).topics[topic]
        self.consumer.assign([TopicPartition(topic, p, 0) for p in meta.partitions])
        self.records: list[bytes] = []

    def poll(self, seconds: float = 0.5) -> None:
        """Read whatever arrives within ``seconds``."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            msg = self.consumer.poll(0.1)
            if msg is not None and not msg.error():
                self.records.append(msg.value())

    def close(self) -> None:
        self.consumer.close()


class EventLog(TopicReader):
    """The run-events topic, decoded."""

    def __init__(self, settings: KafkaSettings) -> None:
        super().__init__(settings, Topics.of(settings).run_events)

    def events(self, job_id: str | None = None) -> list[ev.RunEvent]:
        """Every RunEvent read so far (optionally of one job), in read order."""
        decoded = [decode_event(r) for r in self.records]
        return [e for e in decoded if job_id is None or e.job_id == job_id]

    def of_type(self, kind: type, job_id: str | None = None) -> list[ev.RunEvent]:
        """RunEvents whose event is a ``kind``."""
        return [e for e in self.events(job_id) if isinstance(e.event, kind)]

    def wait_until(self, predicate: Callable[[EventLog], bool], timeout: float) -> bool:
        """Poll until ``predicate(self)`` holds or ``timeout`` seconds pass."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.poll(0.3)
            if predicate(self):
                return True
        return False


class DeadLetterLog(TopicReader):
    """The dead-letters topic, decoded."""

    def __init__(self, settings: KafkaSettings) -> None:
        super().__init__(settings, Topics.of(settings).dead_letters)

    def letters(self) -> list:
        return [decode_dead_letter(r) for r in self.records]
