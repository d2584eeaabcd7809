"""``cronlog_consumer_lag_records{partition}`` is the owned partition's end offset minus the
next offset to fold, read from a real consumer of a real topic (issue 15)."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from services.scheduler import metrics
from tests.integration.harness import Cluster

pytestmark = pytest.mark.broker


def lag_samples() -> dict[str, float]:
    text = generate_latest(metrics.REGISTRY).decode()
    return {
        s.labels["partition"]: s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "cronlog_consumer_lag_records"
    }


def test_lag_is_end_offset_minus_position_per_owned_partition(cluster: Cluster) -> None:
    topic = cluster.topics.commands  # the cluster's own, empty commands topic
    producer = Producer(cluster.settings.producer_config())
    for i in range(1000):
        producer.produce(topic, value=b"x", key=str(i).encode(), partition=i % 2)
    assert producer.flush(30) == 0
    consumer = Consumer(
        cluster.settings.consumer_config(
            "lag-test", **{"enable.auto.commit": False, "auto.offset.reset": "earliest"}
        )
    )
    consumer.assign([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])
    taken: dict[int, int] = {0: 0, 1: 0}
    while taken[0] < 100 or taken[1] < 1:  # some of each, far from their ends
        for m in consumer.consume(1, 5.0):
            taken[m.partition()] += 1
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p))[1] for p in (0, 1)}
    assert ends == {0: 500, 1: 500}
    lag = metrics.ConsumerLag(topic, every_s=0)
    try:
        lag.refresh(consumer, [0, 1])
        pos = {
            tp.partition: tp.offset
            for tp in consumer.position([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        }
        got = lag_samples()
        assert got["0"] == 500 - pos[0] and got["1"] == 500 - pos[1]
        assert pos == taken  # the next offset to fold is what was consumed, from 0
        assert got["0"] <= 400 and got["1"] > 0
        lag.refresh(consumer, [1])  # partition 0 revoked: its series goes
        assert "0" not in lag_samples() and "1" in lag_samples()
    finally:
        lag.refresh(consumer, [])
        consumer.close()
    assert lag_samples() == {}
