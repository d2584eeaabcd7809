"""Fixtures shared by the API unit tests: a read model fed by hand and an app without Kafka."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from services.api.app import create_app
from services.api.read_model import ReadModel
from services.api.settings import ApiSettings


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
    return TestClient(create_app(rm.settings, read_model=rm))
