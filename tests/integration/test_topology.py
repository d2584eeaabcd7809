"""The topic bootstrap against a real broker: idempotent, and refuses topics that break the
contract (partition count, a client-stamped command topic)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic  # type: ignore[attr-defined]

from cronlog.errors import CronlogError
from tests.integration.harness import Cluster
from topology.kafka.bootstrap import TopologyMismatch, ensure_topics
from topology.kafka.config import KafkaSettings
from topology.kafka.topics import topic_specs

pytestmark = pytest.mark.broker


def _settings(bootstrap: str) -> KafkaSettings:
    return KafkaSettings(
        bootstrap=bootstrap, topic_prefix=f"topo{uuid.uuid4().hex[:8]}.", partitions=3
    )


def test_bootstrap_creates_every_topic_once(kafka_bootstrap: str) -> None:
    settings = _settings(kafka_bootstrap)
    created = ensure_topics(settings)
    assert sorted(created) == sorted(s.name for s in topic_specs(settings))
    assert ensure_topics(settings) == []


def test_partition_count_mismatch_is_refused(kafka_bootstrap: str) -> None:
    settings = _settings(kafka_bootstrap)
    ensure_topics(settings)
    with pytest.raises(TopologyMismatch, match="partitions"):
        ensure_topics(settings.model_copy(update={"partitions": 4}))


def test_a_scheduler_refused_its_topics_exits_70_with_one_fatal_line(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    # An error a service cannot go on from ended the scheduler with rc 1 and a raw traceback
    # (issue 25); it ends with exit 70 and one action=fatal line, as a dying thread does.
    settings = _settings(kafka_bootstrap)
    ensure_topics(settings)
    cluster = Cluster(settings.model_copy(update={"partitions": 4}), tmp_path)
    proc = cluster.scheduler()
    assert proc.popen is not None
    try:
        assert proc.popen.wait(60) == 70, proc.log_tail()
    finally:
        cluster.stop_all()
    lines = proc.log_path.read_text(errors="replace").splitlines()
    fatal = [line for line in lines if "action=fatal" in line]
    assert len(fatal) == 1, proc.log_tail()
    assert "thread=main" in fatal[0] and "partitions" in fatal[0]
    assert not [line for line in lines if line.startswith("Traceback")], proc.log_tail()


def test_create_time_command_topic_is_refused(kafka_bootstrap: str) -> None:
    settings = _settings(kafka_bootstrap)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    name = f"{settings.topic_prefix}cronlog.commands"
    for fut in admin.create_topics([NewTopic(name, 3, 1)]).values():
        fut.result()
    with pytest.raises(TopologyMismatch, match="LogAppendTime"):
        ensure_topics(settings)


def test_one_broker_gets_replication_factor_1_and_says_so(
    kafka_bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    settings = _settings(kafka_bootstrap)
    with caplog.at_level("WARNING", logger="cronlog.bootstrap"):
        ensure_topics(settings)
    assert "cluster has 1 broker: replication factor 1, no redundancy" in caplog.text
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    topics = admin.list_topics(timeout=10).topics
    for spec in topic_specs(settings):
        assert {len(p.replicas) for p in topics[spec.name].partitions.values()} == {1}
    name = f"{settings.topic_prefix}cronlog.commands"
    entries = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, name)])
    config = next(iter(entries.values())).result(timeout=10)
    assert config["min.insync.replicas"].value == "1"


def test_a_replication_factor_above_the_broker_count_is_refused(kafka_bootstrap: str) -> None:
    settings = _settings(kafka_bootstrap).model_copy(update={"replication_factor": 3})
    with pytest.raises(CronlogError, match="replication_factor=3 but the cluster has 1 broker"):
        ensure_topics(settings)
    # only to create topics: a service restarted while brokers are down starts on the ones made
    ensure_topics(settings.model_copy(update={"replication_factor": 0}))
    assert ensure_topics(settings) == []
