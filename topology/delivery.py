"""Delivering a batch's outgoing messages and waiting for every broker ack (confluent-kafka).

librdkafka batches and acks a few thousand records in milliseconds; the fold waits for
``deliver`` before writing any job record (DESIGN.md, adapter protocol step 2).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from cronlog.errors import CronlogError
from topology.config import KafkaSettings
from topology.fold import Outgoing

Offsets = dict[tuple[str, int], int]
"""(topic, partition) → offset of a message the broker acknowledged."""


class DeliveryFailed(CronlogError):
    """Some messages of a batch were not acknowledged by the broker."""


class Delivery:
    """An idempotent, murmur2-partitioning producer for the fold's output topics."""

    def __init__(self, settings: KafkaSettings, timeout_s: float = 30.0) -> None:
        self.producer = Producer(
            settings.producer_config(
                **{
                    "linger.ms": 1,
                    "acks": "all",
                    "queue.buffering.max.messages": 500_000,
                    "delivery.timeout.ms": int(timeout_s * 1000),
                }
            )
        )
        self.timeout_s = timeout_s

    def _produce_all(self, messages: Sequence[Outgoing]) -> tuple[list[str], Offsets]:
        errors: list[str] = []
        acked: Offsets = {}

        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                errors.append(f"{msg.topic()}: {err}")
                return
            topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
            if topic is not None and partition is not None and offset is not None:
                tp = (topic, partition)
                if offset > acked.get(tp, -1):
                    acked[tp] = offset

        for m in messages:
            while True:
                try:
                    if m.partition is None:
                        self.producer.produce(
                            m.topic, key=m.key, value=m.value, on_delivery=on_delivery
                        )
                    else:
                        self.producer.produce(
                            m.topic,
                            key=m.key,
                            value=m.value,
                            partition=m.partition,
                            on_delivery=on_delivery,
                        )
                    break
                except BufferError:
                    self.producer.poll(0.05)  # local queue full: let deliveries drain
                except KafkaException as exc:  # e.g. MSG_SIZE_TOO_LARGE: never silently lost
                    errors.append(f"{m.topic}: {exc}")
                    break
        remaining = self.producer.flush(self.timeout_s)
        if remaining:
            errors.append(f"{remaining} messages still unacknowledged after {self.timeout_s}s")
        return errors, acked

    async def deliver(self, messages: Sequence[Outgoing]) -> Offsets:
        """Produce ``messages`` in order and return once the broker acknowledged all of them.

        Returns:
            (topic, partition) → offset of the last message acknowledged there (only the
            topic-partitions ``messages`` went to; empty for no messages).

        Raises:
            DeliveryFailed: any message failed or timed out.
        """
        errors, acked = await asyncio.get_running_loop().run_in_executor(
            None, self._produce_all, messages
        )
        if errors:
            raise DeliveryFailed("; ".join(errors[:5]))
        return acked

    def close(self) -> None:
        """Flush what is left."""
        self.producer.flush(self.timeout_s)
