"""A fenced transactional producer is renewed in place (Kafka Streams' rule for a zombie task).
A second producer takes the scheduler's transactional.id, so the scheduler's next transaction
fails fatally; the runtime must roll the batch back, build a new producer (fencing the
intruder in turn) and commit the batch with it. The chaos run once saw the discarded producer
raise on its last call (exit 1); that raise did not reproduce on demand, so the runtime now
ignores whatever the discarded producer says, and this test keeps the renewal path honest."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from services.scheduler.runtime import FENCED_LIMIT, Fenced, FoldRuntime
from services.scheduler.settings import SchedulerSettings
from tests.integration.harness import Cluster
from topology.fold import BatchResult, Outgoing

pytestmark = pytest.mark.broker


def _runtime(cluster: Cluster, tmp_path: Path) -> FoldRuntime:
    settings = SchedulerSettings(
        **cluster.settings.model_dump(), instance_id="renew-1", state_dir=str(tmp_path / "s")
    )
    rt = FoldRuntime(settings)
    rt._init_transactions()
    return rt


def _fence(rt: FoldRuntime) -> Producer:
    """Start another producer with the runtime's transactional.id: the runtime's is fenced."""
    intruder = Producer(
        rt.settings.producer_config(
            **{"transactional.id": f"{rt.topics.scheduler_app}-{rt.settings.instance_id}"}
        )
    )
    intruder.init_transactions(30)
    return intruder


def test_a_fenced_producer_is_replaced_and_the_next_transaction_commits(
    cluster: Cluster, tmp_path: Path
) -> None:
    rt = _runtime(cluster, tmp_path)
    try:
        old = rt.producer
        intruder = _fence(rt)
        batch = BatchResult(sends=[Outgoing(cluster.topics.run_events, b"k", b"x", 0)])
        assert rt._commit(batch, {}) is None  # rolled back: the caller folds it again
        assert rt.producer is not old
        assert len(rt._fenced_at) == 1
        # the new producer's epoch fences the intruder; the batch commits with it
        assert rt._commit(batch, {}) == {}
        with pytest.raises(KafkaException) as info:
            intruder.begin_transaction()
            intruder.produce(cluster.topics.run_events, b"y", b"k", partition=0)
            intruder.commit_transaction(10)
        assert info.value.args[0].fatal()
    finally:
        rt.stop.set()
        rt._close()


def test_fenced_more_than_the_limit_in_a_minute_is_fatal(cluster: Cluster, tmp_path: Path) -> None:
    """A duplicated instance id fences the process again and again: that ends it (exit 70)."""
    rt = _runtime(cluster, tmp_path)
    fenced = KafkaError(KafkaError._FENCED, "fenced in a test", fatal=True)
    try:
        for _ in range(FENCED_LIMIT):
            rt._renew_producer(fenced)
        with pytest.raises(Fenced, match=f"fenced {FENCED_LIMIT + 1} times in a minute"):
            rt._renew_producer(fenced)
    finally:
        rt.stop.set()
        rt._close()
