"""Open and hanging transactions, through Apache Kafka's own tool (KIP-664).

The Python client has no call for DescribeTransactions, ListTransactions, DescribeProducers or
WriteTxnMarkers, so this runs ``org.apache.kafka.tools.TransactionsCommand`` (what
``kafka-transactions.sh`` runs) with java from the jars ``ops/kafka`` fetches
(``.cache/kafka/lib``, or ``CRONLOG_KAFKA_LIB``) and parses its tab-separated tables.

Two kinds of stuck transaction hold a read_committed reader (and a committed offset) back:

- *open*: its coordinator still counts it as ``Ongoing`` (a producer that died inside it, whose
  ``transaction.timeout.ms`` may be up to the broker's 15 minutes). Ended with
  ``forceTerminateTransaction --transactionalId ID`` (fences the producer, aborts it).
- *hanging*: a partition holds it open while its coordinator knows nothing of it (a commit
  acknowledged, its markers never written). Found with ``find-hanging``, ended with
  ``abort --topic T --partition P --start-offset S`` (KIP-664).

docs/operations.md, "Hanging transactions".
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cronlog.errors import CronlogError
from topology.kafka.config import KafkaSettings

TOOL_CLASS = "org.apache.kafka.tools.TransactionsCommand"
ROOT = Path(__file__).resolve().parents[2]
TOOL_TIMEOUT_S = 60.0
"""Longest one run of the tool may take, seconds."""


class ToolError(CronlogError):
    """Kafka's transactions tool could not be run, or failed (the message says why)."""


@dataclass(frozen=True, slots=True)
class OpenTransaction:
    """A transaction its coordinator counts as ongoing.

    Attributes:
        transactional_id: the producer's transactional.id.
        producer_id, producer_epoch: the producer's id and epoch.
        state: the coordinator's state (``Ongoing``, ``PrepareCommit`` …).
        timeout_ms: the producer's ``transaction.timeout.ms``.
        duration_ms: how long it has been open, milliseconds.
        partitions: the ``topic-partition`` names it holds.
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    duration_ms: int
    partitions: tuple[str, ...]

    def abort_args(self) -> list[str]:
        """The tool's arguments that end it."""
        return ["forceTerminateTransaction", "--transactionalId", self.transactional_id]


@dataclass(frozen=True, slots=True)
class HangingTransaction:
    """A transaction a partition holds open that its coordinator does not know (KIP-664).

    Attributes:
        topic, partition: where it hangs.
        producer_id, producer_epoch: its producer.
        start_offset: its first offset in the partition.
        duration_min: how long it has hung, minutes.
    """

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    start_offset: int
    duration_min: int

    def abort_args(self) -> list[str]:
        """The tool's arguments that end it."""
        return [
            "abort",
            "--topic",
            self.topic,
            "--partition",
            str(self.partition),
            "--start-offset",
            str(self.start_offset),
        ]


def offsets_partition(group_id: str, partitions: int) -> int:
    """Return the ``__consumer_offsets`` partition that holds ``group_id``'s offsets.

    Kafka's rule: ``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions``
    (GroupCoordinatorService#partitionFor), with Java's ``String.hashCode`` over UTF-16 code
    units and ``Utils.abs`` mapping ``Integer.MIN_VALUE`` to 0.
    """
    h = 0
    data = group_id.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    signed = h - (1 << 32) if h >= 1 << 31 else h
    return (0 if signed == -(1 << 31) else abs(signed)) % partitions


def parse_table(text: str) -> list[dict[str, str]]:
    """Parse one of the tool's tables (a header line, then rows; cells tab-separated, padded).

    Returns:
        One mapping per row, header -> cell (stripped); empty when there is no row.
    """
    lines = [line for line in text.splitlines() if "\t" in line]
    if not lines:
        return []
    header = [cell.strip() for cell in lines[0].split("\t")]
    rows = []
    for line in lines[1:]:
        cells = [cell.strip() for cell in line.split("\t")]
        rows.append(dict(zip(header, cells, strict=False)))
    return rows


def _int(row: dict[str, str], key: str) -> int:
    value = row.get(key, "")
    return int(value) if value.lstrip("-").isdigit() else -1


def open_transaction(row: dict[str, str]) -> OpenTransaction:
    """One row of ``describe --transactional-id`` as an OpenTransaction."""
    parts = row.get("TopicPartitions", "")
    return OpenTransaction(
        transactional_id=row.get("TransactionalId", ""),
        producer_id=_int(row, "ProducerId"),
        producer_epoch=_int(row, "ProducerEpoch"),
        state=row.get("TransactionState", ""),
        timeout_ms=_int(row, "TransactionTimeoutMs"),
        duration_ms=_int(row, "TransactionDurationMs"),
        partitions=tuple(p for p in parts.split(",") if p),
    )


def hanging_transaction(row: dict[str, str]) -> HangingTransaction:
    """One row of ``find-hanging`` as a HangingTransaction."""
    return HangingTransaction(
        topic=row.get("Topic", ""),
        partition=_int(row, "Partition"),
        producer_id=_int(row, "ProducerId"),
        producer_epoch=_int(row, "ProducerEpoch"),
        start_offset=_int(row, "StartOffset"),
        duration_min=_int(row, "Duration(min)"),
    )


class TransactionsTool:
    """Runs Kafka's transactions tool against the cluster of ``settings``.

    Args:
        settings: the cluster and its security (PLAINTEXT, SASL SCRAM/PLAIN, TLS with a PEM
            CA).
        lib: the Kafka jars; default ``CRONLOG_KAFKA_LIB`` or ``.cache/kafka/lib``.
        java: the java binary; default ``$JAVA_HOME/bin/java`` or ``java`` on the PATH.
    """

    def __init__(
        self, settings: KafkaSettings, lib: Path | None = None, java: str | None = None
    ) -> None:
        self.settings = settings
        self.lib = lib or Path(os.environ.get("CRONLOG_KAFKA_LIB") or ROOT / ".cache/kafka/lib")
        home = os.environ.get("JAVA_HOME")
        self.java = java or (str(Path(home) / "bin" / "java") if home else "java")

    def command(self, *args: str) -> list[str]:
        """The argv an operator runs by hand (with ``--command-config`` when secured)."""
        argv = ["java", "-cp", f"{self.lib}/*", TOOL_CLASS]
        return [*argv, "--bootstrap-server", self.settings.bootstrap, *args]

    def run(self, *args: str) -> str:
        """Run the tool with ``args``; return its standard output.

        Raises:
            ToolError: no java or no jars (naming what to install), a timeout, or the tool's
                non-zero exit (with its last error lines).
        """
        if shutil.which(self.java) is None:
            raise ToolError(f"no java ({self.java}): install a JDK 17+ (ops/kafka does)")
        if not any(self.lib.glob("kafka-tools-*.jar")):
            raise ToolError(f"no Kafka tools jar in {self.lib}: run ./ops/kafka start once")
        with tempfile.TemporaryDirectory(prefix="cronlog-txn-") as tmp:
            argv = [self.java, "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", f"{self.lib}/*"]
            argv += [TOOL_CLASS, "--bootstrap-server", self.settings.bootstrap]
            config = self._client_config(Path(tmp))
            if config is not None:
                argv += ["--command-config", str(config)]
            try:
                out = subprocess.run(  # noqa: S603 (our own argv, no shell)
                    [*argv, *args],
                    capture_output=True,
                    text=True,
                    timeout=TOOL_TIMEOUT_S,
                    check=False,
                )
            except subprocess.TimeoutExpired as exc:
                raise ToolError(f"{' '.join(args)}: no answer in {TOOL_TIMEOUT_S:.0f}s") from exc
        if out.returncode != 0:
            tail = "\n".join(out.stderr.strip().splitlines()[-3:])
            raise ToolError(f"{' '.join(args)} failed (exit {out.returncode}): {tail}")
        return out.stdout

    def _client_config(self, tmp: Path) -> Path | None:
        s = self.settings
        if s.kafka_security_protocol == "PLAINTEXT":
            return None
        lines = [f"security.protocol={s.kafka_security_protocol}"]
        if s.kafka_security_protocol.startswith("SASL_"):
            module = (
                "org.apache.kafka.common.security.plain.PlainLoginModule"
                if s.kafka_sasl_mechanism == "PLAIN"
                else "org.apache.kafka.common.security.scram.ScramLoginModule"
            )
            password = s.kafka_sasl_password.get_secret_value()
            lines += [
                f"sasl.mechanism={s.kafka_sasl_mechanism}",
                f'sasl.jaas.config={module} required username="{s.kafka_sasl_username}" '
                f'password="{password}";',
            ]
        if s.kafka_ssl_ca_location:
            lines += [
                "ssl.truststore.type=PEM",
                f"ssl.truststore.location={s.kafka_ssl_ca_location}",
            ]
        path = tmp / "client.properties"
        path.write_text("\n".join(lines) + "\n")
        path.chmod(0o600)
        return path

    def open_transactions(self) -> list[OpenTransaction]:
        """Every transaction a coordinator counts as not ended (``list``, then ``describe``).

        Raises:
            ToolError: as ``run``.
        """
        ids = [
            row["TransactionalId"]
            for row in parse_table(self.run("list"))
            if row.get("TransactionState") in ("Ongoing", "PrepareCommit", "PrepareAbort")
        ]
        found = []
        for tid in ids:
            rows = parse_table(self.run("describe", "--transactional-id", tid))
            found += [
                t for t in map(open_transaction, rows) if t.state not in ("Empty", "CompleteAbort")
            ]
        return found

    def hanging(self, broker_ids: list[int], older_than_min: int = 1) -> list[HangingTransaction]:
        """The hanging transactions on the partitions these brokers hold (``find-hanging``).

        Args:
            broker_ids: the brokers to ask.
            older_than_min: only transactions open at least this many minutes (the tool's
                ``--max-transaction-timeout``; it then checks each with its coordinator, so
                one still ongoing is not reported whatever its age). Default 1.

        Raises:
            ToolError: as ``run``.
        """
        found: list[HangingTransaction] = []
        for broker in broker_ids:
            args = ["--broker-id", str(broker), "--max-transaction-timeout", str(older_than_min)]
            rows = parse_table(self.run("find-hanging", *args))
            found += map(hanging_transaction, rows)
        return found
