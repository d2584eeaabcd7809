"""A bad command record, as the dead letter the fold writes in its place.

The dead letter keeps where the record was (topic, partition, offset), why it failed and the
head of its bytes: enough to find, read and replay the original, which stays at its offset.
Both heads are bounded, so a poison record never makes a dead letter no producer can send.
"""

from __future__ import annotations

from cronlog.time import from_ms
from topology.wire.codec import DeadLetter

MAX_DEAD_LETTER_VALUE = 256 * 1024
"""A dead letter keeps at most this many bytes of the bad record's value (the head)."""
MAX_DEAD_LETTER_KEY = 1024
"""...and of its key (the head; a job_id key is at most 512 bytes). The dead letter carries the
key twice (body and record key): a huge one would make it a record no producer can send."""


def dead_letter(
    topic: str,
    partition: int,
    offset: int,
    timestamp_ms: int,
    key: bytes | None,
    value: bytes,
    error_type: str,
    reason: str,
) -> DeadLetter:
    """Return the dead letter of one record.

    Args:
        topic: the record's topic.
        partition: its partition.
        offset: its offset.
        timestamp_ms: its timestamp (the dead letter's time: not a clock, so a replay writes
            the same dead letter).
        key: its key; cut to ``MAX_DEAD_LETTER_KEY`` bytes, the reason saying so.
        value: its value; cut to ``MAX_DEAD_LETTER_VALUE`` bytes, the reason saying so.
        error_type: the exception's class name.
        reason: why it failed (names the field and the limit, for a decode error).
    """
    at = from_ms(timestamp_ms)
    if len(value) > MAX_DEAD_LETTER_VALUE:
        reason += (
            f" (value truncated to its first {MAX_DEAD_LETTER_VALUE} of "
            f"{len(value)} bytes; the original stays at this offset)"
        )
        value = value[:MAX_DEAD_LETTER_VALUE]
    if key is not None and len(key) > MAX_DEAD_LETTER_KEY:
        reason += f" (key truncated to its first {MAX_DEAD_LETTER_KEY} of {len(key)} bytes)"
        key = key[:MAX_DEAD_LETTER_KEY]
    return DeadLetter(topic, partition, offset, key, value, error_type, reason, at, at)


def key_head(key: bytes | None) -> str:
    """Return ``repr(key)``, cut after 64 bytes (with the full length) for a longer key."""
    if key is None or len(key) <= 64:
        return repr(key)
    return f"{key[:64]!r}... ({len(key)} bytes)"
