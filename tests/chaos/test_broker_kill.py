"""A broker ``kill -9`` under load, in its CI form: a 3-node cluster of the test's own
(``ops/kafka --nodes 3`` on free ports in 31000-32767, never the shared broker), cronlog's topics
with replication factor 3 and ``min.insync.replicas=2``, 150 jobs on 2-5 s schedules, and the
node that is the schedulers' transaction coordinator killed with -9 mid-run and started again.
No tick lost or doubled, no run-event lost (``replay --verify``), every count zero.

The long form is ``bench/chaos.py --nodes 3 --broker-kills N``; the pause figures it prints
are in docs/operations.md.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

from tests.chaos.harness import ChaosConfig, PrivateBroker, run_chaos
from topology.kafka.config import KafkaSettings
from topology.kafka.topics import topic_specs

pytestmark = [pytest.mark.own_broker, pytest.mark.broker, pytest.mark.slow]


@pytest.fixture
def private_cluster(tmp_path: Path) -> Iterator[PrivateBroker]:
    cluster = PrivateBroker(tmp_path / "kafka", nodes=3)
    yield cluster
    cluster.destroy()


def _replication(bootstrap: str, prefix: str) -> dict[str, tuple[set[int], str]]:
    """Per cronlog topic under ``prefix``: its partitions' replica counts, min.insync.replicas."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = admin.list_topics(timeout=30).topics
    specs = topic_specs(KafkaSettings(bootstrap=bootstrap, topic_prefix=prefix))
    out = {}
    for spec in specs:
        res = ConfigResource(ConfigResource.Type.TOPIC, spec.name)
        config = next(iter(admin.describe_configs([res]).values())).result(timeout=30)
        replicas = {len(p.replicas) for p in topics[spec.name].partitions.values()}
        out[spec.name] = (replicas, config["min.insync.replicas"].value)
    return out


@pytest.mark.timeout(900)
def test_a_broker_killed_with_sigkill_loses_and_doubles_nothing(
    private_cluster: PrivateBroker, tmp_path: Path
) -> None:
    cfg = ChaosConfig(
        duration_s=60,
        jobs=150,
        kills=0,
        schedulers=1,
        workers=2,
        partitions=3,
        broker_restarts=0,
        broker_kills=1,
        broker_down_s=10,
        bad_records=0,
        settle_s=20,
        drain_timeout_s=150,
    )
    if os.environ.get("CRONLOG_CHAOS_SEED"):
        cfg.seed = int(os.environ["CRONLOG_CHAOS_SEED"])
    report = run_chaos(cfg, private_cluster, tmp_path)
    print("\n".join(report.lines()))
    replication = _replication(private_cluster.bootstrap, report.topic_prefix)
    assert replication == dict.fromkeys(replication, ({3}, "2"))
    assert len(report.broker_kills) == 1
    kill = report.broker_kills[0]
    assert "transaction coordinator" in kill.roles
    assert kill.back_s is not None
    assert report.audit.failures() == dict.fromkeys(report.audit.failures(), 0), (
        report.audit.examples
    )
    assert report.replay_rc == 0, report.replay_output
    assert not report.crashed
    assert report.audit.ticks_run > 0.05 * report.audit.ticks_expected
