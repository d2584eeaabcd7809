"""``cronlog up``'s own tokens (issue 24, item 4): the CLI's admin token and a platform viewer
token for Prometheus, each kept 0600 in ``state/`` and re-used; ``/metrics`` takes the second
and refuses the first, so the README's ``curl`` with ``state/metrics-token`` works as written."""

from __future__ import annotations

import stat
from pathlib import Path

from fastapi.testclient import TestClient

from services.api.access.auth import PLATFORM, Authenticator, Role
from services.api.app import create_app
from services.api.readmodel.reader import ReadModel
from services.cli.tokens_cmd import METRICS_TOKEN_FILE, local_admin_token, local_metrics_token


def test_up_keeps_a_platform_viewer_token_for_metrics_beside_the_admin_one(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    admin, metrics = local_admin_token(state), local_metrics_token(state)
    assert admin != metrics
    assert (state / METRICS_TOKEN_FILE).read_text().strip() == metrics
    assert stat.S_IMODE((state / METRICS_TOKEN_FILE).stat().st_mode) == 0o600
    who = Authenticator(state / "api-tokens.json")
    viewer = who.authenticate(metrics)
    assert (viewer.tenant, viewer.role, viewer.subject) == (
        PLATFORM,
        Role.VIEWER,
        "local-prometheus",
    )
    assert who.authenticate(admin).tenant == "default"
    assert local_metrics_token(state) == metrics  # made once, re-used
    (state / METRICS_TOKEN_FILE).write_text("clt_forgotten\n")  # no longer known to the API
    again = local_metrics_token(state)
    assert again != metrics and who.authenticate(again).subject == "local-prometheus-1"


def test_metrics_answers_ups_metrics_token_and_refuses_the_tenants(
    rm: ReadModel, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    app = create_app(rm.settings, read_model=rm)
    app.state.authenticator = Authenticator(state / "api-tokens.json")
    admin, metrics = local_admin_token(state), local_metrics_token(state)
    client = TestClient(app)
    scraped = client.get("/metrics", headers={"Authorization": f"Bearer {metrics}"})
    assert scraped.status_code == 200 and "cronlog_run_events_total" in scraped.text
    refused = client.get("/metrics", headers={"Authorization": f"Bearer {admin}"})
    assert refused.status_code == 403
