"""Producing commands to ``cronlog.commands`` from async handlers, awaiting the broker's ack."""

from __future__ import annotations

import asyncio
import logging
import threading

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from cronlog.commands import Envelope
from cronlog.errors import CronlogError
from topology.wire.codec import encode_command

log = logging.getLogger("cronlog.api.sender")


class CommandNotSent(CronlogError):
    """The broker did not acknowledge a command (unreachable, queue full, or refused)."""


class CommandSender:
    """Wraps a confluent-kafka Producer (murmur2 partitioning: see ``KafkaSettings``).

    A daemon thread serves the producer's delivery callbacks; ``send`` awaits the ack.
    """

    def __init__(self, producer: Producer, topic: str) -> None:
        self.producer = producer
        self.topic = topic
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="producer-poll", daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.producer.poll(0.1)

    async def send(self, envelope: Envelope, timeout_s: float) -> None:
        """Produce ``envelope`` keyed by its job_id and wait for the broker's acknowledgement.

        Args:
            envelope: the command with its idem_key.
            timeout_s: how long to wait for the ack, seconds.

        Raises:
            CommandNotSent: the record was refused, failed, or not acknowledged in time (it
                may still be delivered later: the idem_key makes a retry safe).
        """
        loop = asyncio.get_running_loop()
        acked: asyncio.Future[None] = loop.create_future()

        def on_delivery(err: KafkaError | None, _msg: Message) -> None:
            loop.call_soon_threadsafe(_settle, acked, err)

        try:
            self.producer.produce(
                self.topic,
                key=envelope.job_id.encode(),
                value=encode_command(envelope),
                on_delivery=on_delivery,
            )
        except (BufferError, KafkaException) as exc:
            raise CommandNotSent(f"cannot produce to {self.topic}: {exc}") from exc
        try:
            await asyncio.wait_for(acked, timeout_s)
        except TimeoutError as exc:
            raise CommandNotSent(f"no ack from the broker within {timeout_s} s") from exc

    def close(self, timeout_s: float = 5.0) -> None:
        """Deliver what is queued (up to ``timeout_s`` seconds) and stop the poll thread."""
        self._stop.set()
        self._thread.join(timeout_s)
        remaining = self.producer.flush(timeout_s)
        if remaining:
            log.warning(
                "commands not delivered at shutdown: %d", remaining, extra={"action": "api.flush"}
            )


def _settle(fut: asyncio.Future[None], err: KafkaError | None) -> None:
    if fut.done():
        return
    if err is None:
        fut.set_result(None)
    else:
        fut.set_exception(CommandNotSent(f"command not delivered: {err}"))
