"""Which event a run-event record holds, read from its first bytes without decoding it.

A ``cronlog.RunEvent`` body starts with ``event_id`` (string), ``job_id`` (string), ``at``
(long), ``idem_key`` (string), ``index`` (long), then the ``body`` union's branch index
(Avro spec, "Binary Encoding": strings are a zig-zag varint length then UTF-8 bytes; longs
and union indexes are zig-zag varints). Skipping those five fields costs a few varints; a
full decode builds every field and dataclass. Readers that want only some events (the after
relay wants run ends and job definitions) filter on this and decode the rest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from topology.wire.avro_mapping import Datum

_LAYOUT = ("string", "string", "long", "string", "long")
"""The Avro types of the RunEvent fields before ``body``: event_id … index."""


def body_branches(schema: Datum) -> tuple[str, ...] | None:
    """Return the ``body`` union's record names in branch order, or None if unpeekable.

    Args:
        schema: a parsed ``cronlog.RunEvent`` schema (the current one or a ``history/`` one).

    Returns:
        The full names (``cronlog.RunSucceeded``, …), or None when the schema's fields before
        ``body`` are not ``string, string, long, string, long`` (then callers decode).
    """
    if not isinstance(schema, Mapping):
        return None
    fields = schema.get("fields")
    if not isinstance(fields, Sequence) or len(fields) < len(_LAYOUT) + 1:
        return None
    for f, want in zip(fields, _LAYOUT, strict=False):
        t = f.get("type") if isinstance(f, Mapping) else None
        if isinstance(t, Mapping):
            t = t.get("type")
        if t != want:
            return None
    body = fields[len(_LAYOUT)]
    union = body.get("type") if isinstance(body, Mapping) else None
    if not isinstance(union, list):
        return None
    names = []
    for b in union:
        name = b.get("name") if isinstance(b, Mapping) else b
        if not isinstance(name, str):
            return None
        names.append(name if "." in name else f"cronlog.{name}")
    return tuple(names)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """Return (zig-zag decoded value, next position); IndexError on truncated data."""
    shift = raw = 0
    while True:
        b = data[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift > 63:
            raise IndexError("varint longer than 10 bytes")


def body_index(data: bytes, start: int) -> int | None:
    """Return the ``body`` union branch index of the RunEvent body at ``data[start:]``.

    Args:
        data: the record value.
        start: where the Avro body starts (after the framing header).

    Returns:
        The branch index, or None when the bytes are too short or a length is negative
        (callers then decode, which reports the record as bad).
    """
    pos = start
    try:
        for t in _LAYOUT:
            n, pos = _varint(data, pos)
            if t == "string":
                if n < 0:
                    return None
                pos += n
        branch, _ = _varint(data, pos)
    except IndexError:
        return None
    return branch
