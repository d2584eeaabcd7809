"""Per-test isolation: a fresh topic prefix, topics created, processes stopped afterwards."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from selenium.webdriver.remote.webdriver import WebDriver

from tests.integration.browser import chromium
from tests.integration.harness import Cluster, EventLog
from tests.integration.helpers import start_api
from topology.kafka.bootstrap import ensure_topics
from topology.kafka.config import KafkaSettings

pytestmark = pytest.mark.broker


@pytest.fixture
def cluster(
    kafka_bootstrap: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Cluster]:
    """An isolated cronlog (own topics) on the session's broker; processes stopped at the end.

    ``cronlog`` CLI subprocesses of the test send the cluster's admin token
    (``CRONLOG_API_TOKEN``)."""
    settings = KafkaSettings(
        bootstrap=kafka_bootstrap, topic_prefix=f"t{uuid.uuid4().hex[:8]}.", partitions=4
    )
    ensure_topics(settings)
    c = Cluster(settings, tmp_path)
    monkeypatch.setenv("CRONLOG_API_TOKEN", c.token())
    yield c
    c.stop_all()
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        for proc in c.procs:
            print(f"----- {proc.name} {proc.log_path.name} -----\n{proc.log_tail()}")


@pytest.fixture
def events(cluster: Cluster) -> Iterator[EventLog]:
    log = EventLog(cluster.settings)
    yield log
    log.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


@pytest.fixture
def api(cluster: Cluster) -> Iterator[httpx.Client]:
    """A scheduler, a worker and an API on a free port; an HTTP client once /readyz answers."""
    cluster.scheduler()
    cluster.worker()
    client = start_api(cluster)
    yield client
    client.close()


@pytest.fixture
def driver() -> Iterator[WebDriver]:
    """A headless Chromium (Debian's) driven through its chromedriver (``browser.py``)."""
    d = chromium()
    yield d
    d.quit()
