"""Small builders and probes shared by the integration tests: waiting, ports, topics, a started
API, its ``/metrics`` scrape, job specs."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

import httpx
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from prometheus_client.parser import text_string_to_metric_families

from cronlog.model import CatchupPolicy, JobSpec, RetryPolicy, Schedule, ScheduleKind, main_task
from tests.integration.harness import Cluster
from topology.kafka.config import KafkaSettings
from topology.kafka.topics import topic_specs

T = TypeVar("T")


def wait_for(probe: Callable[[], T | None], timeout: float, what: str, every: float = 0.2) -> T:
    """Poll ``probe`` until it returns something truthy, and return that.

    Raises:
        AssertionError: nothing truthy within ``timeout`` seconds, naming ``what``.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = probe()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"{what}: not within {timeout}s")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def create_topics_now(settings: KafkaSettings) -> None:
    """Create every cronlog topic of ``settings``; return once the controller accepted them,
    without waiting for their partitions' leaders (what a process sees that lost the creation
    race to another one; ``ensure_topics`` waits for them)."""
    admin = AdminClient(settings.admin_config())
    futures = admin.create_topics(
        [NewTopic(s.name, s.partitions, 1, config=s.config) for s in topic_specs(settings)]
    )
    for future in futures.values():
        future.result(30)


def start_api(
    cluster: Cluster,
    timeout: float = 90,
    tenant: str = "default",
    role: str = "admin",
    **extra: str,
) -> httpx.Client:
    """Start an API process of ``cluster`` on a free port; return a client (with a token of
    ``tenant`` and ``role``) once /readyz answers 200; ``extra``: environment of the API.

    Raises:
        AssertionError: not ready within ``timeout`` seconds.
    """
    port = free_port()
    cluster.api(port, **extra)
    client = httpx.Client(
        base_url=f"http://127.0.0.1:{port}",
        timeout=30,
        headers={"Authorization": f"Bearer {cluster.token(tenant, role)}"},
    )
    cluster.clients.append(client)  # closed with the cluster's processes

    def ready() -> bool:
        try:
            return client.get("/readyz").status_code == 200
        except httpx.TransportError:
            return False

    wait_for(ready, timeout, "API ready", every=0.5)
    return client


def cron_job(
    expr: str,
    command: tuple[str, ...] = ("true",),
    *,
    tz: str = "UTC",
    catchup: CatchupPolicy = CatchupPolicy.LATEST,
    max_attempts: int = 1,
    max_active_runs: int = 256,
) -> JobSpec:
    """A cron job spec. Fold-only tests run no worker, so runs stay active: the cap is high."""
    return JobSpec(
        name=f"cron {expr}",
        schedule=Schedule(ScheduleKind.CRON, expr, tz, catchup=catchup),
        task_specs=main_task(command),
        retry_policy=RetryPolicy(max_attempts=max_attempts, backoff=timedelta(seconds=1)),
        max_active_runs=max_active_runs,
    )


def once_job(run_at: datetime, command: tuple[str, ...] = ("true",)) -> JobSpec:
    """A one-off job spec."""
    return JobSpec(
        name="once",
        schedule=Schedule(ScheduleKind.ONCE, run_at=run_at),
        task_specs=main_task(command),
    )


def whole_seconds(start: datetime, end: datetime, step: int = 1) -> list[datetime]:
    """Every instant in [start, end] on a multiple of ``step`` seconds of the minute."""
    t = start.replace(microsecond=0)
    if t < start:
        t += timedelta(seconds=1)
    out = []
    while t <= end:
        if t.second % step == 0:
            out.append(t)
        t += timedelta(seconds=1)
    return out


Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]
"""A ``/metrics`` scrape: sample name -> its sorted label pairs -> value."""


def platform(cluster: Cluster, api: httpx.Client) -> httpx.Client:
    """A client of ``api``'s API with a platform token (``/metrics`` names every tenant's jobs:
    a tenant's token gets 403)."""
    client = httpx.Client(
        base_url=str(api.base_url),
        timeout=30,
        headers={"Authorization": f"Bearer {cluster.token('*', 'viewer')}"},
    )
    cluster.clients.append(client)  # closed with the cluster
    return client


def scrape(api: httpx.Client) -> Samples:
    """Every sample of the API's ``/metrics`` (``api`` with a platform token): name -> sorted
    label pairs -> value."""
    answer = api.get("/metrics")
    assert answer.status_code == 200, answer.text
    out: Samples = {}
    for family in text_string_to_metric_families(answer.text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def sample(samples: Samples, name: str, **labels: str) -> float:
    """The value of ``name`` with exactly ``labels`` in ``samples``; 0.0 when absent."""
    return samples.get(name, {}).get(tuple(sorted(labels.items())), 0.0)


def register(api: httpx.Client, body: dict[str, Any]) -> None:
    """Register the job ``body`` (``POST /api/v1/jobs``), asserting it is created (201)."""
    answer = api.post("/api/v1/jobs", json=body)
    assert answer.status_code == 201, answer.text
