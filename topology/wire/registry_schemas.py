"""Writer schemas of Confluent-framed records, read from a schema registry by id.

``registered_schema`` resolves one id and its references into one self-contained schema, as
``schemas/*.avsc`` load; ``topology/wire/codec.py`` caches the answers.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol

from fastavro.repository.base import AbstractSchemaRepository, SchemaRepositoryError
from fastavro.schema import load_schema

from cronlog.errors import CronlogError
from topology.wire.avro_mapping import Datum, DecodeError


class RegistryUnavailable(CronlogError):
    """The schema registry could not answer (network, auth); the record itself may be fine."""


class SchemaRegistryLike(Protocol):
    """The part of ``confluent_kafka.schema_registry.SchemaRegistryClient`` the decoder uses."""

    def get_schema(self, schema_id: int) -> Any:
        """Return the ``Schema`` (``schema_str``, ``references``) registered under an id."""

    def get_version(self, subject_name: str, version: int) -> Any:
        """Return the ``RegisteredSchema`` (its ``.schema``) of one subject version."""


def registered_schema(registry: SchemaRegistryLike, schema_id: int) -> Datum:
    """Return the writer schema registered under ``schema_id``, references inlined.

    Raises:
        DecodeError: the id (or a reference) is unknown to the registry, or not valid Avro.
        RegistryUnavailable: the registry did not answer.
    """
    try:
        return load_schema(_ROOT, repo=_RegistryRepository(registry, schema_id))
    except (DecodeError, RegistryUnavailable):
        raise
    except Exception as exc:
        raise DecodeError(f"registry schema id {schema_id} is not valid Avro: {exc}") from exc


_ROOT = "<root>"


class _RegistryRepository(AbstractSchemaRepository):
    """fastavro schema repository over one registry schema and its references.

    ``load_schema`` pulls each referenced named type in on demand and inlines it at its first
    use, giving one self-contained writer schema (as ``schemas/*.avsc`` load) -- fastavro's
    resolution mishandles union branches that are bare name references.
    """

    def __init__(self, registry: SchemaRegistryLike, schema_id: int) -> None:
        self._registry = registry
        self._schema_id = schema_id
        self._refs: dict[str, tuple[str, int]] = {}

    def load(self, name: str) -> Any:
        if name == _ROOT:
            schema = _ask(
                partial(self._registry.get_schema, self._schema_id), f"id {self._schema_id}"
            )
        elif name in self._refs:
            subject, version = self._refs[name]
            schema = _ask(
                partial(_schema_version, self._registry, subject, version),
                f"reference {subject} v{version}",
            )
        else:
            raise SchemaRepositoryError(f"{name} is neither defined nor referenced")
        for ref in schema.references or ():
            self._refs.setdefault(ref.name, (ref.subject, ref.version))
        return json.loads(schema.schema_str or "")


def _schema_version(registry: SchemaRegistryLike, subject: str, version: int) -> Any:
    return registry.get_version(subject, version).schema


def _ask(call: Callable[[], Any], what: str) -> Any:
    try:
        return call()
    except Exception as exc:
        if getattr(exc, "http_status_code", None) == 404:
            raise DecodeError(f"schema {what} is unknown to the registry") from exc
        raise RegistryUnavailable(f"schema registry failed for {what}: {exc}") from exc
