"""Key → partition, as the Java client computes it (murmur2, positive, mod N).

confluent-kafka producers get the same result with ``partitioner=murmur2_random``; this module
is for code that must know the partition without producing (the worker's reply partition, the
fold's wrong-partition check, the due index).
"""

from __future__ import annotations

from murmurhash2 import murmurhash2

KAFKA_MURMUR2_SEED = 0x9747B28C
"""The seed of the Java client's ``Utils.murmur2`` (org.apache.kafka.common.utils.Utils)."""


def murmur2(data: bytes) -> int:
    """Return the Java client's ``Utils.murmur2(data)`` as an unsigned 32-bit int."""
    return int(murmurhash2(data, KAFKA_MURMUR2_SEED))


def partition_for(key: bytes | str, partitions: int) -> int:
    """Return the partition of ``key`` among ``partitions``.

    Args:
        key: the record key (str is UTF-8 encoded).
        partitions: the topic's partition count.
    """
    data = key.encode() if isinstance(key, str) else key
    return int(murmur2(data) & 0x7FFFFFFF) % partitions
