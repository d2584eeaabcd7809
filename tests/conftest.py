"""Session-wide fixtures: a real Kafka broker (testcontainers where Docker runs, else ops/kafka)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parent.parent

# Property tests assert values, never speed: no per-example deadline and no "too slow" health
# check, which a loaded box (or xdist's workers beside the broker) trips on data that is fine.
settings.register_profile("cronlog", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("cronlog")


def _docker_available() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """``host:port`` of a real broker.

    Order: ``KAFKA_BOOTSTRAP`` if set; testcontainers' Kafka where a Docker engine answers;
    else the project's own broker (``ops/kafka start``, left running for later sessions).
    """
    if os.environ.get("KAFKA_BOOTSTRAP"):
        yield os.environ["KAFKA_BOOTSTRAP"]
        return
    if _docker_available():
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer("apache/kafka:4.3.1").with_kraft() as kafka:
            yield kafka.get_bootstrap_server()
        return
    out = subprocess.run(
        [str(ROOT / "ops" / "kafka"), "start"], check=True, text=True, stdout=subprocess.PIPE
    )
    yield out.stdout.strip().splitlines()[-1]


OWN_BROKER_GROUP = "own-broker"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group the tests for ``pytest -n N --dist loadgroup`` (pytest-xdist; ``ops/test``).

    A module's tests stay on one worker (its module-scoped fixtures are built once, as
    ``--dist loadfile`` does); the tests that start brokers of their own (``own_broker``) share
    one group, so they run one after another on one worker, and first: they are the longest,
    and a JVM start each is the suite's heaviest CPU burst. Without xdist the marks do nothing
    but this order.
    """
    for item in items:
        own = item.get_closest_marker("own_broker") is not None
        group = OWN_BROKER_GROUP if own else item.nodeid.split("::", 1)[0]
        item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=lambda item: item.get_closest_marker("own_broker") is None)
