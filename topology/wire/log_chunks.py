"""Task output on ``cronlog.logs``: the LogChunk record and its Avro single-object codec.

Layout of the topic (keys, chunking, cap, retention): ``docs/architecture.md``, "Task logs".
Writer: ``services/worker/logsink.py``; reader: ``services/api/routes/logs.py``.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from pathlib import Path

from topology.wire.codec import SCHEMA_DIR, Codec, _load_kind

CHUNK_BYTES = 64 * 1024
"""At most this many bytes of output per LogChunk record (well under ``message.max.bytes``)."""
DEFAULT_CAP_BYTES = 1024 * 1024
"""Default cap on the bytes of output kept per attempt (1 MiB)."""


@dataclass(frozen=True, slots=True)
class LogChunk:
    """One piece of an attempt's combined stdout/stderr (``schemas/cronlog.LogChunk.avsc``)."""

    job_id: str
    """The run's job."""
    run_id: str
    """The run; the record key."""
    task: str
    """The task of the run."""
    attempt: int
    """Attempt number, from 1."""
    epoch: int
    """Lease epoch of the execution that wrote it."""
    worker_id: str
    """The worker that ran it."""
    seq: int
    """Position in the (attempt, epoch) log, from 0, without gaps."""
    offset: int
    """Byte offset of ``data`` in the kept log."""
    data: bytes
    """Output bytes, verbatim, at most ``CHUNK_BYTES``."""
    final: bool
    """True on the last chunk: the log is complete."""
    bytes_total: int
    """Bytes of output produced so far, kept or not (final chunk: all of it)."""
    truncated: bool
    """True once ``bytes_total`` exceeds ``cap_bytes``."""
    cap_bytes: int
    """The per-attempt cap on kept bytes, bytes."""
    at: datetime
    """When the chunk was cut, aware UTC (worker clock)."""


class LogCodec(Codec):
    """Encodes and decodes LogChunks (single-object encoding; Confluent framing with a registry).

    The framing, fingerprint checks and error reasons are ``Codec``'s; only the record differs.

    Raises:
        CronlogError: ``cronlog.LogChunk.avsc`` and ``LogChunk`` disagree on field names.
    """

    def __init__(self, schema_dir: Path = SCHEMA_DIR) -> None:
        self._kind = _load_kind(schema_dir, LogChunk)
        self._owner = dict.fromkeys(self._kind.writers, self._kind.name)
        self._registry = None
        self._registry_schemas = {}

    def encode_chunk(self, chunk: LogChunk) -> bytes:
        """Return ``chunk`` as a single-object-encoded ``cronlog.LogChunk``.

        Raises:
            EncodeError: a field cannot be written (naive datetime, ...).
        """
        return self._encode(self._kind, chunk)

    def decode_chunk(self, data: bytes) -> LogChunk:
        """Return the LogChunk in ``data``.

        Raises:
            DecodeError: ``data`` is not a readable ``cronlog.LogChunk``; ``reason`` says why.
        """
        return typing.cast(LogChunk, self._decode(self._kind, data))


@cache
def log_codec() -> LogCodec:
    """Return the shared LogCodec over ``SCHEMA_DIR`` (built once)."""
    return LogCodec()


def encode_chunk(chunk: LogChunk) -> bytes:
    """Return ``chunk`` framed as a ``cronlog.LogChunk``; see ``LogCodec.encode_chunk``."""
    return log_codec().encode_chunk(chunk)


def decode_chunk(data: bytes) -> LogChunk:
    """Return the LogChunk in ``data``; see ``LogCodec.decode_chunk``."""
    return log_codec().decode_chunk(data)
