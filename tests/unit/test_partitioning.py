"""Partitioning is part of the contract (DESIGN.md): murmur2 as the Java client computes it."""

from __future__ import annotations

import pytest

from topology.kafka.partitioning import murmur2, partition_for


@pytest.mark.parametrize(
    ("key", "signed"),
    [  # Apache Kafka's UtilsTest.testMurmur2 (clients/src/test/.../utils/UtilsTest.java)
        ("21", -973932308),
        ("foobar", -790332482),
        ("a-little-bit-long-string", -985981536),
        ("a-little-bit-longer-string", -1486304829),
        ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        ("abc", 479470107),
    ],
)
def test_murmur2_is_the_java_clients(key: str, signed: int) -> None:
    assert murmur2(key.encode()) == signed & 0xFFFFFFFF


def test_partition_is_the_positive_hash_mod_n() -> None:
    # Utils.toPositive(murmur2(key)) % n, as the Java DefaultPartitioner / BuiltInPartitioner
    assert partition_for("foobar", 12) == (-790332482 & 0x7FFFFFFF) % 12
    assert partition_for(b"foobar", 12) == partition_for("foobar", 12)
