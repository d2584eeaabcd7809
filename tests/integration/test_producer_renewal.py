"""A fenced transactional producer is renewed in place (Kafka Streams' rule for a zombie task).
A second producer takes the scheduler's transactional.id, so the scheduler's next transaction
fails fatally; ``BatchTransactions`` must roll the batch back, build a new producer (fencing
the intruder in turn) and commit the batch with it. The zombie test (``before_commit``) once
saw the discarded producer raise on its last call (exit 1): whatever it says is ignored now."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from cronlog import commands as cmd
from cronlog import events as ev
from services.scheduler.faults import CrashPoints
from services.scheduler.settings import SchedulerSettings
from services.scheduler.transaction import FENCED_LIMIT, BatchTransactions, Fenced
from tests.integration.harness import Cluster, EventLog
from tests.integration.helpers import once_job, wait_for
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


def test_a_scheduler_whose_static_consumer_is_fenced_rejoins_and_folds_on(
    cluster: Cluster,
) -> None:
    """After a broker restart a lone scheduler's static consumer was fenced by its own stale
    join (KAFKA-20985: "Static consumer fenced by other consumer with same
    group.instance.id") and the process exited 70. The same fence, made at will: another
    consumer joins with the scheduler's group.instance.id, then leaves. The scheduler must
    rejoin with a new consumer, in the same process, and fold on."""
    scheduler = cluster.scheduler("s1")
    log = scheduler.log_path
    n = cluster.settings.partitions
    wait_for(
        lambda: log.read_text().count("action=partition_restored") >= n, 90, "partitions restored"
    )
    intruder = Consumer(
        cluster.settings.consumer_config(
            cluster.topics.scheduler_app,
            **{
                "group.instance.id": f"{cluster.settings.topic_prefix}s1",
                "session.timeout.ms": 6000,
                "partition.assignment.strategy": "cooperative-sticky",  # the group's
            },
        )
    )
    intruder.subscribe([cluster.topics.commands])
    try:

        def fenced() -> bool:
            intruder.poll(0.2)
            return "Static consumer fenced" in log.read_text(errors="replace")

        wait_for(fenced, 60, "the scheduler's consumer fenced", every=0.0)
    finally:
        intruder.close()
    job = "after-the-fence"
    cluster.send(job, cmd.RegisterJob(spec=once_job(datetime.now(UTC) + timedelta(days=1))))
    events = EventLog(cluster.settings)
    try:
        registered = events.wait_until(lambda e: bool(e.of_type(ev.JobRegistered, job)), 90)
    finally:
        events.close()
    text = log.read_text(errors="replace")
    assert scheduler.popen is not None
    assert scheduler.popen.poll() is None, scheduler.log_tail()
    assert registered, scheduler.log_tail()
    assert "action=consumer_rejoined" in text
    assert "action=fenced" not in text and "action=fatal" not in text
