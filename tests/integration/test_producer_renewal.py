"""A fenced transactional producer is renewed in place (Kafka Streams' rule for a zombie task).
A second producer takes the scheduler's transactional.id, so the scheduler's next transaction
fails fatally; ``BatchTransactions`` must roll the batch back, build a new producer (fencing
the intruder in turn) and commit the batch with it. The zombie test (``before_commit``) once
saw the discarded producer raise on its last call (exit 1): whatever it says is ignored now."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from services.scheduler.faults import CrashPoints
from services.scheduler.settings import SchedulerSettings
from services.scheduler.transaction import FENCED_LIMIT, BatchTransactions, Fenced
from tests.integration.harness import Cluster
from topology.fold.folder import BatchResult, Outgoing
from topology.kafka.watchdog import Watchdog

pytestmark = pytest.mark.broker


@pytest.fixture
def txn(cluster: Cluster, tmp_path: Path) -> Iterator[BatchTransactions]:
    settings = SchedulerSettings(
        **cluster.settings.model_dump(), instance_id="renew-1", state_dir=str(tmp_path / "s")
    )
    consumer = Consumer(settings.consumer_config(cluster.topics.scheduler_app))
    t = BatchTransactions(settings, consumer, CrashPoints({}), threading.Event(), Watchdog("t"))
    t.init()
    yield t
    consumer.close()


def _fence(txn: BatchTransactions) -> Producer:
    """Start another producer with the scheduler's transactional.id: the scheduler's is fenced."""
    tid = f"{txn.topics.scheduler_app}-{txn.settings.instance_id}"
    intruder = Producer(txn.settings.producer_config(**{"transactional.id": tid}))
    intruder.init_transactions(30)
    return intruder


def test_a_fenced_producer_is_replaced_and_the_batch_commits_with_the_new_one(
    txn: BatchTransactions, cluster: Cluster
) -> None:
    old = txn.producer
    intruder = _fence(txn)
    batch = BatchResult(sends=[Outgoing(cluster.topics.run_events, b"k", b"x", 0)])
    assert txn.commit(batch, {}) is None  # rolled back: the caller folds it again
    assert txn.producer is not old
    assert len(txn.fenced_at) == 1
    assert txn.commit(batch, {}) == {}  # the new producer's epoch fenced the intruder
    with pytest.raises(KafkaException) as info:
        intruder.begin_transaction()
        intruder.produce(cluster.topics.run_events, b"y", b"k", partition=0)
        intruder.commit_transaction(10)
    assert info.value.args[0].fatal()


def test_fenced_more_than_the_limit_in_a_minute_is_fatal(txn: BatchTransactions) -> None:
    """A duplicated instance id fences the process again and again: that ends it (exit 70)."""
    fenced = KafkaError(KafkaError._FENCED, "fenced in a test", fatal=True)
    for _ in range(FENCED_LIMIT):
        txn.renew(fenced)
    with pytest.raises(Fenced, match=f"fenced {FENCED_LIMIT + 1} times in a minute"):
        txn.renew(fenced)
