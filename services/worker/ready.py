"""Where a worker pulls ready task instances from: the ready topic.

``ReadySource`` hides how: today a classic consumer group (each partition owned by one worker at
a time), polled only for the worker's free slots; ``done`` acknowledges a polled batch once its
claims are durable (one asynchronous offset commit per batch, not one per record).
"""

from __future__ import annotations

from confluent_kafka import Consumer, Message

from services.worker.settings import WorkerSettings
from topology.retrying import Liveness, check_topic


class ReadySource:
    """The ready topic as a classic consumer group.

    Args:
        consumer: subscribed to the ready topic.
        topic: the ready topic.
        liveness: the reader's health (errors, progress).
    """

    def __init__(self, consumer: Consumer, topic: str, liveness: Liveness) -> None:
        self.consumer = consumer
        self.topic = topic
        self.liveness = liveness

    @classmethod
    def open(cls, settings: WorkerSettings, topic: str, liveness: Liveness) -> ReadySource:
        """Join the workers' group on ``topic``."""
        consumer = Consumer({**settings.ready_consumer_config(), "error_cb": liveness.failed})
        consumer.subscribe([topic])
        return cls(consumer, topic, liveness)

    def probe(self) -> None:
        """While in trouble, check the topic now and then (ends the episode when it answers)."""
        self.liveness.probe(lambda: check_topic(self.consumer, self.topic))

    def poll(self, most: int, timeout_s: float) -> list[Message]:
        """Return up to ``most`` records: wait up to ``timeout_s`` for one, then take what is
        already fetched without waiting."""
        first = self.consumer.poll(timeout_s)
        if first is None:
            return []
        return (
            [first, *self.consumer.consume(num_messages=most - 1, timeout=0)]
            if most > 1
            else [first]
        )

    def done(self, msgs: list[Message]) -> None:
        """The batch's claims are durable: commit the consumer's position (asynchronously)."""
        if msgs:
            self.consumer.commit(asynchronous=True)

    def close(self) -> None:
        """Leave the group: its partitions go to the other workers at once."""
        self.consumer.close()
