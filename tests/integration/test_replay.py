"""Replay against a live cluster: a schema-only consumer agrees with the API, ``replay --verify``
matches the live table and run-events (and catches a tampered table), ``--until`` rebuilds an
earlier state, ``--to-topic`` re-emits run-events identically."""

from __future__ import annotations

import ast
import importlib.util
import sys
import time
from collections import defaultdict
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
from confluent_kafka import Producer, TopicPartition
from rocksdict import Options, Rdict
from typer.testing import CliRunner

from services.cli.main import app as cli
from services.cli.replay import ReplayOptions, run_replay
from services.cli.replay_io import recheck_snapshots
from tests.integration.harness import Cluster, TopicReader
from tests.integration.helpers import wait_for
from tests.old_shape import as_v2, v2_record
from topology.kafka.bootstrap import ensure_topics
from topology.kafka.log_reader import ends_reached, reader
from topology.kafka.partitioning import partition_for
from topology.snapshots.log import write_snapshot
from topology.snapshots.snapshot import Entry, PartitionSnapshot
from topology.wire.codec import decode_event
from topology.wire.state_codec import dump_state, load_state

pytestmark = [pytest.mark.broker, pytest.mark.timeout(300)]
CONSUMER = Path(__file__).resolve().parents[2] / "examples" / "history_consumer.py"


def _history_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("history_consumer", CONSUMER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being created
    spec.loader.exec_module(module)
    return module


def test_the_history_consumer_imports_nothing_of_cronlog() -> None:
    tree = ast.parse(CONSUMER.read_text())
    roots = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    roots |= {
        (node.module or "").split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level == 0
    }
    assert roots & {"cronlog", "topology", "services", "tests"} == set()
    assert {"fastavro", "confluent_kafka"} <= roots


def _table_value(state_dir: Path, key: bytes) -> bytes:
    db = Rdict(str(state_dir / "jobs"), options=Options(raw_mode=True))
    try:
        return bytes(db[key])
    finally:
        db.close()


def _runs(api: httpx.Client, job_id: str) -> list[dict[str, Any]]:
    return list(api.get(f"/api/v1/jobs/{job_id}/runs", params={"limit": 100}).json()["runs"])


def _instant(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value.astimezone(UTC)
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def _as_api_sees_it(run: Any) -> dict[str, Any]:
    """The schema-only consumer's run, in the API's vocabulary."""
    return {
        "state": run.state,
        "trigger": run.trigger,
        "scheduled_for": run.scheduled_for,
        "exit_code": run.exit_code,
        "failure_kind": run.failure_kind,
        "attempts": [
            (a.task, a.attempt, a.state, a.worker_id, a.epoch, a.exit_code, a.failure_kind)
            for a in run.attempts
        ],
    }


def _api_run(api: httpx.Client, run_id: str) -> dict[str, Any]:
    doc = api.get(f"/api/v1/runs/{run_id}").json()
    return {
        "state": doc["state"],
        "trigger": doc["trigger"],
        "scheduled_for": _instant(doc["scheduled_for"]),
        "exit_code": doc["exit_code"],
        "failure_kind": doc["failure_kind"],
        "attempts": [
            (
                a["task"],
                a["attempt"],
                a["state"],
                a["worker_id"],
                a["epoch"],
                a["exit_code"],
                a["failure_kind"],
            )
            for a in doc["attempts"]
        ],
    }


def _events_by_partition(cluster: Cluster, topic: str) -> dict[int, list[Any]]:
    reader = TopicReader(cluster.settings, topic)
    reader.consumer.unassign()
    n = cluster.settings.partitions
    out: dict[int, list[Any]] = defaultdict(list)
    for p in range(n):
        end = reader.consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
        if end == 0:
            continue
        reader.consumer.assign([TopicPartition(topic, p, 0)])
        deadline = time.monotonic() + 30
        while not ends_reached(reader.consumer, topic, {p: end}):
            assert time.monotonic() < deadline, f"{topic}/{p} stalled"
            msg = reader.consumer.poll(0.5)
            if msg is not None and msg.error() is None and (msg.offset() or 0) < end:
                out[p].append(decode_event(msg.value()))
        reader.consumer.unassign()
    reader.close()
    return out


def _distinct(events: list[Any]) -> list[Any]:
    seen: set[str] = set()
    return [e for e in events if not (e.event_id in seen or seen.add(e.event_id))]


def test_replay_verifies_against_the_live_cluster(
    api: httpx.Client, cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    every2 = {
        "job_id": "every2",
        "name": "every 2 s",
        "schedule": {"type": "cron", "expression": "*/2 * * * * *", "timezone": "UTC"},
        "command": ["sh", "-c", "echo hello"],
        "timeout_s": 10,
    }
    flaky = {
        "job_id": "flaky",
        "name": "fails twice",
        "schedule": {"type": "manual"},
        "command": ["sh", "-c", "echo failing; exit 3"],
        "retry_policy": {"max_attempts": 2, "base_s": 1},
    }
    for body in (every2, flaky):
        assert api.post("/api/v1/jobs", json=body).status_code == 201
    assert api.post("/api/v1/jobs/flaky/trigger").status_code in (200, 201, 202)
    wait_for(
        lambda: len([r for r in _runs(api, "every2") if r["state"] == "succeeded"]) >= 2,
        60,
        "two succeeded runs",
    )
    mid = datetime.now(UTC)
    time.sleep(1.0)
    wait_for(
        lambda: len([r for r in _runs(api, "every2") if r["state"] == "succeeded"]) >= 5,
        60,
        "five succeeded runs",
    )
    wait_for(lambda: [r["state"] for r in _runs(api, "flaky")] == ["failed"], 60, "flaky failed")
    # Quiesce: no new runs, every run ended, then stop the fold so its table stops moving.
    assert api.patch("/api/v1/jobs/every2", json={"paused": True}).status_code == 200
    wait_for(
        lambda: all(r["state"] in ("succeeded", "failed") for r in _runs(api, "every2")),
        30,
        "every run ended",
    )
    scheduler = next(p for p in cluster.procs if p.name == "scheduler")
    scheduler.stop()

    # (1) the schema-only consumer's history is the API's, run by run
    history = _history_module().read_history(cluster.settings.bootstrap, cluster.topics.run_events)
    ours = {job: history.of_job(job) for job in ("every2", "flaky")}
    assert len(ours["every2"]) >= 5
    [flaky_run] = ours["flaky"]
    assert flaky_run.state == "failed" and flaky_run.dead_lettered == ["main"]
    assert [(a.attempt, a.state, a.exit_code) for a in flaky_run.attempts] == [
        (1, "failed", 3),
        (2, "failed", 3),
    ]
    for run in ours["every2"] + ours["flaky"]:
        mine = _as_api_sees_it(run)
        wait_for(
            lambda run=run, mine=mine: _api_run(api, run.run_id) == mine,
            20,
            f"the API to agree on {run.run_id}: {mine}",
        )

    # (2) --verify: state at the fold's committed offsets and run-events match the replay
    for key, value in {
        "KAFKA_BOOTSTRAP": cluster.settings.bootstrap,
        "CRONLOG_TOPIC_PREFIX": cluster.settings.topic_prefix,
        "CRONLOG_PARTITIONS": str(cluster.settings.partitions),
    }.items():
        monkeypatch.setenv(key, value)
    result = CliRunner().invoke(cli, ["replay", "--verify", "--state-dir", str(tmp_path / "r1")])
    assert result.exit_code == 0, result.output
    assert "verify: every partition matches the live system" in result.output
    report = run_replay(cluster.settings, ReplayOptions(state_dir=tmp_path / "r2", verify=True))
    assert report.ok
    assert sum(p.jobs for p in report.partitions) == 2
    assert all(
        p.acknowledged is not None and p.events_verdict is not None for p in report.partitions
    )
    events_live = sum(p.events_verdict.live for p in report.partitions if p.events_verdict)
    assert events_live >= 30  # registrations, runs, claims, completions, retries

    # (3) --until a mid-point instant: an earlier state with fewer runs fired
    early = run_replay(cluster.settings, ReplayOptions(state_dir=tmp_path / "r3", until=mid))

    def fired(state_dir: Path) -> int:
        return load_state(_table_value(state_dir, b"every2")).runs_fired

    assert 2 <= fired(tmp_path / "r3") < fired(tmp_path / "r2")
    assert early.records < report.records

    # (4) --to-topic: the same events, partition by partition, in the same order
    target = f"{cluster.settings.topic_prefix}recovered-events"
    run_replay(cluster.settings, ReplayOptions(state_dir=tmp_path / "r4", to_topic=target))
    live = _events_by_partition(cluster, cluster.topics.run_events)
    again = _events_by_partition(cluster, target)
    assert sorted(again) == sorted(live)
    for p in live:
        assert again[p] == _distinct(live[p])

    # a live record in the job record format of before the one shape (v2) is the same state
    state = load_state(_table_value(tmp_path / "r2", b"every2"))
    producer = Producer(cluster.settings.producer_config())
    producer.produce(
        cluster.topics.job_table_changelog,
        key=b"every2",
        value=as_v2(state),
        partition=partition_for(b"every2", cluster.settings.partitions),
    )
    producer.flush(10)
    older = run_replay(cluster.settings, ReplayOptions(state_dir=tmp_path / "r6", verify=True))
    assert older.ok, [p.state_detail for p in older.partitions]

    # and --verify can fail: a tampered table record is named
    producer.produce(
        cluster.topics.job_table_changelog,
        key=b"every2",
        value=dump_state(replace(state, runs_fired=999)),
        partition=partition_for(b"every2", cluster.settings.partitions),
    )
    producer.flush(10)
    broken = run_replay(cluster.settings, ReplayOptions(state_dir=tmp_path / "r5", verify=True))
    assert not broken.ok
    [bad] = [p for p in broken.partitions if not p.ok]
    assert (
        bad.state_detail == f"job 'every2': runs_fired: 999 != {state.runs_fired} (live != replay)"
    )


def test_a_snapshot_of_records_in_an_older_format_is_compared_record_by_record(
    cluster: Cluster,
) -> None:
    # A snapshot written before the one shape holds v2 records: its digest covers those
    # bytes, not the v3 ones a replay writes for the same state (replay --verify's check).
    ensure_topics(cluster.settings)
    old = v2_record("one_task")
    p = partition_for(b"legacy", cluster.settings.partitions)
    parts = [
        PartitionSnapshot(q, 0, None, (Entry(b"legacy", old, None, None),) if q == p else (), None)
        for q in range(cluster.settings.partitions)
    ]
    manifest = write_snapshot(cluster.settings, cluster.topics, parts, None, 0)
    later = {manifest.snapshot_id: manifest}
    same = load_state(old)
    consumer = reader(cluster.settings)
    try:
        check = [(0, manifest.snapshot_id, "sha256 a != b", {b"legacy": dump_state(same)})]
        assert recheck_snapshots(consumer, cluster.topics, later, p, check) == (1, None)
        other = {b"legacy": dump_state(replace(same, runs_fired=7))}
        _, detail = recheck_snapshots(
            consumer, cluster.topics, later, p, [(0, manifest.snapshot_id, "sha256 a != b", other)]
        )
    finally:
        consumer.close()
    assert detail == (
        f"snapshot {manifest.snapshot_id} differs from the replay at offset 0 (sha256 a != b: "
        f"job 'legacy': runs_fired: {same.runs_fired} != 7 (live != replay))"
    )
