"""Waiting for a partition's committed offset to be stable, without stopping the other partitions.

A new owner must not restore a partition while the previous owner's transaction that holds the
partition's consumed offset is still open: whatever that transaction commits would be missing
from the restored store, and its commands would be folded again (KIP-447). librdkafka asks for
committed offsets with ``require_stable`` (the consumer is ``read_committed``) and retries the
broker's ``UNSTABLE_OFFSET_COMMIT`` until the call's timeout. Such a transaction ends when its
producer commits or aborts it, when a restarted producer with its transactional.id fences it,
or after its ``transaction.timeout.ms`` (cronlog's schedulers: 10 s; another client's: up to the
broker's ``transaction.max.timeout.ms``, 15 minutes by default).

So one blocking call with a fixed timeout is wrong twice: it stops the fold of the partitions
already folding, and when the wait outlasts it the process dies and restarts into the same wait
(each restart another rebalance). ``StableGate`` asks for one waiting partition for at most
``TRY_S``, at most every ``RETRY_S``, and logs the wait once when it starts, every
``LOG_EVERY_S`` while it lasts, and once when it ends. Partitions that were already folding keep
folding meanwhile. Partitions assigned *together* with the unstable one do not: librdkafka
fetches a new assignment's committed offsets in one request and retries all of it while any
partition is unstable (seen with ``CRONLOG_KAFKA_DEBUG=cgrp``: "Adding … [1] back to pending
list" for every partition, 70 s), so their fetching starts only then.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, TopicPartition

from services.scheduler.membership import ConsumerFenced
from topology.kafka.retrying import is_fatal, is_transient

log = logging.getLogger("cronlog.scheduler")

TRY_S = 0.5
"""Longest one ask for a partition's committed offset blocks the fold, seconds."""
RETRY_S = 2.0
"""Shortest time between two asks for the same waiting partition, seconds."""
LOG_EVERY_S = 60.0
"""How often a wait that goes on is logged again, seconds."""


@dataclass(slots=True)
class _Wait:
    since: float
    next_try: float
    logged: float
    reported: float | None = None
    """When ``on_long_wait`` was last called for this wait."""


class StableGate:
    """Which assigned partitions of ``topic`` have a stable committed offset.

    Args:
        consumer: the fold's group consumer (``read_committed``).
        topic: the commands topic.
        clock: monotonic seconds (a parameter for the tests).
        on_long_wait: called with (partition, seconds waited) when a wait passes
            ``long_wait_s``, then every LOG_EVERY_S while it lasts
            (``services/scheduler/held.py`` names who holds it); must not block.
        long_wait_s: when ``on_long_wait`` is called, seconds; 0: never.

    Thread safety: the fold thread only.
    """

    def __init__(
        self,
        consumer: Consumer,
        topic: str,
        clock: Callable[[], float] = time.monotonic,
        *,
        on_long_wait: Callable[[int, float], None] | None = None,
        long_wait_s: float = 0.0,
    ) -> None:
        self.consumer = consumer
        self.topic = topic
        self.clock = clock
        self.on_long_wait = on_long_wait
        self.long_wait_s = long_wait_s
        self.waits: dict[int, _Wait] = {}
        self.offsets: dict[int, int] = {}
        """partition -> its stable committed offset (negative: none), once ``stable``."""

    def due(self, partition: int) -> bool:
        """True when ``partition`` may be asked now (not asked yet, or RETRY_S has passed)."""
        wait = self.waits.get(partition)
        return wait is None or self.clock() >= wait.next_try

    def stable(self, partition: int) -> bool:
        """Return whether ``partition``'s committed offset is stable (ask at most every RETRY_S).

        Raises:
            ConsumerFenced: the consumer failed fatally (a new one rejoins).
            KafkaException: an error that is neither transient nor fatal (e.g. authorization).
        """
        now = self.clock()
        wait = self.waits.get(partition)
        if wait is not None and now < wait.next_try:
            return False
        try:
            (tp,) = self.consumer.committed([TopicPartition(self.topic, partition)], TRY_S)
            err = tp.error  # a per-partition error does not raise
        except KafkaException as exc:
            err = exc.args[0]
            if is_fatal(err):
                raise ConsumerFenced(f"consumer: {err}") from exc
        if err is not None:
            if not is_transient(err):
                raise KafkaException(err)
            self._waiting(partition, now, str(err))
            return False
        self.offsets[partition] = tp.offset
        if wait is not None:
            log.info(
                "committed offset stable",
                extra={
                    "action": "offsets_stable",
                    "partition": partition,
                    "waited": f"{self.clock() - wait.since:.1f}s",
                },
            )
        self.waits.pop(partition, None)
        return True

    def forget(self, partition: int) -> None:
        """Stop tracking ``partition`` (revoked or lost)."""
        self.waits.pop(partition, None)
        self.offsets.pop(partition, None)

    def _waiting(self, partition: int, now: float, error: str) -> None:
        wait = self.waits.get(partition)
        if wait is None:
            wait = self.waits[partition] = _Wait(since=now, next_try=now, logged=now)
            log.warning(
                "its committed offset is not stable yet (a previous owner's transaction is "
                "still open, or the group coordinator is not answering); the partition waits, "
                "and so do the partitions assigned with it (librdkafka fetches their offsets "
                "together); a wait far past the transactions' timeout is a stuck "
                "transaction: cronlog doctor transactions (docs/operations.md)",
                extra={"action": "offsets_unstable", "partition": partition, "error": error},
            )
        elif now - wait.logged >= LOG_EVERY_S:
            wait.logged = now
            log.warning(
                "committed offset still not stable",
                extra={
                    "action": "offsets_unstable",
                    "partition": partition,
                    "waited": f"{now - wait.since:.0f}s",
                    "error": error,
                },
            )
        if (
            self.on_long_wait is not None
            and self.long_wait_s > 0
            and now - wait.since >= self.long_wait_s
            and (wait.reported is None or now - wait.reported >= LOG_EVERY_S)
        ):
            wait.reported = now
            self.on_long_wait(partition, now - wait.since)
        wait.next_try = now + RETRY_S
