"""Confluent framing for real: a schema registry client from settings, and cronlog's subjects.

Without ``CRONLOG_SCHEMA_REGISTRY_URL`` nothing here runs and the codec reads single-object
encoding only. With it, the scheduler registers cronlog's envelope schemas under the
TopicNameStrategy subjects (``<topic>-value``: ``cronlog.Command`` on the commands topic,
``cronlog.RunEvent`` on run-events) and its codec reads Confluent-framed commands (``00`` +
4-byte schema id) by fetching their writer schema from the registry. cronlog itself keeps
writing single-object encoding. Rules: schemas/README.md, "Wire format"; docs/client.md.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from fastavro.schema import load_schema

from topology.kafka.config import KafkaSettings
from topology.kafka.topics import Topics
from topology.wire.codec import SCHEMA_DIR, Codec, RegistryUnavailable

log = logging.getLogger("cronlog.registry")


def subject_for(topic: str) -> str:
    """Return the value subject of ``topic`` under Confluent's TopicNameStrategy.

    ``<topic>-value`` (Confluent Schema Registry docs, "Subject name strategy"), the default
    of every Confluent serializer; prefixed topics give prefixed subjects.
    """
    return f"{topic}-value"


def registry_client(settings: KafkaSettings) -> SchemaRegistryClient | None:
    """Return a registry client for ``settings``, or None when no URL is configured.

    Args:
        settings: ``schema_registry_url`` (``http[s]://host:port[/path]``), optional
            ``schema_registry_basic_auth`` (``user:password``) and
            ``schema_registry_ca_location`` (PEM path), as ``KafkaSettings`` documents.

    Returns:
        A ``confluent_kafka.schema_registry.SchemaRegistryClient`` (it caches every schema it
        fetches by id), or None. No request is made here.
    """
    if not settings.schema_registry_url:
        return None
    conf: dict[str, Any] = {"url": settings.schema_registry_url}
    auth = settings.schema_registry_basic_auth.get_secret_value()
    if auth:
        conf["basic.auth.user.info"] = auth
    if settings.schema_registry_ca_location:
        conf["ssl.ca.location"] = settings.schema_registry_ca_location
    return SchemaRegistryClient.new_client(conf)  # mock:// URLs: the in-memory client


def codec_for(settings: KafkaSettings, schema_dir: Path = SCHEMA_DIR) -> Codec:
    """Return the codec a process that reads commands needs: with the registry when set."""
    return Codec(schema_dir, registry=registry_client(settings))


def registered_schema(name: str, schema_dir: Path = SCHEMA_DIR) -> str:
    """Return ``schemas/<name>.avsc`` as one self-contained schema string to register.

    Every named type is inlined at its first use (as ``fastavro.schema.load_schema`` does),
    docs and defaults kept, so the registered copy has the same Parsing Canonical Form, and
    fingerprint, as the single-object header: the codec then reads it without resolution.
    """
    parsed = load_schema(str(schema_dir / f"{name}.avsc"), _write_hint=False)
    return json.dumps(_public(parsed), separators=(",", ":"))


def _public(schema: Any) -> Any:
    """The schema without fastavro's private ``__…`` keys."""
    if isinstance(schema, dict):
        return {k: _public(v) for k, v in schema.items() if not k.startswith("__")}
    if isinstance(schema, list):
        return [_public(v) for v in schema]
    return schema


def register_schemas(
    client: SchemaRegistryClient, settings: KafkaSettings, schema_dir: Path = SCHEMA_DIR
) -> dict[str, int]:
    """Register cronlog's two public envelope schemas under their topics' subjects.

    ``cronlog.Command`` under ``<commands topic>-value`` and ``cronlog.RunEvent`` under
    ``<run-events topic>-value``. Registering a schema the subject already has returns its
    id and adds no version, so every scheduler start may do it.

    Returns:
        subject -> schema id.

    Raises:
        RegistryUnavailable: the registry refused (e.g. the subject's compatibility rule
            rejects the new version) or could not be reached; the message names the subject.

    Idempotency: the same schemas give the same ids, however often called.
    """
    topics = Topics.of(settings)
    ids: dict[str, int] = {}
    for topic, name in (
        (topics.commands, "cronlog.Command"),
        (topics.run_events, "cronlog.RunEvent"),
    ):
        subject = subject_for(topic)
        schema = Schema(registered_schema(name, schema_dir), "AVRO")
        try:
            ids[subject] = int(client.register_schema(subject, schema))
        except Exception as exc:  # the client raises its own error, httpx's, or OSError
            raise RegistryUnavailable(f"registering {name} under {subject} failed: {exc}") from exc
        log.info(
            "schema registered",
            extra={"action": "schema_registered", "subject": subject, "schema_id": ids[subject]},
        )
    return ids
