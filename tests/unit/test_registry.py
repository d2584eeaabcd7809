"""Confluent framing for real (issue 17 part 3): settings -> registry client, subjects, and a
command written by confluent-kafka's own ``AvroSerializer`` folded like any other.

The registry here is confluent-kafka's in-memory client (``mock://`` URLs); the broker test
against a real registry server is ``tests/integration/test_registry.py``.
"""

from __future__ import annotations

import io
import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from fastavro import schemaless_reader
from fastavro.schema import load_schema

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task
from topology.fold.due_index import DueIndex
from topology.fold.folder import BatchFolder, Record
from topology.kafka.config import KafkaSettings
from topology.kafka.partitioning import partition_for
from topology.kafka.topics import Topics
from topology.wire.codec import (
    SCHEMA_DIR,
    Codec,
    RegistryUnavailable,
    encode_command,
    schema_fingerprint,
)
from topology.wire.registry import (
    codec_for,
    register_schemas,
    registered_schema,
    registry_client,
    subject_for,
)

SPEC = JobSpec(
    name="r", schedule=Schedule(kind=ScheduleKind.MANUAL), task_specs=main_task(("true",))
)


def _settings(**extra: Any) -> KafkaSettings:
    return KafkaSettings(
        topic_prefix="p.",
        partitions=4,
        schema_registry_url=f"mock://{uuid.uuid4().hex}",
        **extra,
    )


def _datum(env: cmd.Envelope) -> dict[str, Any]:
    """The Envelope as the plain dict another service's producer would hand AvroSerializer."""
    schema = load_schema(str(SCHEMA_DIR / "cronlog.Command.avsc"))
    data = encode_command(env)[10:]
    return dict(schemaless_reader(io.BytesIO(data), schema, return_record_name=True))


def _serializer(client: SchemaRegistryClient) -> AvroSerializer:
    # Another team's producer: the schema cronlog registered, found by subject, not registered.
    return AvroSerializer(client, conf={"auto.register.schemas": False, "use.latest.version": True})


def test_subjects_follow_the_topic_name_strategy() -> None:
    topics = Topics.of(_settings())
    assert subject_for(topics.commands) == "p.cronlog.commands-value"
    assert subject_for(topics.run_events) == "p.cronlog.run-events-value"


def test_no_url_no_client_and_auth_reaches_the_client_config() -> None:
    assert registry_client(KafkaSettings()) is None
    assert Codec is type(codec_for(KafkaSettings()))
    client = registry_client(_settings(schema_registry_basic_auth="svc:s3cret"))
    assert client is not None
    assert "s3cret" not in repr(_settings(schema_registry_basic_auth="svc:s3cret"))


@pytest.mark.parametrize("name", ["cronlog.Command", "cronlog.RunEvent"])
def test_the_registered_schema_has_the_single_object_fingerprint(name: str) -> None:
    raw = json.loads(registered_schema(name))
    assert "__fastavro_parsed" not in json.dumps(raw)
    assert schema_fingerprint(raw) == schema_fingerprint(
        load_schema(str(SCHEMA_DIR / f"{name}.avsc"))
    )


def test_registration_is_idempotent_and_names_both_subjects() -> None:
    settings = _settings()
    client = registry_client(settings)
    assert client is not None
    first = register_schemas(client, settings)
    assert set(first) == {"p.cronlog.commands-value", "p.cronlog.run-events-value"}
    assert register_schemas(client, settings) == first
    assert client.get_versions("p.cronlog.commands-value") == [1]


def test_a_refusing_registry_names_the_subject() -> None:
    class Refusing:
        def register_schema(self, subject: str, schema: Schema) -> int:
            raise ConnectionError("connection refused")

    with pytest.raises(RegistryUnavailable, match=r"p\.cronlog\.commands-value"):
        register_schemas(Refusing(), _settings())  # type: ignore[arg-type]


def test_a_command_from_avro_serializer_decodes_and_folds() -> None:
    settings = _settings()
    client = registry_client(settings)
    assert client is not None
    ids = register_schemas(client, settings)
    env = cmd.Envelope(idem_key="k1", job_id="reports", command=cmd.RegisterJob(spec=SPEC))
    topic = Topics.of(settings).commands
    value = _serializer(client)(_datum(env), SerializationContext(topic, MessageField.VALUE))
    assert value is not None
    assert value[0] == 0 and int.from_bytes(value[1:5], "big") == ids[f"{topic}-value"]
    codec = Codec(registry=client)  # what codec_for builds, on the same in-memory registry
    assert codec.decode_command(value) == env
    assert codec.decode_command(encode_command(env)) == env  # single-object still read

    due = DueIndex()
    due.reset(range(4))
    folder = BatchFolder(Topics.of(settings), 4, lambda _p, _j: None, due, codec)
    at = int(datetime(2026, 12, 1, tzinfo=UTC).timestamp() * 1000)
    out = folder.fold([Record(partition_for("reports", 4), 0, at, b"reports", value)])
    events = [codec.decode_event(s.value) for s in out.sends if s.topic.endswith("run-events")]
    assert [type(e.event) for e in events] == [ev.JobRegistered]
    assert out.writes  # the job record was written, not a dead letter


def test_an_unreachable_registry_stops_the_batch_instead_of_dead_lettering_it() -> None:
    class Down:
        def get_schema(self, schema_id: int) -> Any:
            raise ConnectionError("registry unreachable")

        def get_version(self, subject_name: str, version: int) -> Any:
            raise ConnectionError("registry unreachable")

    env = cmd.Envelope(idem_key="k1", job_id="reports", command=cmd.PauseJob())
    value = b"\x00" + (3).to_bytes(4, "big") + encode_command(env)[10:]
    due = DueIndex()
    due.reset(range(4))
    folder = BatchFolder(
        Topics.of(_settings()), 4, lambda _p, _j: None, due, Codec(registry=Down())
    )
    record = Record(partition_for("reports", 4), 0, 0, b"reports", value)
    with pytest.raises(RegistryUnavailable):
        folder.fold([record])
