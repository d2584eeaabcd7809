"""Avro codec for the wire contract in ``schemas/``: cronlog dataclasses <-> framed Avro bytes.

A thin adapter: records are mapped to and from the frozen dataclasses by introspection, written
with Avro single-object encoding, and read from single-object or Confluent framing. Bad bytes
surface only as ``DecodeError``, and so does a command past a limit of ``cronlog/limits.py``.
Unit conventions, evolution rules and limits: ``schemas/README.md``.
"""

from __future__ import annotations

import io
import typing
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from fastavro import schemaless_reader, schemaless_writer
from fastavro.read import SchemaResolutionError
from fastavro.schema import fingerprint, load_schema, to_parsing_canonical_form

from cronlog.commands import Envelope
from cronlog.errors import CronlogError
from cronlog.events import RunEvent
from cronlog.limits import MAX_COMMAND_RECORD_BYTES
from topology.wire.avro_limits import OverLimit
from topology.wire.avro_mapping import Datum, Plan, avro_name, check_plan, plan_for, record_names
from topology.wire.avro_mapping import DecodeError as DecodeError  # re-exported: part of the API
from topology.wire.avro_mapping import EncodeError as EncodeError  # re-exported: part of the API
from topology.wire.dead_letter import DeadLetter as DeadLetter  # re-exported: part of the API
from topology.wire.dead_letter import KafkaHeader as KafkaHeader  # re-exported
from topology.wire.heartbeats import WorkerHeartbeat
from topology.wire.peek import body_branches, body_index
from topology.wire.registry_schemas import RegistryUnavailable as RegistryUnavailable  # re-exp.
from topology.wire.registry_schemas import SchemaRegistryLike, registered_schema

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "schemas"
"""Where the current ``.avsc`` files live; older versions are under ``history/<version>/``."""
SINGLE_OBJECT_MAGIC = b"\xc3\x01"
"""Avro spec, "Single-object encoding": marker ``C3 01``, then the 8-byte little-endian
CRC-64-AVRO fingerprint of the writer schema's Parsing Canonical Form, then the body."""
CONFLUENT_MAGIC = 0
"""Confluent wire format: byte ``00``, 4-byte big-endian schema id, then the body."""
_SO_HEADER = 10
_CF_HEADER = 5


# -- framing -------------------------------------------------------------------------------------


def schema_fingerprint(schema: Datum) -> bytes:
    """Return the 8-byte CRC-64-AVRO fingerprint of a schema's Parsing Canonical Form.

    Args:
        schema: a parsed or raw Avro schema.

    Returns:
        The fingerprint bytes, little-endian, as the single-object header carries them (fastavro
        returns them in that order, like the Java implementation).
    """
    return bytes.fromhex(fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO"))


@dataclass(frozen=True, slots=True)
class _Kind:
    """One framed record type: its current schema, header and known writer schemas."""

    name: str
    plan: Plan
    schema: Datum
    header: bytes
    writers: dict[bytes, Datum | None]
    """fingerprint -> writer schema; None means the current schema (no resolution needed)."""
    max_bytes: int | None
    """Largest record value decoded, bytes (framing included); None: no limit."""


def _load_kind(schema_dir: Path, cls: type) -> _Kind:
    name = avro_name(cls)
    schema = load_schema(str(schema_dir / f"{name}.avsc"))
    bounded = cls is Envelope  # commands: every field checked against cronlog/limits.py
    plan = plan_for(cls, bounded)
    records, mapped = record_names(schema, {}), set[type]()
    check_plan(plan, records, mapped)
    if extra := set(records) - {avro_name(c) for c in mapped}:
        raise CronlogError(f"schema drift: {name} has records no dataclass maps: {sorted(extra)}")
    fp = schema_fingerprint(schema)
    writers: dict[bytes, Datum | None] = {fp: None}
    for old in sorted((schema_dir / "history").glob(f"*/{name}.avsc")):
        writers.setdefault(schema_fingerprint(old_schema := load_schema(str(old))), old_schema)
    max_bytes = MAX_COMMAND_RECORD_BYTES if bounded else None
    return _Kind(name, plan, schema, SINGLE_OBJECT_MAGIC + fp, writers, max_bytes)


class Codec:
    """Encodes and decodes commands, run events, dead letters and worker heartbeats.

    Args:
        schema_dir: directory of the current ``.avsc`` files; ``history/*/`` below it holds
            older versions whose records must still decode.
        registry: a ``confluent_kafka.schema_registry.SchemaRegistryClient`` (or anything with
            its ``get_schema``/``get_version``); without one, Confluent-framed records are
            a DecodeError.

    Raises:
        CronlogError: a schema and its dataclass disagree on field names (checked at start).
    """

    def __init__(
        self, schema_dir: Path = SCHEMA_DIR, *, registry: SchemaRegistryLike | None = None
    ) -> None:
        self._kinds = {
            cls: _load_kind(schema_dir, cls)
            for cls in (Envelope, RunEvent, DeadLetter, WorkerHeartbeat)
        }
        self._owner = {fp: k.name for k in self._kinds.values() for fp in k.writers}
        events = self._kinds[RunEvent]
        self._event_branches = {
            fp: body_branches(events.schema if w is None else w) for fp, w in events.writers.items()
        }
        self._registry = registry
        self._registry_schemas: dict[int, tuple[Datum, bytes]] = {}

    def encode_command(self, env: Envelope) -> bytes:
        """Return ``env`` as a single-object-encoded ``cronlog.Command``.

        Raises:
            EncodeError: a field cannot be written (naive datetime, int beyond 64 bits, ...).
        """
        return self._encode(self._kinds[Envelope], env)

    def decode_command(self, data: bytes) -> Envelope:
        """Return the Envelope in ``data`` (single-object or Confluent framing).

        Raises:
            DecodeError: ``data`` is not a readable ``cronlog.Command``, or is past a limit of
                ``cronlog/limits.py``; ``reason`` says why (the field path and the limit).
            RegistryUnavailable: Confluent framing and the registry did not answer.
        """
        return typing.cast(Envelope, self._decode(self._kinds[Envelope], data))

    def encode_event(self, ev: RunEvent) -> bytes:
        """Return ``ev`` as a single-object-encoded ``cronlog.RunEvent``. Raises EncodeError."""
        return self._encode(self._kinds[RunEvent], ev)

    def decode_event(self, data: bytes) -> RunEvent:
        """Return the RunEvent in ``data``. Raises DecodeError, RegistryUnavailable."""
        return typing.cast(RunEvent, self._decode(self._kinds[RunEvent], data))

    def event_name(self, data: bytes) -> str | None:
        """Return the event a run-event record holds (``cronlog.RunSucceeded`` …), undecoded.

        Reads the single-object header and the varints before the body's union index
        (``topology/wire/peek.py``): a few microseconds, against a full ``decode_event``.

        Returns:
            The event's Avro full name; None when it cannot be told without decoding
            (Confluent framing, an unknown or unpeekable writer schema, short bytes).
        """
        if data[:2] != SINGLE_OBJECT_MAGIC:
            return None
        names = self._event_branches.get(bytes(data[2:_SO_HEADER]))
        if names is None:
            return None
        i = body_index(data, _SO_HEADER)
        return names[i] if i is not None and 0 <= i < len(names) else None

    def encode_dead_letter(self, dl: DeadLetter) -> bytes:
        """Return ``dl`` as a single-object-encoded ``cronlog.DeadLetter``. Raises EncodeError."""
        return self._encode(self._kinds[DeadLetter], dl)

    def decode_dead_letter(self, data: bytes) -> DeadLetter:
        """Return the DeadLetter in ``data``. Raises DecodeError, RegistryUnavailable."""
        return typing.cast(DeadLetter, self._decode(self._kinds[DeadLetter], data))

    def encode_heartbeat(self, hb: WorkerHeartbeat) -> bytes:
        """Return ``hb`` as a single-object-encoded ``cronlog.WorkerHeartbeat``.

        Raises:
            EncodeError: a field cannot be written (naive datetime, ...).
        """
        return self._encode(self._kinds[WorkerHeartbeat], hb)

    def decode_heartbeat(self, data: bytes) -> WorkerHeartbeat:
        """Return the WorkerHeartbeat in ``data``. Raises DecodeError, RegistryUnavailable."""
        return typing.cast(WorkerHeartbeat, self._decode(self._kinds[WorkerHeartbeat], data))

    def _encode(self, kind: _Kind, obj: object) -> bytes:
        if type(obj) is not kind.plan.cls:
            raise EncodeError(f"expected {kind.plan.cls.__name__}, got {type(obj).__name__}")
        datum = kind.plan.to_avro(obj)
        out = io.BytesIO()
        out.write(kind.header)
        try:
            schemaless_writer(out, kind.schema, datum)
        except (TypeError, ValueError, OverflowError) as exc:  # e.g. int beyond 64 bits
            raise EncodeError(f"cannot write {kind.name}: {type(exc).__name__}: {exc}") from exc
        return out.getvalue()

    def _decode(self, kind: _Kind, data: bytes) -> object:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise DecodeError(f"expected bytes, got {type(data).__name__}")
        data = bytes(data)
        writer, start = self._writer_schema(kind, data)
        buf = io.BytesIO(data)
        buf.seek(start)
        try:
            datum = schemaless_reader(
                buf,
                writer or kind.schema,
                None if writer is None else kind.schema,
                return_record_name=True,
                return_record_name_override=True,
            )
        except Exception as exc:  # fastavro raises many types on hostile bytes; all mean "bad"
            raise DecodeError(_reason(kind, exc)) from exc
        if buf.tell() != len(data):
            raise DecodeError(f"{len(data) - buf.tell()} trailing bytes after the {kind.name} body")
        try:
            value = kind.plan.from_avro(typing.cast(dict[str, Datum], datum))
        except OverLimit as exc:
            raise DecodeError(exc.reason(kind.name.removeprefix("cronlog."))) from None
        except DecodeError:
            raise
        except Exception as exc:
            raise DecodeError(
                f"{kind.name} body does not map to {kind.plan.cls.__name__}: {exc}"
            ) from exc
        # Checked after the fields, so that a record too large for one field names that field.
        if kind.max_bytes is not None and len(data) > kind.max_bytes:
            short = kind.name.removeprefix("cronlog.")
            raise DecodeError(f"{short}: {len(data)} bytes, at most {kind.max_bytes}")
        return value

    def _writer_schema(self, kind: _Kind, data: bytes) -> tuple[Datum | None, int]:
        if data[:2] == SINGLE_OBJECT_MAGIC:
            if len(data) < _SO_HEADER:
                raise DecodeError(
                    f"truncated header: {len(data)} bytes, single-object "
                    f"encoding needs {_SO_HEADER} before the body"
                )
            fp = data[2:_SO_HEADER]
            if fp in kind.writers:
                return kind.writers[fp], _SO_HEADER
            owner = self._owner.get(fp)
            if owner is not None:
                raise DecodeError(f"record is a {owner}, expected a {kind.name}")
            raise DecodeError(
                f"unknown fingerprint {fp.hex()} for {kind.name}: not a known version of the schema"
            )
        if data[:1] == bytes([CONFLUENT_MAGIC]):
            if len(data) < _CF_HEADER:
                raise DecodeError(f"truncated Confluent header: {len(data)} bytes")
            schema, fp = self._confluent_schema(int.from_bytes(data[1:_CF_HEADER], "big"))
            # A registered copy of a schema we know needs no resolution (or the snapshot's).
            return kind.writers.get(fp, schema), _CF_HEADER
        raise DecodeError(
            f"bad magic {data[:2].hex() or '(empty)'}: expected c301 "
            "(Avro single-object) or 00 (Confluent)"
        )

    def _confluent_schema(self, schema_id: int) -> tuple[Datum, bytes]:
        if self._registry is None:
            raise DecodeError(
                f"Confluent-framed record (schema id {schema_id}) but no schema "
                "registry is configured"
            )
        if schema_id not in self._registry_schemas:
            schema = registered_schema(self._registry, schema_id)
            self._registry_schemas[schema_id] = schema, schema_fingerprint(schema)
        return self._registry_schemas[schema_id]


def _reason(kind: _Kind, exc: Exception) -> str:
    detail = f"{type(exc).__name__}: {exc}"
    detail = detail if len(detail) <= 160 else detail[:157] + "..."  # fastavro dumps schemas
    if isinstance(exc, EOFError):
        return f"truncated {kind.name} body ({detail})"
    if isinstance(exc, UnicodeDecodeError):
        return f"invalid UTF-8 in a string of the {kind.name} body"
    if isinstance(exc, SchemaResolutionError):
        return f"writer schema cannot be read as the current {kind.name} ({detail})"
    if isinstance(exc, IndexError):
        return (
            f"corrupt {kind.name} body: a union branch or length points outside the data ({detail})"
        )
    if isinstance(exc, OverflowError | ValueError):
        return f"value out of range in the {kind.name} body ({detail})"
    return f"malformed {kind.name} body ({detail})"


# -- module-level convenience: one codec over SCHEMA_DIR ------------------------------------------


@cache
def default_codec() -> Codec:
    """Return the shared Codec over ``SCHEMA_DIR``, without a registry (built once)."""
    return Codec(SCHEMA_DIR)


def encode_command(env: Envelope) -> bytes:
    """Return ``env`` framed as a ``cronlog.Command``; see ``Codec.encode_command``."""
    return default_codec().encode_command(env)


def decode_command(data: bytes) -> Envelope:
    """Return the Envelope in ``data``; see ``Codec.decode_command``."""
    return default_codec().decode_command(data)


def encode_event(ev: RunEvent) -> bytes:
    """Return ``ev`` framed as a ``cronlog.RunEvent``; see ``Codec.encode_event``."""
    return default_codec().encode_event(ev)


def decode_event(data: bytes) -> RunEvent:
    """Return the RunEvent in ``data``; see ``Codec.decode_event``."""
    return default_codec().decode_event(data)


def encode_dead_letter(dl: DeadLetter) -> bytes:
    """Return ``dl`` framed as a ``cronlog.DeadLetter``; see ``Codec.encode_dead_letter``."""
    return default_codec().encode_dead_letter(dl)


def decode_dead_letter(data: bytes) -> DeadLetter:
    """Return the DeadLetter in ``data``; see ``Codec.decode_dead_letter``."""
    return default_codec().decode_dead_letter(data)


def encode_heartbeat(hb: WorkerHeartbeat) -> bytes:
    """Return ``hb`` framed as a ``cronlog.WorkerHeartbeat``; see ``Codec.encode_heartbeat``."""
    return default_codec().encode_heartbeat(hb)


def decode_heartbeat(data: bytes) -> WorkerHeartbeat:
    """Return the WorkerHeartbeat in ``data``; see ``Codec.decode_heartbeat``."""
    return default_codec().decode_heartbeat(data)
