"""Who holds a partition's committed offset: looked up once a wait on it lasts, and logged.

When ``StableGate`` has waited ``unstable_report_s`` for a partition, the transactions that
may hold the scheduler group's offsets are looked up with Kafka's own tool
(``topology.kafka.transactions``, in a thread: a JVM start takes seconds) and each is logged
with its producer and the exact command that ends it (``action=offsets_unstable_held``). A
transaction holds a group's offsets when it includes the group's ``__consumer_offsets``
partition (or the commands partition itself). Without java or the jars, the line names the
operator command alone.
"""

from __future__ import annotations

import logging
import shlex
import threading

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from services.scheduler.settings import SchedulerSettings
from topology.kafka.transactions import (
    OpenTransaction,
    ToolError,
    TransactionsTool,
    offsets_partition,
)

log = logging.getLogger("cronlog.scheduler")
OFFSETS_TOPIC = "__consumer_offsets"


def holds(txn: OpenTransaction, offsets_tp: str, commands_tp: str) -> bool:
    """Whether ``txn`` includes the group's offsets partition or the commands partition."""
    return offsets_tp in txn.partitions or commands_tp in txn.partitions


def doctor_command(txn: OpenTransaction | None = None) -> str:
    """The ``cronlog doctor transactions`` line an operator runs (to end ``txn`` if given)."""
    if txn is None:
        return "cronlog doctor transactions"
    tid = shlex.quote(txn.transactional_id)
    return f"cronlog doctor transactions --abort --transactional-id {tid}"


class HeldReport:
    """Looks up and logs what holds a partition's committed offset (one thread at a time).

    Args:
        settings: the scheduler's settings (the cluster; the tool's jars by default).
        group: the scheduler's consumer group.
        commands: the commands topic.
    """

    def __init__(self, settings: SchedulerSettings, group: str, commands: str) -> None:
        self.settings = settings
        self.tool = TransactionsTool(settings)
        self.group = group
        self.commands = commands
        self._busy = threading.Lock()

    def offsets_tp(self) -> tuple[str, list[int]]:
        """The ``__consumer_offsets`` partition of the group, as ``topic-partition`` (its
        partition count from the metadata; the broker's default 50 if not there), and the
        brokers' ids."""
        meta = AdminClient(self.settings.admin_config()).list_topics(timeout=10)
        topic = meta.topics.get(OFFSETS_TOPIC)
        count = len(topic.partitions) if topic is not None and topic.partitions else 50
        return f"{OFFSETS_TOPIC}-{offsets_partition(self.group, count)}", sorted(meta.brokers)

    def report(self, partition: int, waited_s: float) -> None:
        """Start the look-up for ``partition`` (waited ``waited_s`` s) unless one runs."""
        if not self._busy.acquire(blocking=False):
            return
        threading.Thread(
            target=self._report, args=(partition, waited_s), name="held-report", daemon=True
        ).start()

    def _report(self, partition: int, waited_s: float) -> None:
        try:
            self.log_holders(partition, waited_s)
        finally:
            self._busy.release()

    def log_holders(self, partition: int, waited_s: float) -> list[OpenTransaction]:
        """Look the holders up and log each (or why none was found); return them."""
        base = {
            "action": "offsets_unstable_held",
            "partition": partition,
            "waited": f"{waited_s:.0f}s",
        }
        commands_tp = f"{self.commands}-{partition}"
        try:
            offsets_tp, brokers = self.offsets_tp()
            found = [t for t in self.tool.open_transactions() if holds(t, offsets_tp, commands_tp)]
            hanging = [
                h
                for h in self.tool.hanging(brokers)
                if f"{h.topic}-{h.partition}" in (offsets_tp, commands_tp)
            ]
        except (ToolError, KafkaException) as exc:
            log.warning(
                "the transaction holding the offset could not be looked up; find and end it",
                extra={**base, "error": exc, "command": doctor_command()},
            )
            return []
        for h in hanging:
            log.warning(
                "a hanging transaction (its coordinator knows nothing of it) holds this "
                "partition's committed offset; it never ends by itself: end it with the command",
                extra={
                    **base,
                    "producer_id": h.producer_id,
                    "producer_epoch": h.producer_epoch,
                    "hangs_on": f"{h.topic}-{h.partition}",
                    "start_offset": h.start_offset,
                    "open_for": f"{h.duration_min}min",
                    "command": "cronlog doctor transactions --abort",
                    "kafka_command": shlex.join(self.tool.command(*h.abort_args())),
                },
            )
        if not found and not hanging:
            log.warning(
                "no transaction found holding the offset now (it may just have ended, or "
                "hang for less than a minute); looked again while the wait lasts",
                extra={**base, "command": doctor_command()},
            )
        for txn in found:
            log.warning(
                "a transaction holds this partition's committed offset; it ends at its timeout, "
                "or by the command",
                extra={
                    **base,
                    "transactional_id": txn.transactional_id,
                    "producer_id": txn.producer_id,
                    "producer_epoch": txn.producer_epoch,
                    "open_for": f"{txn.duration_ms / 1000:.0f}s",
                    "timeout": f"{txn.timeout_ms / 1000:.0f}s",
                    "holds": ",".join(txn.partitions),
                    "command": doctor_command(txn),
                    "kafka_command": shlex.join(self.tool.command(*txn.abort_args())),
                },
            )
        return found
