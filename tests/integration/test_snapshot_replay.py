"""Bounded replay on a real broker: run the system, snapshot, delete the commands before the
snapshot as retention would (``AdminClient.delete_records``), and ``cronlog replay --verify``
still succeeds, from the snapshot, equal to the live table and run-events. And the topic
bootstrap's rule for an existing topic's retention."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]
from typer.testing import CliRunner

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task
from services.cli.main import app as cli
from services.cli.replay import ReplayError, ReplayOptions, run_replay
from services.snapshotter.take import take_snapshot
from tests.integration.harness import Cluster, EventLog
from tests.integration.helpers import wait_for
from topology.kafka.bootstrap import ensure_topics
from topology.kafka.config import KafkaSettings
from topology.kafka.log_reader import read_partition, reader, watermarks
from topology.kafka.retention import reconcile_retention
from topology.kafka.topics import DAY_MS, Topics, snapshot_retention_ms, topic_specs
from topology.wire.codec import decode_event

pytestmark = [pytest.mark.broker, pytest.mark.timeout(300)]

EVERY_S = Schedule(ScheduleKind.CRON, "* * * * * *")
EVERY2_S = Schedule(ScheduleKind.CRON, "*/2 * * * * *")


def _succeeded(events: EventLog, job_id: str) -> int:
    return len(events.of_type(ev.RunSucceeded, job_id))


def _delete_before(cluster: Cluster, offsets: dict[int, int], topic: str | None = None) -> None:
    admin = AdminClient(cluster.settings.admin_config())
    topic = topic or cluster.topics.commands
    tps = [TopicPartition(topic, p, o) for p, o in offsets.items() if o > 0]
    for fut in admin.delete_records(tps).values():
        fut.result(30)


def _past_anchors(cluster: Cluster, anchors: dict[int, str | None]) -> dict[int, int]:
    """Run-events partition → the offset just after the snapshot's last event in it."""
    consumer = reader(cluster.settings)
    out = {}
    try:
        marks = watermarks(consumer, cluster.topics.run_events, cluster.settings.partitions)
        for p, anchor in anchors.items():
            for msgs in read_partition(consumer, cluster.topics.run_events, p, 0, marks[p][1]):
                for m in msgs:
                    if anchor is not None and decode_event(m.value()).event_id == anchor:
                        out[p] = (m.offset() or 0) + 1
    finally:
        consumer.close()
    return out


@pytest.mark.slow
def test_replay_verify_succeeds_from_a_snapshot_after_the_commands_before_it_are_deleted(
    cluster: Cluster, events: EventLog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster.scheduler()
    cluster.worker()
    jobs = {f"j{i}": EVERY_S if i % 2 else EVERY2_S for i in range(6)}
    for job_id, schedule in jobs.items():
        spec = JobSpec(name=job_id, schedule=schedule, task_specs=main_task(("true",)))
        cluster.send(job_id, cmd.RegisterJob(spec=spec))
    downstream = JobSpec(
        name="after-j1",
        schedule=Schedule(ScheduleKind.AFTER, after_job_id="j1"),
        task_specs=main_task(("true",)),
    )
    cluster.send("after-j1", cmd.RegisterJob(spec=downstream))
    assert events.wait_until(lambda e: all(_succeeded(e, j) >= 2 for j in jobs), 90)
    first = take_snapshot(cluster.settings)
    assert first.written and first.manifest is not None and first.manifest.base_id is None
    before = {j: _succeeded(events, j) for j in jobs}
    assert events.wait_until(lambda e: all(_succeeded(e, j) >= before[j] + 2 for j in jobs), 90)
    assert events.wait_until(lambda e: _succeeded(e, "after-j1") >= 3, 60)
    for job_id in [*jobs, "after-j1"]:
        cluster.send(job_id, cmd.PauseJob())
    assert events.wait_until(
        lambda e: (
            len(e.of_type(ev.JobPaused)) == len(jobs) + 1
            and all(
                len(e.of_type(ev.RunScheduled, j))
                == len(e.of_type(ev.RunSucceeded, j)) + len(e.of_type(ev.RunFailed, j))
                for j in [*jobs, "after-j1"]
            )
        ),
        60,
    )
    for proc in cluster.procs:
        proc.stop()

    # retention: the commands before the first snapshot are gone
    _delete_before(cluster, first.manifest.offsets)
    with pytest.raises(ReplayError, match="no longer start at offset 0"):
        run_replay(cluster.settings, ReplayOptions(state_dir=tmp_path / "zero", from_zero=True))

    report = run_replay(cluster.settings, ReplayOptions(state_dir=tmp_path / "v1", verify=True))
    assert report.ok, [(p.state_detail, p.events_verdict) for p in report.partitions]
    assert report.snapshot_id == first.manifest.snapshot_id
    assert any("offset 0 is gone" in note for note in report.notes)
    assert [p.start for p in report.partitions] == [
        first.manifest.offsets[p] for p in range(cluster.settings.partitions)
    ]
    assert sum(p.jobs for p in report.partitions) == len(jobs) + 1
    assert all(p.events_verdict is not None and p.events_verdict.ok for p in report.partitions)
    assert sum(p.events for p in report.partitions) > 0  # the tail was folded and compared

    # run-events' retention deletes past the snapshot's last event too: the replay's events
    # are compared from the first live one left
    anchors = {m.partition: m.last_event_id for m in first.manifest.partitions}
    cut = _past_anchors(cluster, anchors)
    assert cut, "some partition had events before the snapshot"
    _delete_before(cluster, cut, cluster.topics.run_events)
    trimmed = run_replay(cluster.settings, ReplayOptions(state_dir=tmp_path / "t", verify=True))
    assert trimmed.ok, [p.events_verdict for p in trimmed.partitions]
    assert any(
        "(retention): compared from there" in p.events_verdict.detail
        for p in trimmed.partitions
        if p.events_verdict is not None
    )

    # a second snapshot folds on from the first; verify still starts at the oldest one kept
    # and checks the newer one's digests on the way; a plain replay starts at the newest
    second = take_snapshot(cluster.settings)
    assert second.written and second.manifest is not None
    assert second.manifest.base_id == first.manifest.snapshot_id
    again = run_replay(cluster.settings, ReplayOptions(state_dir=tmp_path / "v2", verify=True))
    assert again.ok and again.snapshot_id == first.manifest.snapshot_id
    assert sum(p.snapshots_checked for p in again.partitions) == cluster.settings.partitions
    plain = run_replay(cluster.settings, ReplayOptions(state_dir=tmp_path / "p"))
    assert plain.snapshot_id == second.manifest.snapshot_id
    assert [p.digest for p in plain.partitions] == [p.digest for p in again.partitions]

    for key, value in {
        "KAFKA_BOOTSTRAP": cluster.settings.bootstrap,
        "CRONLOG_TOPIC_PREFIX": cluster.settings.topic_prefix,
        "CRONLOG_PARTITIONS": str(cluster.settings.partitions),
    }.items():
        monkeypatch.setenv(key, value)
    result = CliRunner().invoke(cli, ["replay", "--verify", "--state-dir", str(tmp_path / "c")])
    assert result.exit_code == 0, result.output
    assert "verify: every partition matches the live system" in result.output


def _retention(settings: KafkaSettings, topic: str) -> int:
    admin = AdminClient(settings.admin_config())
    [fut] = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)]).values()
    return int(fut.result(30)["retention.ms"].value)


def _eventually(settings: KafkaSettings, topic: str, ms: int) -> None:
    # an altered config reaches describe_configs a moment after the change is acknowledged
    wait_for(lambda: _retention(settings, topic) == ms, 15, f"{topic} retention.ms {ms}")


def test_an_existing_topics_retention_is_lengthened_at_once_and_shortened_only_when_asked(
    kafka_bootstrap: str,
) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}."
    base = {"bootstrap": kafka_bootstrap, "topic_prefix": prefix, "partitions": 2}
    settings = KafkaSettings(**base, commands_retention_days=7)
    commands = Topics.of(settings).commands
    try:
        ensure_topics(settings)
        _eventually(settings, commands, 7 * DAY_MS)
        ensure_topics(KafkaSettings(**base, commands_retention_days=-1))  # keeps more: applied
        _eventually(settings, commands, -1)
        shorter = KafkaSettings(**base, commands_retention_days=30)  # keeps less: reported
        ensure_topics(shorter)
        admin = AdminClient(settings.admin_config())
        left = reconcile_retention(admin, topic_specs(shorter), 30, shorten=False)
        snapshots = Topics.of(settings).snapshots  # follows the commands' retention
        assert sorted((d.topic, d.current_ms, d.wanted_ms) for d in left) == [
            (commands, -1, 30 * DAY_MS),
            (snapshots, -1, snapshot_retention_ms(shorter)),
        ]
        assert _retention(settings, commands) == -1
        ensure_topics(KafkaSettings(**base, commands_retention_days=30, apply_retention=True))
        _eventually(settings, commands, 30 * DAY_MS)
    finally:
        admin = AdminClient(settings.admin_config())
        for fut in admin.delete_topics([s.name for s in topic_specs(settings)]).values():
            fut.result(30)
