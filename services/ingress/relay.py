"""The ingress relay's loop: every tenant's ingress topic in, checked commands out.

It subscribes to ``<prefix>cronlog.ingress.<tenant>`` by pattern (new tenants' topics are
found within ``refresh_s``), decodes each record, checks it (``services/ingress/check.py``) and
appends it to ``cronlog.commands`` keyed by its job_id, or dead-letters it with its reason. A
batch's forwards, dead letters and consumed offsets commit in one Kafka transaction (the fold's
exactly-once pattern, KIP-447), so a command is forwarded once, whatever crashes. Transient
broker errors restart the session from the committed offsets (logged once per episode);
anything else ends the process (exit 70). docs/security.md, "Who may send as which tenant".
"""

from __future__ import annotations

import logging
import threading

from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition
from prometheus_client import CollectorRegistry, Counter

from services.ingress.check import Refusal, refusal
from services.ingress.settings import IngressSettings
from topology.fold.dead_letters import dead_letter
from topology.kafka.retrying import Liveness, Stopped, Unavailable, call_with_retry, record_ok
from topology.kafka.topics import Topics, ingress_pattern, ingress_tenant
from topology.wire.codec import Codec, DecodeError

log = logging.getLogger("cronlog.ingress")
TIMEOUT_S = 30.0
"""Most seconds one transactional call (init, send offsets, commit, abort) may take."""
BATCH = 500
"""Most records forwarded per transaction."""

REGISTRY = CollectorRegistry()
COMMANDS = Counter(
    "cronlog_ingress_commands",
    "Records read from tenants' ingress topics, by what became of them",
    ["result"],
    registry=REGISTRY,
)
for _result in ("forwarded", "wrong_tenant", "platform_command", "undecodable"):
    COMMANDS.labels(_result)


class IngressRelay:
    """One relay; ``run`` until ``stop`` is set.

    Args:
        settings: the cluster, the topic prefix, the relay's instance id.
    """

    def __init__(self, settings: IngressSettings) -> None:
        self.settings = settings
        self.topics = Topics.of(settings)
        self.codec = Codec()
        self.liveness = Liveness("ingress", log)

    def run(self, stop: threading.Event) -> None:
        """Relay until ``stop`` is set; transient errors restart the session.

        Raises:
            Exception: anything not transient (a bug, a fatal or permanent broker error).
        """
        try:
            call_with_retry(
                lambda: self._session(stop),
                what="ingress relay session",
                liveness=self.liveness,
                stop=stop,
            )
        except Stopped:
            return

    def _session(self, stop: threading.Event) -> None:
        s = self.settings
        refresh_ms = int(s.refresh_s * 1000)
        consumer = Consumer(
            s.consumer_config(
                s.group(),
                **{
                    "enable.partition.eof": False,
                    "topic.metadata.refresh.interval.ms": refresh_ms,
                    "error_cb": self.liveness.failed,
                },
            )
        )
        producer = Producer(
            s.producer_config(
                **{
                    "transactional.id": s.transactional_id(),
                    "transaction.timeout.ms": int(s.transaction_timeout_s * 1000),
                    "error_cb": self.liveness.failed,
                }
            )
        )
        try:
            producer.init_transactions(TIMEOUT_S)
            consumer.subscribe([ingress_pattern(s)])
            log.info(
                "ingress relay started",
                extra={"action": "ingress_started", "pattern": ingress_pattern(s)},
            )
            while not stop.is_set():
                self.liveness.beat()
                records = [m for m in consumer.consume(BATCH, 0.5) if record_ok(m, self.liveness)]
                if records:
                    self._batch(consumer, producer, records)
        finally:
            consumer.close()

    def _batch(self, consumer: Consumer, producer: Producer, records: list[Message]) -> None:
        """Forward or dead-letter ``records`` and commit their offsets, in one transaction.

        Raises:
            Unavailable: the transaction failed and was aborted (the session restarts from
                the committed offsets: nothing of it is visible to read_committed readers).
            KafkaException: a fatal error (a newer relay with this transactional.id).
        """
        try:
            producer.begin_transaction()
            results = [self._route(producer, m) for m in records]
            producer.send_offsets_to_transaction(
                positions(consumer), consumer.consumer_group_metadata(), TIMEOUT_S
            )
            producer.commit_transaction(TIMEOUT_S)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if err is None or not err.txn_requires_abort():
                raise
            producer.abort_transaction(TIMEOUT_S)
            raise Unavailable(f"ingress transaction aborted: {err}") from exc
        for result in results:
            COMMANDS.labels(result).inc()

    def _route(self, producer: Producer, m: Message) -> str:
        """Queue ``m``'s forward or its dead letter; return what became of it."""
        topic, value = m.topic() or "", m.value() or b""
        tenant = ingress_tenant(self.settings, topic)
        try:
            env = self.codec.decode_command(value)
        except DecodeError as exc:
            self._dead_letter(producer, m, "DecodeError", exc.reason)
            return "undecodable"
        why = (
            refusal(tenant, env)
            if tenant is not None
            else Refusal("wrong_tenant", f"{topic!r} is not the ingress topic of a tenant")
        )
        if why is not None:
            log.warning(
                "ingress command refused",
                extra={
                    "action": "ingress_refused",
                    "tenant": tenant,
                    "job_id": env.job_id,
                    "reason": why.reason,
                    "detail": why.detail,
                },
            )
            self._dead_letter(producer, m, "IngressRefused", f"{why.reason}: {why.detail}")
            return why.reason
        producer.produce(
            self.topics.commands, key=env.job_id.encode(), value=value, headers=m.headers()
        )
        return "forwarded"

    def _dead_letter(self, producer: Producer, m: Message, error_type: str, reason: str) -> None:
        dl = dead_letter(
            m.topic() or "",
            m.partition() or 0,
            m.offset() or 0,
            m.timestamp()[1],
            m.key(),
            m.value() or b"",
            error_type,
            reason,
        )
        producer.produce(
            self.topics.dead_letters, key=dl.key, value=self.codec.encode_dead_letter(dl)
        )


def positions(consumer: Consumer) -> list[TopicPartition]:
    """Return the consumer's positions on the partitions it holds (those it has read)."""
    return [tp for tp in consumer.position(consumer.assignment()) if tp.offset >= 0]
