"""Settings shared by every process that talks to Kafka (env prefix ``CRONLOG_``)."""

from __future__ import annotations

import os
from typing import Literal, Self

from pydantic import AliasChoices, Field, SecretStr, model_validator
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
        replication_factor: replicas of each topic the bootstrap creates (env
            ``CRONLOG_REPLICATION_FACTOR``). Default 0: from the brokers in the cluster's
            metadata, 3 (with ``min.insync.replicas=2``) on 3 or more, else all of them
            (``topology/replication.py``). Set it when topics may be created while a broker
            is down, so that they never get fewer replicas than the cluster is meant to have.
        kafka_debug: librdkafka's ``debug`` contexts for every client of the process (e.g.
            ``cgrp,eos``; env ``CRONLOG_KAFKA_DEBUG``), logged to stderr. Default: none.
        kafka_security_protocol: librdkafka's ``security.protocol`` for every client (env
            ``CRONLOG_KAFKA_SECURITY_PROTOCOL``): ``PLAINTEXT`` (default), ``SSL``,
            ``SASL_PLAINTEXT`` or ``SASL_SSL``.
        kafka_sasl_mechanism: ``SCRAM-SHA-512`` (default), ``SCRAM-SHA-256`` or ``PLAIN``.
        kafka_sasl_username, kafka_sasl_password: the SASL credentials (required with a
            ``SASL_*`` protocol; the password is never logged or shown in a repr).
        kafka_ssl_ca_location: CA bundle (PEM path) that signed the brokers' certificates;
            empty: the system's. kafka_ssl_certificate_location and kafka_ssl_key_location:
            the client's own certificate and key for mutual TLS (both or neither).
        The names are librdkafka's configuration properties (CONFIGURATION.md); docs/security.md.

    Raises:
        pydantic.ValidationError: a SASL protocol without username or password, or a client
            certificate without its key (or the reverse), naming the field.
    """

    model_config = SettingsConfigDict(env_prefix="CRONLOG_", extra="ignore", populate_by_name=True)

    bootstrap: str = Field(
        default_factory=lambda: f"127.0.0.1:{os.environ.get('CRONLOG_KAFKA_PORT', '19092')}",
        validation_alias=AliasChoices("KAFKA_BOOTSTRAP", "CRONLOG_BOOTSTRAP", "bootstrap"),
    )
    topic_prefix: str = ""
    partitions: int = Field(default=12, ge=1, le=1024)
    replication_factor: int = Field(default=0, ge=0, le=16)
    kafka_debug: str = ""
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    kafka_sasl_mechanism: Literal["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"] = "SCRAM-SHA-512"
    kafka_sasl_username: str = ""
    kafka_sasl_password: SecretStr = SecretStr("")
    kafka_ssl_ca_location: str = ""
    kafka_ssl_certificate_location: str = ""
    kafka_ssl_key_location: str = ""

    @model_validator(mode="after")
    def _security_complete(self) -> Self:
        if self.kafka_security_protocol.startswith("SASL_"):
            for name in ("kafka_sasl_username", "kafka_sasl_password"):
                value = getattr(self, name)
                text = value.get_secret_value() if isinstance(value, SecretStr) else value
                if not text:
                    raise ValueError(
                        f"{name} (env CRONLOG_{name.upper()}) is required with "
                        f"kafka_security_protocol={self.kafka_security_protocol}"
                    )
        if bool(self.kafka_ssl_certificate_location) != bool(self.kafka_ssl_key_location):
            raise ValueError(
                "kafka_ssl_certificate_location and kafka_ssl_key_location go together "
                "(mutual TLS needs both the certificate and its key)"
            )
        return self

    def client_config(self, **extra: object) -> dict[str, object]:
        """Return the settings every confluent-kafka client of this process needs.

        The bootstrap servers, the security settings and the debug contexts, then ``extra``.
        """
        conf: dict[str, object] = {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": self.kafka_security_protocol,
        }
        if self.kafka_security_protocol.startswith("SASL_"):
            conf["sasl.mechanism"] = self.kafka_sasl_mechanism
            conf["sasl.username"] = self.kafka_sasl_username
            conf["sasl.password"] = self.kafka_sasl_password.get_secret_value()
        for key, value in (
            ("ssl.ca.location", self.kafka_ssl_ca_location),
            ("ssl.certificate.location", self.kafka_ssl_certificate_location),
            ("ssl.key.location", self.kafka_ssl_key_location),
        ):
            if value:
                conf[key] = value
        if self.kafka_debug:
            conf["debug"] = self.kafka_debug
        conf.update(extra)
        return conf

    def admin_config(self) -> dict[str, str | int | float | bool]:
        """Return ``client_config()`` typed for ``AdminClient`` (every value is a scalar)."""
        return {
            k: v for k, v in self.client_config().items() if isinstance(v, str | int | float | bool)
        }

    def producer_config(self, **extra: object) -> dict[str, object]:
        """Return confluent-kafka producer settings (murmur2 partitioning, idempotence, acks=all).

        ``acks=all`` on every producer: a write is acknowledged only once every in-sync replica
        holds it (at least ``min.insync.replicas``), so a broker lost right after the ack loses
        nothing (docs/operations.md, "A replicated cluster").

        Raises:
            ValueError: ``extra`` asks for another ``acks`` (or ``request.required.acks``).
        """
        for key in ("acks", "request.required.acks"):
            if key in extra and str(extra[key]) not in ("all", "-1"):
                raise ValueError(
                    f"{key}={extra[key]!r}: every cronlog producer writes with acks=all "
                    "(a broker loss must not lose an acknowledged record)"
                )
        return self.client_config(
            **{
                "partitioner": "murmur2_random",  # the Java/aiokafka default, see DESIGN.md
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 2,
                "message.max.bytes": 1_000_000,
                **extra,
            }
        )

    def consumer_config(self, group_id: str, **extra: object) -> dict[str, object]:
        """Return confluent-kafka consumer settings for ``group_id``."""
        return self.client_config(
            **{
                "group.id": group_id,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                # cronlog's outputs are written in transactions: never read an aborted one
                # (and librdkafka's default, said out loud)
                "isolation.level": "read_committed",
                **extra,
            }
        )
