"""API test clients that carry a bearer token (every /api/v1 request is authenticated)."""

from __future__ import annotations

import tempfile
from functools import cache
from pathlib import Path

from fastapi import FastAPI
from fastapi.testclient import TestClient

from services.api.access.auth import Authenticator, Role, add_token

TOKENS = Path(tempfile.mkdtemp(prefix="cronlog-tokens-")) / "tokens.json"
"""One tokens file for the unit tests' apps."""


def token(tenant: str = "default", role: str = "admin") -> str:
    """Return a static token of ``tenant`` with ``role`` (made once, kept in ``TOKENS``)."""
    return _token(tenant, role)


@cache
def _token(tenant: str, role: str) -> str:  # positional: one cache entry per pair
    return add_token(TOKENS, f"{tenant}-{role}", tenant, Role.parse(role))


def authed(app: FastAPI, tenant: str = "default", role: str = "admin") -> TestClient:
    """Return a client of ``app`` whose requests carry a token of ``tenant`` and ``role``."""
    app.state.authenticator = Authenticator(TOKENS)
    return TestClient(app, headers={"Authorization": f"Bearer {token(tenant, role)}"})
