"""Key → partition, as the Java client and aiokafka compute it (murmur2, positive, mod N).

confluent-kafka producers get the same result with ``partitioner=murmur2_random``; this module
is for code that must know the partition without producing (the worker's reply partition, the
fold's wrong-partition check, the due index).
"""

from __future__ import annotations

from aiokafka.partitioner import murmur2


def partition_for(key: bytes | str, partitions: int) -> int:
    """Return the partition of ``key`` among ``partitions``.

    Args:
        key: the record key (str is UTF-8 encoded).
        partitions: the topic's partition count.
    """
    data = key.encode() if isinstance(key, str) else key
    return int(murmur2(data) & 0x7FFFFFFF) % partitions
