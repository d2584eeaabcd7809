"""Kafka's transactions tool as cronlog reads it (topology/kafka/transactions.py): its tables,
the group's ``__consumer_offsets`` partition, the commands an operator runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.scheduler.held import doctor_command, holds
from topology.kafka.config import KafkaSettings
from topology.kafka.transactions import (
    ToolError,
    TransactionsTool,
    hanging_transaction,
    offsets_partition,
    open_transaction,
    parse_table,
)

DESCRIBE = (
    "CoordinatorId\tTransactionalId                 \tProducerId\tProducerEpoch\t"
    "TransactionState\tTransactionTimeoutMs\tCurrentTransactionStartTimeMs\t"
    "TransactionDurationMs\tTopicPartitions                           \t\n"
    "1            \tdead-owner-8b946e               \t202       \t0            \t"
    "Ongoing         \t900000              \t1796304965158                \t"
    "8900                 \t__consumer_offsets-0,t1.cronlog.commands-0\t\n"
)
"""``describe --transactional-id`` as Kafka 4.3.1 prints it (tab-separated, padded)."""
FIND_HANGING = (
    "Topic\tPartition\tProducerId\tProducerEpoch\tCoordinatorEpoch\tStartOffset\t"
    "LastTimestamp\tDuration(min)\t\n"
    "t1.cronlog.commands\t3\t77\t4\t0\t1200\t1796304965158\t31\t\n"
)


def test_a_describe_row_is_read_as_an_open_transaction() -> None:
    (row,) = parse_table(DESCRIBE)
    txn = open_transaction(row)
    assert (txn.transactional_id, txn.producer_id, txn.producer_epoch) == (
        "dead-owner-8b946e",
        202,
        0,
    )
    assert (txn.state, txn.timeout_ms, txn.duration_ms) == ("Ongoing", 900_000, 8900)
    assert txn.partitions == ("__consumer_offsets-0", "t1.cronlog.commands-0")
    assert txn.abort_args() == [
        "forceTerminateTransaction",
        "--transactionalId",
        "dead-owner-8b946e",
    ]
    assert holds(txn, "__consumer_offsets-0", "t1.cronlog.commands-9")
    assert holds(txn, "__consumer_offsets-7", "t1.cronlog.commands-0")
    assert not holds(txn, "__consumer_offsets-7", "t1.cronlog.commands-1")


def test_a_find_hanging_row_is_read_with_the_abort_that_ends_it() -> None:
    (row,) = parse_table(FIND_HANGING)
    hanging = hanging_transaction(row)
    assert (hanging.topic, hanging.partition, hanging.start_offset) == (
        "t1.cronlog.commands",
        3,
        1200,
    )
    assert (hanging.producer_id, hanging.producer_epoch, hanging.duration_min) == (77, 4, 31)
    assert hanging.abort_args() == [
        "abort",
        "--topic",
        "t1.cronlog.commands",
        "--partition",
        "3",
        "--start-offset",
        "1200",
    ]


def test_a_table_without_rows_is_empty() -> None:
    assert parse_table("") == []
    assert parse_table(DESCRIBE.splitlines()[0] + "\n") == []


@pytest.mark.parametrize(
    ("group", "partitions", "expected"),
    [
        ("abc", 50, 96354 % 50),  # "abc".hashCode() == 96354
        ("t0.cronlog-scheduler", 50, 12),  # checked with jshell
        ("polygenelubricants", 50, 0),  # hashCode() == Integer.MIN_VALUE: Utils.abs -> 0
        ("anything", 1, 0),
    ],
)
def test_a_groups_offsets_partition_is_kafkas(group: str, partitions: int, expected: int) -> None:
    assert offsets_partition(group, partitions) == expected


def test_the_operator_commands_are_exact() -> None:
    tool = TransactionsTool(KafkaSettings(bootstrap="127.0.0.1:19092"), lib=Path("/k/lib"))
    assert tool.command("list") == [
        "java",
        "-cp",
        "/k/lib/*",
        "org.apache.kafka.tools.TransactionsCommand",
        "--bootstrap-server",
        "127.0.0.1:19092",
        "list",
    ]
    (row,) = parse_table(DESCRIBE)
    assert doctor_command(open_transaction(row)) == (
        "cronlog doctor transactions --abort --transactional-id dead-owner-8b946e"
    )
    assert doctor_command() == "cronlog doctor transactions"


def test_missing_java_or_jars_are_named(tmp_path: Path) -> None:
    settings = KafkaSettings(bootstrap="127.0.0.1:19092")
    with pytest.raises(ToolError, match="no java"):
        TransactionsTool(settings, lib=tmp_path, java="/nonexistent/java").run("list")
    with pytest.raises(ToolError, match="no Kafka tools jar"):
        TransactionsTool(settings, lib=tmp_path, java="sh").run("list")
