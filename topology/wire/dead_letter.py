"""The dead-letter record (``cronlog.DeadLetter``) and the Kafka headers it keeps.

A record that could not be decoded or validated, with where it came from and why. Encoded by
``topology/wire/codec.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class KafkaHeader:
    """One header of a Kafka record, kept verbatim."""

    key: str
    """Header name."""
    value: bytes | None
    """Header value; None for a header without a value."""


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A record that could not be decoded or validated, as kept on ``cronlog.dead-letters``."""

    source_topic: str
    """Topic the record was read from."""
    partition: int
    """Partition it was read from."""
    offset: int
    """Its offset in that partition."""
    key: bytes | None
    """Its key bytes, verbatim; None when it had none."""
    value: bytes
    """Its value bytes, verbatim (``b""`` for a null value)."""
    error_type: str
    """Class name of the error that rejected it, e.g. ``"DecodeError"``."""
    reason: str
    """Human reason naming what is wrong."""
    at: datetime
    """When it was dead-lettered, aware UTC."""
    source_record_at: datetime | None = None
    """Kafka timestamp of the original record, aware UTC; None when unknown."""
    headers: tuple[KafkaHeader, ...] = ()
    """The original record's headers, in order."""
