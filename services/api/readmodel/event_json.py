"""The read model's own serialisation of a RunEvent (tagged JSON), for read-your-writes lookups.

Internal to the API's RocksDB (versioned with it, see ``projection.FORMAT``); the wire format
of the run-events topic is ``topology.wire.codec``'s. Kept separate so the projection needs no
codec. A definition (JobRegistered, JobRedefined) stored before issue 23 is of the old shape,
told by its job-level ``command`` key (which the one shape never writes), and is upcast on
load as the codec upcasts it (``cronlog.job_level``).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, get_args

from pydantic import TypeAdapter

from cronlog import events as ev
from cronlog.job_level import JobLevelTask, upcast
from cronlog.time import from_ms, to_ms

_TYPES: dict[str, type[Any]] = {cls.__name__: cls for cls in get_args(ev.Event)}
_ADAPTERS: dict[str, TypeAdapter[Any]] = {name: TypeAdapter(cls) for name, cls in _TYPES.items()}
_JOB_LEVEL: TypeAdapter[JobLevelTask] = TypeAdapter(JobLevelTask)


def dump_run_event(record: ev.RunEvent) -> bytes:
    """Return the stored form of ``record``: JSON with the event's class name as a tag."""
    name = type(record.event).__name__
    return json.dumps(
        {
            "event_id": record.event_id,
            "job_id": record.job_id,
            "at_ms": to_ms(record.at),
            "idem_key": record.idem_key,
            "index": record.index,
            "type": name,
            "event": _ADAPTERS[name].dump_python(record.event, mode="json"),
        },
        separators=(",", ":"),
    ).encode()


def load_run_event(data: bytes) -> ev.RunEvent:
    """Return the RunEvent stored as ``data`` by ``dump_run_event``.

    Raises:
        KeyError, ValueError: the bytes are not a stored RunEvent (a bug or a foreign DB).
    """
    doc = json.loads(data)
    event = _ADAPTERS[doc["type"]].validate_python(doc["event"])
    if isinstance(event, ev.JobRegistered | ev.JobRedefined) and "command" in doc["event"]["spec"]:
        old = _JOB_LEVEL.validate_python(doc["event"]["spec"])  # stored in the old shape
        event = replace(event, spec=upcast(event.spec, old))
    return ev.RunEvent(
        event_id=doc["event_id"],
        job_id=doc["job_id"],
        at=from_ms(doc["at_ms"]),
        idem_key=doc["idem_key"],
        index=doc["index"],
        event=event,
    )
