"""Settings shared by every process that talks to Kafka (env prefix ``CRONLOG_``)."""

from __future__ import annotations

import os
from typing import Literal, Self
from urllib.parse import urlsplit, urlunsplit

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
            (``topology/kafka/replication.py``). Set it when topics may be created while a broker
            is down, so that they never get fewer replicas than the cluster is meant to have.
        kafka_debug: librdkafka's ``debug`` contexts for every client of the process (e.g.
            ``cgrp,eos``; env ``CRONLOG_KAFKA_DEBUG``), logged to stderr. Default: none.
        kafka_security_protocol: librdkafka's ``security.protocol`` for every client (env
            ``CRONLOG_KAFKA_SECURITY_PROTOCOL``): ``PLAINTEXT`` (default), ``SSL``,
            ``SASL_PLAINTEXT`` or ``SASL_SSL``.
        kafka_sasl_mechanism: ``SCRAM-SHA-512`` (default), ``SCRAM-SHA-256`` or ``PLAIN``.
        kafka_sasl_username, kafka_sasl_password: the SASL credentials (required with a
            ``SASL_*`` protocol; the password is never logged or shown in a repr).
        kafka_sasl_password_file: a file whose first line is the password (env
            ``CRONLOG_KAFKA_SASL_PASSWORD_FILE``), read at start when
            ``kafka_sasl_password`` is empty: the password then never sits in the process's
            environment (``/proc/<pid>/environ``), only in a file its user may read
            (``./ops/up`` and docker-compose pass it so; docs/security.md).
        kafka_ssl_ca_location: CA bundle (PEM path) that signed the brokers' certificates;
            empty: the system's. kafka_ssl_certificate_location and kafka_ssl_key_location:
            the client's own certificate and key for mutual TLS (both or neither).
        The names are librdkafka's configuration properties (CONFIGURATION.md); docs/security.md.
        schema_registry_url: a Confluent-API schema registry (env
            ``CRONLOG_SCHEMA_REGISTRY_URL``, e.g. ``http://127.0.0.1:8081``); empty (default):
            none, and Confluent-framed commands are dead letters. Set: the scheduler
            registers cronlog's schemas there and folds Confluent-framed commands
            (``topology/wire/registry.py``, docs/client.md).
        schema_registry_basic_auth: ``user:password`` for the registry's HTTP basic auth
            (env ``CRONLOG_SCHEMA_REGISTRY_BASIC_AUTH``; never logged); empty: none.
        schema_registry_ca_location: CA bundle (PEM path) of an ``https`` registry; empty:
            the system's.
        commands_retention_days: how long ``cronlog.commands`` keeps a record, days (env
            ``CRONLOG_COMMANDS_RETENTION_DAYS``); -1 keeps it for ever. Default 30. State older
            than this survives in the snapshots (``cronlog snapshot``), which must run more
            often than this (docs/architecture.md, "Retention and snapshots").
        run_events_retention_days: the same for ``cronlog.run-events`` (the public changelog).
            Default -1, for ever: the API's read model and the after relay, rebuilt from an
            empty state, learn every job from this topic, so with a retention a rebuild forgets
            jobs registered before its window (they are not re-announced). Set it (longer than
            the archive's hot window plus its interval, e.g. 35) where the cold archive runs
            and read models keep their state (docs/history.md).
        dead_letters_retention_days: the same for ``cronlog.dead-letters`` (each dead letter
            carries the whole record, so it outlives the command it copies). Default 30.
        apply_retention: let the topic bootstrap shorten an existing topic's retention to the
            settings above (env ``CRONLOG_APPLY_RETENTION``); default False: a longer one is
            applied, a shorter one only reported (``topology/kafka/retention.py``).

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
    kafka_sasl_password_file: str = ""
    kafka_ssl_ca_location: str = ""
    kafka_ssl_certificate_location: str = ""
    kafka_ssl_key_location: str = ""
    schema_registry_url: str = ""
    schema_registry_basic_auth: SecretStr = SecretStr("")
    schema_registry_ca_location: str = ""
    commands_retention_days: int = Field(default=30, ge=-1, le=36_500)
    run_events_retention_days: int = Field(default=-1, ge=-1, le=36_500)
    dead_letters_retention_days: int = Field(default=30, ge=-1, le=36_500)
    apply_retention: bool = False

    @model_validator(mode="after")
    def _security_complete(self) -> Self:
        if self.kafka_sasl_password_file and not self.kafka_sasl_password.get_secret_value():
            self.kafka_sasl_password = SecretStr(_first_line(self.kafka_sasl_password_file))
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
        for name in (
            "commands_retention_days",
            "run_events_retention_days",
            "dead_letters_retention_days",
        ):
            if getattr(self, name) == 0:
                raise ValueError(f"{name} must be -1 (for ever) or at least 1 day, not 0")
        return self

    def redacted(self) -> dict[str, object]:
        """Return the settings as a dict fit for the start-up log line: no secret in it.

        Every ``SecretStr`` setting reads ``**********`` (pydantic's JSON dump of it), and the
        password of a URL setting (``https://user:password@host``, which the schema registry
        client takes as basic auth) reads ``***``.

        Returns:
            ``{setting name: JSON value}``, every setting of the class.
        """
        dumped = self.model_dump(mode="json")
        return {k: _redact_url(v) if isinstance(v, str) else v for k, v in dumped.items()}

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


def _first_line(path: str) -> str:
    """Return the first line of the password file ``path``, without its line end.

    Raises:
        ValueError: it cannot be read, naming the setting (the message holds no secret).
    """
    try:
        with open(path, encoding="utf-8") as f:
            return f.readline().rstrip("\r\n")
    except OSError as exc:
        raise ValueError(
            f"kafka_sasl_password_file (env CRONLOG_KAFKA_SASL_PASSWORD_FILE): cannot read "
            f"{path}: {exc.strerror}"
        ) from None


def _redact_url(value: str) -> str:
    """Return ``value`` with its URL's password replaced by ``***``.

    Not a URL, or no password: unchanged; a URL that cannot be parsed: ``***`` whole.
    """
    if "://" not in value or "@" not in value:
        return value
    try:
        parts = urlsplit(value)
    except ValueError:  # not parsable (a stray bracket): keep nothing that may be a secret
        return "***"
    if parts.password is None:
        return value
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
