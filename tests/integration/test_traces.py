"""Traces from real processes (docs/architecture.md, "Traces"): a scheduler and a worker started
with ``OTEL_TRACES_EXPORTER=console`` print their spans, with the lease's attributes, in their
logs; without it they print none."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from cronlog import commands as cmd
from cronlog import events as ev
from tests.integration.harness import Cluster, EventLog
from tests.integration.helpers import once_job

pytestmark = pytest.mark.broker
CONSOLE = {"OTEL_TRACES_EXPORTER": "console", "OTEL_BSP_SCHEDULE_DELAY": "200"}


def _spans(log: Path) -> list[dict[str, Any]]:
    """Every span the console exporter wrote (an indented JSON object per span) in ``log``."""
    text, found = log.read_text(errors="replace"), []
    decoder = json.JSONDecoder()
    start = text.find('{\n    "name": ')
    while start >= 0:
        span, end = decoder.raw_decode(text, start)
        found.append(span)
        start = text.find('{\n    "name": ', end)
    return found


def _one(spans: list[dict[str, Any]], name: str, **attrs: object) -> dict[str, Any]:
    matching = [
        s
        for s in spans
        if s["name"] == name and all(s["attributes"].get(k) == v for k, v in attrs.items())
    ]
    assert len(matching) == 1, (name, attrs, [s["name"] for s in spans])
    return matching[0]


def test_a_failing_attempt_is_traced_from_grant_to_exit_code(
    cluster: Cluster, events: EventLog
) -> None:
    scheduler = cluster.scheduler(**CONSOLE)
    worker = cluster.worker(**CONSOLE)
    run_at = datetime.now(UTC) + timedelta(seconds=2)
    spec = replace(
        once_job(run_at, ("sh", "-c", "sleep 1.6; exit 3")), lease_ttl=timedelta(seconds=3)
    )  # renewed every 0.5 s
    cluster.send("traced", cmd.RegisterJob(spec=spec))
    assert events.wait_until(lambda log: bool(log.of_type(ev.RunFailed, "traced")), 90)
    grant = events.of_type(ev.TaskClaimed, "traced")[0].event
    assert isinstance(grant, ev.TaskClaimed)
    cluster.stop_all()  # SIGTERM: each provider flushes at exit
    lease = {
        "job_id": "traced",
        "run_id": grant.run_id,
        "task": "main",
        "attempt": 1,
        "epoch": grant.epoch,
        "worker_id": grant.worker_id,
    }
    done = _spans(worker.log_path)
    claim = _one(done, "claim", **lease)
    execute = _one(done, "task.execute", **lease)
    assert (execute["attributes"]["exit_code"], execute["attributes"]["failure_kind"]) == (
        3,
        "nonzero_exit",
    )
    assert execute["status"]["status_code"] == "ERROR"
    assert execute["parent_id"] == claim["context"]["span_id"]
    renewals = [s for s in done if s["name"] == "lease.renew"]
    assert len(renewals) >= 2
    assert {s["parent_id"] for s in renewals} == {execute["context"]["span_id"]}
    assert all({k: s["attributes"][k] for k in lease} == lease for s in renewals)
    folded = _spans(scheduler.log_path)
    granted = _one(folded, "claim", **lease)
    decision = next(s for s in folded if s["context"]["span_id"] == granted["parent_id"])
    assert decision["name"] == "fold.command"
    assert decision["attributes"]["job_id"] == "traced"
    batch = next(s for s in folded if s["context"]["span_id"] == decision["parent_id"])
    assert batch["name"] == "fold.batch"
    assert batch["attributes"]["decisions"] >= 1
    completed = _one(folded, "fold.command", command="CompleteTask", **lease)
    assert completed["attributes"]["events"] >= 2  # TaskFailed, RunFailed
    assert {s["resource"]["attributes"]["service.name"] for s in folded} == {"cronlog-scheduler"}


def test_without_otel_variables_nothing_is_traced(cluster: Cluster, events: EventLog) -> None:
    scheduler = cluster.scheduler(OTEL_TRACES_EXPORTER="none")
    worker = cluster.worker(OTEL_TRACES_EXPORTER="none")
    cluster.send("quiet", cmd.RegisterJob(spec=once_job(datetime.now(UTC) + timedelta(seconds=2))))
    assert events.wait_until(lambda log: bool(log.of_type(ev.RunSucceeded, "quiet")), 90)
    cluster.stop_all()
    assert _spans(scheduler.log_path) == _spans(worker.log_path) == []
