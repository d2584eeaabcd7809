"""Fixtures shared by the unit tests: a read model (or its bare store) fed by hand and an app
without Kafka (the API's), and the worker's Python pool (the task executor's)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from fastapi.testclient import TestClient

from services.api.app import create_app
from services.api.readmodel.reader import ReadModel
from services.api.readmodel.store import Store
from services.api.settings import ApiSettings
from services.worker.kinds import PythonPool
from tests.unit.authed import authed


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A fresh, empty read-model store (rocksdict) that tests feed run-events by hand."""
    s = Store(tmp_path / "store")  # beside, never inside, the rm fixture's directory
    yield s
    s.close()


@pytest.fixture
def rm(tmp_path: Path) -> Iterator[ReadModel]:
    """A read model over a fresh rocksdict, never started: tests feed it RunEvents."""
    settings = ApiSettings(api_state_dir=tmp_path / "rm")
    model = ReadModel(settings, settings.state_path())
    yield model
    model.store.close()


@pytest.fixture
def client(rm: ReadModel) -> TestClient:
    """The API over ``rm``; its lifespan is not entered, so no Kafka client is made."""
    return authed(create_app(rm.settings, read_model=rm))


@pytest.fixture
def offline(rm: ReadModel) -> Iterator[TestClient]:
    """The API over ``rm`` with a real producer whose broker never answers: a request is
    validated in full (the core's checks included) and a valid write ends 503 after 0.3 s."""
    settings = rm.settings.model_copy(update={"api_delivery_timeout_s": 0.3})
    producer = Producer({"bootstrap.servers": "127.0.0.1:9", "log_level": 0})
    app = create_app(settings, read_model=rm, producer=producer)
    yield authed(app)
    app.state.sender.close(0)


@pytest.fixture(scope="module")
def pool() -> Iterator[PythonPool]:
    """The worker's Python pool (one process) for python tasks, shared by a module's tests."""
    p = PythonPool(1)
    yield p
    p.shutdown()
