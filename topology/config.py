"""Settings shared by every process that talks to Kafka (env prefix ``CRONLOG_``)."""

from __future__ import annotations

import os

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class KafkaSettings(BaseSettings):
    """Where the cluster is and how cronlog's topics are named.

    Attributes:
        bootstrap: ``host:port[,host:port]``; env ``KAFKA_BOOTSTRAP`` or ``CRONLOG_BOOTSTRAP``.
            Default: the local broker of ``ops/kafka``, ``127.0.0.1:$CRONLOG_KAFKA_PORT``
            (19092).
        topic_prefix: prepended to every topic name (tests isolate themselves with it).
        partitions: partition count of the keyed topics. Default 12. Part of the contract:
            the bootstrap refuses to run against topics with another count.
        kafka_debug: librdkafka's ``debug`` contexts for every client of the process (e.g.
            ``cgrp,eos``; env ``CRONLOG_KAFKA_DEBUG``), logged to stderr. Default: none.
    """

    model_config = SettingsConfigDict(env_prefix="CRONLOG_", extra="ignore", populate_by_name=True)

    bootstrap: str = Field(
        default_factory=lambda: f"127.0.0.1:{os.environ.get('CRONLOG_KAFKA_PORT', '19092')}",
        validation_alias=AliasChoices("KAFKA_BOOTSTRAP", "CRONLOG_BOOTSTRAP", "bootstrap"),
    )
    topic_prefix: str = ""
    partitions: int = Field(default=12, ge=1, le=1024)
    kafka_debug: str = ""

    def _debug(self, conf: dict[str, object]) -> dict[str, object]:
        if self.kafka_debug:
            conf["debug"] = self.kafka_debug
        return conf

    def producer_config(self, **extra: object) -> dict[str, object]:
        """Return confluent-kafka producer settings (murmur2 partitioning, idempotence)."""
        conf: dict[str, object] = {
            "bootstrap.servers": self.bootstrap,
            "partitioner": "murmur2_random",  # the Java/aiokafka default, see DESIGN.md
            "enable.idempotence": True,
            "linger.ms": 2,
            "message.max.bytes": 1_000_000,
        }
        conf.update(extra)
        return self._debug(conf)

    def consumer_config(self, group_id: str, **extra: object) -> dict[str, object]:
        """Return confluent-kafka consumer settings for ``group_id``."""
        conf: dict[str, object] = {
            "bootstrap.servers": self.bootstrap,
            "group.id": group_id,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            # cronlog's outputs are written in transactions: never read an aborted one (and
            # librdkafka's default, said out loud)
            "isolation.level": "read_committed",
        }
        conf.update(extra)
        return self._debug(conf)
