"""One archive row per run-event: the typed columns, the Arrow schema, the full event as JSON.

The columns are the run-event's envelope (``schemas/cronlog.RunEvent.avsc``) and the fields most
queries filter on, flattened out of its body; everything else stays in ``event_json``. The
column list is part of the archive's contract (docs/history.md, "Columns"): add columns, never
rename or retype one.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from enum import Enum
from functools import cache
from typing import Any, cast

import pyarrow as pa

from cronlog import events as ev
from cronlog.time import duration_ms, iso

UNKNOWN_TENANT = "_unknown"
"""Tenant of an event whose job's JobRegistered was never seen (read before the archive
began, or a platform record such as the tenant ledger's). Not a valid tenant name
(``cronlog.tenants.TENANT_PATTERN`` starts with a letter or digit), so it never collides."""

RUN_STATE: Mapping[type, str] = {
    ev.RunScheduled: "scheduled",
    ev.RunBuffered: "buffered",
    ev.RunQueued: "queued",
    ev.TaskReady: "ready",
    ev.TaskClaimed: "running",
    ev.RetryScheduled: "retrying",
    ev.RunSucceeded: "succeeded",
    ev.RunFailed: "failed",
    ev.RunCancelled: "cancelled",
    ev.RunReopened: "reopened",
}
"""The run state an event moves its run to, in the API's words
    (``services/api/readmodel/projection.py``);
events absent here leave the run's state as it was (``state`` is null)."""

SCHEMA = pa.schema(
    [
        pa.field("event_id", pa.string(), nullable=False),
        pa.field("event_type", pa.string(), nullable=False),
        pa.field("job_id", pa.string(), nullable=False),
        pa.field("run_id", pa.string()),
        pa.field("tenant", pa.string(), nullable=False),
        pa.field("task", pa.string()),
        pa.field("attempt", pa.int32()),
        pa.field("state", pa.string()),
        pa.field("scheduled_for", pa.timestamp("ms", tz="UTC")),
        pa.field("at", pa.timestamp("ms", tz="UTC"), nullable=False),
        pa.field("idem_key", pa.string(), nullable=False),
        pa.field("index", pa.int32(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("day", pa.date32(), nullable=False),
        pa.field("event_json", pa.string(), nullable=False),
        pa.field("record", pa.binary(), nullable=False),
    ]
)
"""The archive's columns. Instants are UTC milliseconds (the wire's unit). ``day`` and
``tenant`` are the Hive partition keys: in a file's path, not in the file (``FILE_SCHEMA``),
as Hive, Spark, Trino and pyarrow expect."""

PARTITION_KEYS = ("day", "tenant")
"""The Hive partition keys, outermost first (``day=YYYY-MM-DD/tenant=T/``)."""
FILE_SCHEMA = pa.schema([f for f in SCHEMA if f.name not in PARTITION_KEYS])
"""The columns stored in each Parquet file, in file order."""
PARTITIONING_SCHEMA = pa.schema([SCHEMA.field(name) for name in PARTITION_KEYS])
"""The types of the partition keys, for readers of the Hive layout."""


@dataclass(frozen=True, slots=True)
class Position:
    """Where a run-event was read: its partition and offset on ``cronlog.run-events``."""

    partition: int
    """Partition number."""
    offset: int
    """Offset within the partition."""


def tenant_of(record: ev.RunEvent, tenants: Mapping[str, str]) -> str:
    """Return the tenant of a run-event.

    Args:
        record: the run-event.
        tenants: job_id -> tenant, learnt from JobRegistered/JobRedefined (``spec.tenant``).

    Returns:
        The job's tenant; else the tenant the event names itself (the tenant-slot events);
        else ``UNKNOWN_TENANT``.
    """
    known = tenants.get(record.job_id)
    if known is not None:
        return known
    named = getattr(record.event, "tenant", None)
    return named if isinstance(named, str) else UNKNOWN_TENANT


def learn_tenant(record: ev.RunEvent, tenants: dict[str, str]) -> str | None:
    """Remember the tenant a JobRegistered/JobRedefined names; return it if it is new, else None.

    Idempotency: a job never changes tenant (docs/tenants.md), so applying again is a no-op.
    """
    if isinstance(record.event, ev.JobRegistered | ev.JobRedefined):
        tenant = record.event.spec.tenant
        if tenants.get(record.job_id) != tenant:
            tenants[record.job_id] = tenant
            return tenant
    return None


def to_row(
    record: ev.RunEvent, tenant: str, where: Position, day: date, value: bytes = b""
) -> dict[str, Any]:
    """Return the archive row of one run-event (keys: ``SCHEMA``'s names).

    Args:
        record: the decoded run-event.
        tenant: its tenant (``tenant_of``).
        where: the partition and offset it was read at.
        day: the UTC day it is filed under (``services.archive.days.day_of``).
        value: the record's bytes as on the topic (the ``record`` column: what the API
            decodes to answer an archived run, ``services.api.readmodel.archived``).

    Returns:
        A dict with every column; absent body fields are None.

    Determinism: the same record, tenant, position and day give the same row.
    """
    body = record.event
    attempt = getattr(body, "attempt", None)
    return {
        "event_id": record.event_id,
        "event_type": type(body).__name__,
        "job_id": record.job_id,
        "run_id": getattr(body, "run_id", None),
        "tenant": tenant,
        "task": getattr(body, "task", None),
        "attempt": attempt if isinstance(attempt, int) else None,
        "state": RUN_STATE.get(type(body)),
        "scheduled_for": getattr(body, "scheduled_for", None),
        "at": record.at,
        "idem_key": record.idem_key,
        "index": record.index,
        "partition": where.partition,
        "offset": where.offset,
        "day": day,
        "event_json": event_json(record),
        "record": value,
    }


def event_json(record: ev.RunEvent) -> str:
    """Return the whole run-event as compact JSON: envelope, ``type`` and ``body``.

    Instants are ISO-8601 UTC strings, durations integer milliseconds under the field name with
    an ``_ms`` suffix (as on the wire), enums their value, tuples lists, nested records objects.
    """
    doc = {
        "event_id": record.event_id,
        "job_id": record.job_id,
        "at": iso(record.at),
        "idem_key": record.idem_key,
        "index": record.index,
        "type": type(record.event).__name__,
        "body": _plain(record.event),
    }
    return json.dumps(doc, separators=(",", ":"), sort_keys=True)


_SCALARS = (str, int, float, bool, type(None))


@cache
def _json_names(cls: Any) -> tuple[tuple[str, str], ...]:
    """(attribute, JSON key) of a dataclass's fields: a duration (``timedelta``, optional or
    not) is keyed ``<name>_ms``, as its Avro field is, whether or not it is set."""
    return tuple(
        (f.name, f"{f.name}_ms" if "timedelta" in str(f.type) else f.name)
        for f in dataclasses.fields(cls)
    )


def _plain(value: object) -> object:
    # the hot path of the export (every field of every event): cheapest checks first
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, timedelta):
        return duration_ms(value)
    if dataclasses.is_dataclass(value):
        names = _json_names(cast(Any, type(value)))  # a class is hashable; mypy cannot tell
        return {key: _plain(getattr(value, name)) for name, key in names}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, bytes):
        return value.hex()
    return value


def to_table(rows: list[dict[str, Any]], schema: pa.Schema = SCHEMA) -> pa.Table:
    """Return ``rows`` (from ``to_row``) as an Arrow table of ``schema`` (keys not in it are
    left out: ``FILE_SCHEMA`` drops the partition keys); empty rows: 0 rows."""
    return pa.Table.from_pylist(rows, schema=schema)


def undecodable_row(
    item_value: bytes, error: str, where: Position, at: datetime, day: date
) -> dict[str, Any]:
    """Return the row of a record that is not a readable RunEvent: kept, never dropped.

    ``event_type`` is ``_undecodable``, ``at`` the record's Kafka timestamp, ``event_json``
    holds the reason and the value's bytes in hex; ``event_id`` is ``<partition>@<offset>``.
    """
    doc = {"type": "_undecodable", "reason": error, "value_hex": item_value.hex()}
    return {
        "event_id": f"{where.partition}@{where.offset}",
        "event_type": "_undecodable",
        "job_id": "",
        "run_id": None,
        "tenant": UNKNOWN_TENANT,
        "task": None,
        "attempt": None,
        "state": None,
        "scheduled_for": None,
        "at": at,
        "idem_key": "",
        "index": 0,
        "partition": where.partition,
        "offset": where.offset,
        "day": day,
        "event_json": json.dumps(doc, separators=(",", ":"), sort_keys=True),
        "record": item_value,
    }
