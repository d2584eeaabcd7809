"""cronlog's client SDK: drive cronlog through Kafka, without its HTTP API (docs/client.md).

``CommandProducer`` builds and produces commands (register, trigger, pause, resume, cancel,
delete, and claim/renew/complete/release for custom workers) with the contract's key
(``job_id``), partitioner (murmur2, the Java client's) and encoding (``topology.wire.codec``);
``EventStream`` reads ``cronlog.run-events`` (``read_committed``, deduplicated by
``event_id``) and waits for a run's outcome.

A package of its own beside the core ``cronlog``, because it does I/O: it talks to Kafka
through confluent-kafka and encodes through ``topology``. No core module imports it and it
imports no service (``tests/unit/test_rings.py``), so the core stays pure and a service that
imports only the core pulls in no Kafka client.
"""

from __future__ import annotations

from cronlog_client.events import (
    CommandRefused,
    EventStream,
    Outcome,
    OutcomeTimeout,
    Start,
    UndecodableEvent,
)
from cronlog_client.producer import CommandProducer
from cronlog_client.refs import CommandNotSent, RunRef, Sent, new_idem_key

__all__ = [
    "CommandNotSent",
    "CommandProducer",
    "CommandRefused",
    "EventStream",
    "Outcome",
    "OutcomeTimeout",
    "RunRef",
    "Sent",
    "Start",
    "UndecodableEvent",
    "new_idem_key",
]
