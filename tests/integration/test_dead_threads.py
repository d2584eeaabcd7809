"""Nothing dies quietly: the API's readers survive topics whose partitions have no leader yet,
a fatal error in a reader thread ends the API process (exit 70, a clear last line), and a
reader that hangs makes /healthz answer 503 so that a supervisor restarts the process."""

from __future__ import annotations

import logging
import time
import uuid
from pathlib import Path

import httpx
import pytest

from services.api.readmodel.reader import ReadModel
from services.api.routes.logs import LogModel
from services.api.settings import ApiSettings
from services.logging_setup import LineFormatter
from tests.integration.harness import Cluster
from tests.integration.helpers import create_topics_now, free_port, wait_for
from topology.kafka.retrying import FATAL_EXIT

pytestmark = pytest.mark.broker


def test_readers_started_as_their_topics_are_created_catch_up(
    kafka_bootstrap: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    troubled, example = 0, ""
    for i in range(5):
        settings = ApiSettings(
            bootstrap=kafka_bootstrap,
            topic_prefix=f"lead{uuid.uuid4().hex[:8]}.",
            partitions=12,
            api_state_dir=tmp_path / f"rm{i}",
        )
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="cronlog"):
            create_topics_now(settings)
            models = [
                ReadModel(settings, settings.state_path()),
                LogModel(settings, settings.logs_state_path()),
            ]
            for model in models:
                model.start()  # within milliseconds of the creation: leaders may be missing
            try:
                wait_for(
                    lambda ms=models: all(m.ready for m in ms), 60, f"round {i}: readers ready"
                )
                assert all(m.working for m in models)
                assert not any(m.stuck(10) for m in models)
            finally:
                for model in models:
                    model.stop()
        met = [
            LineFormatter("test").format(r)
            for r in caplog.records
            if getattr(r, "action", None) == "broker_trouble"
        ]
        troubled += bool(met)
        example = met[0] if met else example
    print(f"rounds in which a reader met (and retried) a transient error: {troubled}/5")
    print(f"e.g. {example}")


def test_a_fatal_error_in_the_read_model_ends_the_api_with_70(cluster: Cluster) -> None:
    proc = cluster.api(free_port(), CRONLOG_API_TEST_FAULT="fatal")
    assert proc.popen is not None
    rc = proc.popen.wait(90)
    assert rc == FATAL_EXIT
    lines = proc.log_tail(200).splitlines()
    fatal = [ln for ln in lines if "action=fatal" in ln]
    assert len(fatal) == 1
    assert " level=critical " in fatal[0]
    assert " action=fatal thread=read-model " in fatal[0]
    assert "injected by CRONLOG_API_TEST_FAULT" in fatal[0]
    assert "ending the process (exit 70)" in fatal[0]
    # the traceback is the line's exc field, escaped: no raw traceback line in the log
    assert "\\ncimpl.KafkaException: KafkaError{FATAL,code=_FATAL" in fatal[0]
    assert not any(ln.startswith(("Traceback", "cimpl.")) for ln in lines)


def test_a_stuck_read_model_makes_healthz_and_readyz_503(cluster: Cluster) -> None:
    port = free_port()
    cluster.api(port, CRONLOG_API_TEST_FAULT="stall", CRONLOG_API_STALL_S="3")
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as api:

        def health() -> httpx.Response | None:
            # on a loaded box another reader may also miss a beat for a moment: wait for a
            # sample where the stalled one alone is stuck
            try:
                r = api.get("/healthz")
            except httpx.TransportError:
                return None
            stuck_only_read_model = r.status_code == 503 and r.json()["threads"] == ["read-model"]
            return r if stuck_only_read_model else None

        started = time.monotonic()
        stuck = wait_for(health, 60, "/healthz 503 naming the read model alone")
        assert stuck.json() == {"status": "stuck", "threads": ["read-model"]}
        ready = api.get("/readyz")
        assert ready.status_code == 503
        threads = {t["thread"]: t for t in ready.json()["threads"]}
        assert threads["read-model"]["beat_age_s"] >= 3  # rounded to 0.1 s
        assert threads["log-model"]["beat_age_s"] < threads["read-model"]["beat_age_s"]
    print(f"/healthz 503 after {time.monotonic() - started:.1f}s")
