"""The after relay's rebuild on a real broker: from a snapshot it folds only the log after it
and reaches the index a full fold reaches; a snapshot past the committed offsets is ignored."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from bench.after_relay_rebuild import append, commit_at_end, synthetic
from cronlog.after_index import AfterIndex
from services.scheduler.after_relay import AfterRelay, relay_group
from services.scheduler.after_snapshot import AfterSnapshot
from topology.kafka.bootstrap import ensure_topics
from topology.kafka.config import KafkaSettings
from topology.kafka.topics import topic_specs

pytestmark = pytest.mark.broker


@pytest.fixture
def relay(kafka_bootstrap: str) -> Iterator[AfterRelay]:
    settings = KafkaSettings(
        bootstrap=kafka_bootstrap, topic_prefix=f"t{uuid.uuid4().hex[:8]}.", partitions=4
    )
    ensure_topics(settings)
    yield AfterRelay(settings)
    admin = AdminClient(settings.admin_config())
    for future in admin.delete_topics([s.name for s in topic_specs(settings)]).values():
        future.result(30)


def rebuild(relay: AfterRelay) -> tuple[AfterIndex, dict[int, int], int]:
    consumer = Consumer(
        relay.settings.consumer_config(
            relay_group(relay.settings), **{"enable.partition.eof": False}
        )
    )
    try:
        return relay._rebuild(consumer)
    finally:
        consumer.close()


def test_a_start_folds_only_the_log_after_the_snapshot_and_reaches_the_full_index(
    relay: AfterRelay,
) -> None:
    history, tail = synthetic(3000), synthetic(400, 3000)
    full = AfterIndex()
    for r in history + tail:
        full.apply(r)
    append(relay.settings, history)
    commit_at_end(relay.settings)
    index, start, folded = rebuild(relay)
    assert folded == len(history)
    relay._snapshot(Producer(relay.settings.producer_config(acks="all")), index, start)
    append(relay.settings, tail)
    commit_at_end(relay.settings)
    index, _, folded = rebuild(relay)
    assert folded == len(tail)
    assert index.state() == full.state()


def test_a_snapshot_past_the_committed_offsets_is_ignored(relay: AfterRelay) -> None:
    history = synthetic(2000)
    full = AfterIndex()
    for r in history:
        full.apply(r)
    append(relay.settings, history)
    commit_at_end(relay.settings)
    _, start, _ = rebuild(relay)
    ahead = AfterSnapshot({p: o + 1 for p, o in start.items()}, {"bogus": "x"}, {})
    relay._snapshot(
        Producer(relay.settings.producer_config(acks="all")),
        AfterIndex.restored(ahead.upstream_of, ahead.ticks),
        ahead.offsets,
    )
    index, _, folded = rebuild(relay)
    assert folded == len(history)
    assert index.state() == full.state()
