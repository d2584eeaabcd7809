"""Session-wide fixtures: a real Kafka broker (testcontainers where Docker runs, else ops/kafka)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parent.parent

# xdist's workers start with COLUMNS=80 (the controller's width); the CLI's consoles read it
# once at import and would wrap the lines tests read, as no pipe of a user's does.
os.environ.pop("COLUMNS", None)

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
OWN_BROKER_MODULES = frozenset(
    {
        "tests/chaos/test_broker_kill.py",
        "tests/chaos/test_chaos.py",
        "tests/integration/test_broker_outage.py",
        "tests/integration/test_disk_bounded.py",
        "tests/integration/test_isolation_compose.py",
        "tests/integration/test_isolation_default.py",
        "tests/integration/test_sasl.py",
    }
)
"""The modules whose tests start brokers of their own (each marked ``own_broker``)."""


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``--dist loadgroup`` (``ops/test``): one work unit per test module, so its
    module-scoped fixtures are built once on one worker, and one unit for all of
    ``OWN_BROKER_MODULES``, so they run one after another on one worker.

    pytest-xdist's own loadgroup reads ``xdist_group`` marks by rewriting ``item._nodeid``,
    which pytest 9.2 no longer uses; its documented scheduler hook is used instead.
    """
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleOrOwnBroker(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return OWN_BROKER_GROUP if module in OWN_BROKER_MODULES else module

    return ModuleOrOwnBroker(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The ``own_broker`` tests first: they are the longest, and a JVM start each is the
    suite's heaviest CPU burst (sorted, so also without xdist).

    Raises:
        pytest.UsageError: a module marked ``own_broker`` is not in ``OWN_BROKER_MODULES`` or
            the other way round (the scheduler, which sees no marks, reads that list).
    """
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        marked = item.get_closest_marker("own_broker") is not None
        if marked != (module in OWN_BROKER_MODULES):
            raise pytest.UsageError(
                f"{module}: its own_broker mark and tests/conftest.py's OWN_BROKER_MODULES "
                "disagree; a module that starts brokers of its own has both"
            )
    items.sort(key=lambda item: item.get_closest_marker("own_broker") is None)
