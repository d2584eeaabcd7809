"""cronlog's topics as an AsyncAPI 3.0 document, generated from the code (issue 17).

    python -m topology.wire.asyncapi > docs/asyncapi.yaml

Channels, partition counts and topic configs come from ``topology.kafka.topics.topic_specs`` (one
channel per topic it returns, named after its ``Topics`` field); the message payloads are the
Avro schemas of ``schemas/`` (``cronlog.Command`` and the other framed types with every named
type inlined, as ``fastavro.schema.load_schema`` expands them) embedded as AsyncAPI
multi-format schemas (``schemaFormat: application/vnd.apache.avro;version=1.9.0``). What the code
does not say (a topic's key, audience and who writes and reads it) is ``ROLES`` of
``topology/wire/asyncapi_roles.py``; a topic ``topic_specs`` gains without a row there is an
error, so the document never silently omits one.
``tests/unit/test_asyncapi.py`` fails when ``docs/asyncapi.yaml`` differs from this output and
validates it with the AsyncAPI parser (``@asyncapi/parser``, the Avro schema parser included).

Rules taken from elsewhere: the AsyncAPI 3.0.0 specification (document structure, the
Multi Format Schema Object, ``{parameter}`` expressions in channel addresses) and the AsyncAPI
Kafka bindings 0.5.0 (``partitions``, ``topicConfiguration``; message ``key``).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from topology.kafka.config import KafkaSettings
from topology.kafka.topics import Topics, TopicSpec, topic_specs
from topology.wire.asyncapi_roles import ROLES, Message
from topology.wire.codec import SCHEMA_DIR

AVRO_FORMAT = "application/vnd.apache.avro;version=1.9.0"
"""AsyncAPI's schemaFormat for an Avro 1.9 schema (the newest version the spec names)."""
KAFKA_BINDING_VERSION = "0.5.0"
_TOPIC_CONFIGURATION = {  # Kafka channel binding 0.5.0 topicConfiguration: key -> kind
    "cleanup.policy": "list",
    "retention.ms": "int",
    "retention.bytes": "int",
    "delete.retention.ms": "int",
    "max.message.bytes": "int",
}
_FRAMING = (
    "Avro single-object encoding: C3 01, the 8-byte little-endian CRC-64-AVRO fingerprint of "
    "the writer schema's Parsing Canonical Form, the Avro binary body (schemas/README.md, "
    '"Wire format"). Readers recognise the fingerprints of schemas/ and schemas/history/*/.'
)


def _camel(field: str) -> str:
    head, *rest = field.split("_")
    return head + "".join(part.title() for part in rest)


def _inline(schema_dir: Path, name: str) -> Any:
    """Return the ``.avsc`` of ``name`` with the named types it refers to inlined.

    Each is inlined at its first use (depth first, in field order, as Avro parsers define
    them) and referred to by full name after that; the rest is the files' own text (simple
    names with a namespace, as AsyncAPI's Avro schema requires, docs, defaults).

    Raises:
        FileNotFoundError: a referenced type has no ``<name>.avsc`` in ``schema_dir``.
    """
    defined: set[str] = set()

    def walk(node: Any) -> Any:
        if isinstance(node, str):
            if node.startswith("cronlog.") and node not in defined:
                return load(node)
            return node
        if isinstance(node, list):
            return [walk(n) for n in node]
        if isinstance(node, dict):
            if node.get("type") in ("record", "enum", "fixed"):
                defined.add(f"{node.get('namespace', 'cronlog')}.{node['name']}")
            return {
                k: walk(v) if k in ("type", "items", "values", "fields") else v
                for k, v in node.items()
            }
        return node

    def load(full: str) -> Any:
        return walk(json.loads((schema_dir / f"{full}.avsc").read_text()))

    return load(name)


def _topic_fields(specs: list[TopicSpec], topics: Topics) -> list[str]:
    """Return the ``Topics`` field of each spec, in spec order.

    Raises:
        ValueError: a spec's name is no ``Topics`` field, or a topic has no row in ``ROLES``.
    """
    by_name = {getattr(topics, f.name): f.name for f in dataclasses.fields(Topics)}
    fields = []
    for spec in specs:
        field = by_name.get(spec.name)
        if field is None:
            raise ValueError(f"topic {spec.name!r} is no field of topology.kafka.topics.Topics")
        if field not in ROLES:
            raise ValueError(f"topic {spec.name!r} ({field}) has no row in topology.wire.asyncapi")
        fields.append(field)
    return fields


def _binding(spec: TopicSpec) -> dict[str, Any]:
    config: dict[str, Any] = {}
    for key, value in spec.config.items():
        kind = _TOPIC_CONFIGURATION.get(key)
        if kind == "list":
            config[key] = value.split(",")
        elif kind == "int":
            config[key] = int(value)
    binding: dict[str, Any] = {"partitions": spec.partitions}
    if config:
        binding["topicConfiguration"] = config
    binding["bindingVersion"] = KAFKA_BINDING_VERSION
    return binding


def _channel(
    field: str, spec: TopicSpec, variable: bool, default_partitions: int
) -> dict[str, Any]:
    role = ROLES[field]
    count = (
        f"CRONLOG_PARTITIONS (default {default_partitions}), as every keyed topic"
        if variable
        else f"{spec.partitions}, fixed"
    )
    return {
        "address": "{prefix}" + spec.name,
        "title": spec.name,
        "description": f"{role.description} Partitions: {count}.",
        "messages": {role.message.name: {"$ref": f"#/components/messages/{role.message.name}"}},
        "parameters": {"prefix": {"$ref": "#/components/parameters/prefix"}},
        "tags": [{"name": "public" if role.public else "internal"}],
        "bindings": {"kafka": _binding(spec)},
        "x-topic-config": dict(spec.config),
    }


def _message(msg: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"name": msg.name, "title": msg.title, "contentType": msg.content_type}
    if msg.avro:
        out["description"] = " ".join(x for x in (msg.description, _FRAMING) if x)
        out["payload"] = {"$ref": f"#/components/schemas/{msg.avro.removeprefix('cronlog.')}"}
    else:
        out["description"] = msg.description
        out["payload"] = {"type": "string", "format": "binary", "description": msg.description}
    key = {"type": "string", "description": msg.key}
    out["bindings"] = {"kafka": {"key": key, "bindingVersion": KAFKA_BINDING_VERSION}}
    return out


def _schema_version(schema_dir: Path) -> str:
    """The current schemas' version: one past the newest snapshot (schemas/README.md)."""
    return str(len([p for p in (schema_dir / "history").glob("v*") if p.is_dir()]) + 1)


def document(schema_dir: Path = SCHEMA_DIR) -> dict[str, Any]:
    """Return cronlog's AsyncAPI 3.0.0 document as plain data (YAML-ready, ordered).

    Args:
        schema_dir: the directory of the current ``.avsc`` files.

    Raises:
        ValueError: ``topic_specs`` returns a topic this module has no row for.
    """
    # The defaults, not this process's environment (CRONLOG_PARTITIONS, CRONLOG_TOPIC_PREFIX).
    default_partitions = KafkaSettings.model_fields["partitions"].default
    settings = KafkaSettings.model_construct(topic_prefix="", partitions=default_partitions)
    specs = topic_specs(settings)
    # A topic whose partition count follows the setting changes with it; the others are fixed.
    other = topic_specs(settings.model_copy(update={"partitions": settings.partitions + 1}))
    variable = {a.name: a.partitions != b.partitions for a, b in zip(specs, other, strict=True)}
    fields = _topic_fields(specs, Topics.of(settings))
    channels = {
        _camel(f): _channel(f, s, variable[s.name], settings.partitions)
        for f, s in zip(fields, specs, strict=True)
    }
    operations: dict[str, Any] = {}
    messages: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    for field in fields:
        role = ROLES[field]
        msg = role.message
        messages.setdefault(msg.name, _message(msg))
        if msg.avro and msg.avro.removeprefix("cronlog.") not in schemas:
            schemas[msg.avro.removeprefix("cronlog.")] = {
                "schemaFormat": AVRO_FORMAT,
                "schema": _inline(schema_dir, msg.avro),
            }
        if role.operation:
            op_id, summary = role.operation
            channel = f"#/channels/{_camel(field)}"
            operations[op_id] = {
                "action": "send" if field == "commands" else "receive",
                "channel": {"$ref": channel},
                "summary": summary,
                "messages": [{"$ref": f"{channel}/messages/{msg.name}"}],
            }
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "cronlog topics",
            "version": _schema_version(schema_dir),
            "description": _INFO,
        },
        "defaultContentType": "application/octet-stream",
        "servers": {
            "local": {
                "host": "127.0.0.1:19092",
                "protocol": "kafka",
                "description": "ops/kafka's broker (CRONLOG_KAFKA_PORT); set KAFKA_BOOTSTRAP "
                "for another cluster.",
            }
        },
        "channels": channels,
        "operations": operations,
        "components": {
            "parameters": {
                "prefix": {
                    "description": "CRONLOG_TOPIC_PREFIX, prepended to every topic name; "
                    "empty by default.",
                    "default": "",
                }
            },
            "messages": messages,
            "schemas": schemas,
        },
    }


_INFO = """\
cronlog's Kafka topics, generated from topology/kafka/topics.py and schemas/ by
`python -m topology.wire.asyncapi` (do not edit docs/asyncapi.yaml by hand).

Channels tagged `public` are the contract with other services: they send commands to
`cronlog.commands` and receive run-events from `cronlog.run-events` (and may read the dead
letters, task logs and worker heartbeats). Channels tagged `internal` are cronlog's own (the
fold's notifications and replies to workers, the scheduler's changelog, the after relay's
snapshots): their format may change without notice. The operations are those of such a
client service.

The info version is the version of the schemas in schemas/ (schemas/README.md). Every value
of an Avro channel is one Avro single-object-encoded record; keys are UTF-8 strings.
Partition counts and topic configs are what topology/kafka/bootstrap.py creates; the full config
of each topic is under x-topic-config (the Kafka binding lists only the keys it defines).
"""


class _Dumper(yaml.SafeDumper):
    """YAML with multi-line strings as literal blocks (readable prose, stable diffs)."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def render() -> str:
    """Return the document as the YAML text of ``docs/asyncapi.yaml``."""
    body = yaml.dump(document(), Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)
    return "# Generated by `python -m topology.wire.asyncapi`; do not edit.\n" + body


def main() -> None:
    """Print the document as YAML on stdout."""
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
