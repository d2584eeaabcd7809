"""The ticker: time enters the log as a Tick per owned partition, just after each interval.

It only produces; the fold decides what a Tick means (DESIGN.md, "Time is data"). Only the
partitions this process folds get its ticks, so the commands topic grows by one Tick per
partition per interval, not one per partition per scheduler process. A duplicate or late
tick (a rebalance moved a partition while a tick was in flight) is harmless.

At most one of its ticks per partition is unfolded (``TickGate``): while the fold has not
reached the last tick of a partition, the next is not appended. A fold that stalls (a
partition whose offsets stay unstable, a fold far behind under load) then finds one old tick,
not one per second of the stall: folded back to back in log time, a stall's ticks expired the
leases that the stall's polls granted before any worker could start them, four lapses in a row
per task, and dead-lettered runs that never ran (adversary finding F3).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import uuid
from collections.abc import Callable

from confluent_kafka import KafkaError, Message, Producer

from cronlog import commands as cmd
from cronlog.ids import tick_idem_key
from topology.kafka.config import KafkaSettings
from topology.kafka.topics import Topics
from topology.wire.codec import Codec

log = logging.getLogger("cronlog.ticker")
TICK_OFFSET_S = 0.002
"""Ticks are sent this long after each interval boundary (LogAppendTime must pass it)."""


class TickGate:
    """Which partitions may get a tick now: those whose last tick of ours has been folded.

    The ticker calls ``may_tick`` before a tick, ``sent`` when it is produced and ``delivered``
    or ``failed`` with its delivery report; the fold calls ``folded`` after each commit. Thread
    safe (the ticker thread and the fold thread).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[int, int | None] = {}  # partition -> offset of the unfolded tick
        self._folded: dict[int, int] = {}  # partition -> next offset the fold reads

    def may_tick(self, partition: int) -> bool:
        """True when no tick of ours to ``partition`` is waiting to be folded."""
        with self._lock:
            if partition not in self._pending:
                return True
            offset = self._pending[partition]
            if offset is not None and self._folded.get(partition, -1) > offset:
                del self._pending[partition]
                return True
            return False

    def sent(self, partition: int) -> None:
        """A tick to ``partition`` was produced (its offset comes with ``delivered``)."""
        with self._lock:
            self._pending[partition] = None

    def delivered(self, partition: int, offset: int) -> None:
        """The tick to ``partition`` was appended at ``offset``."""
        with self._lock:
            self._pending[partition] = offset

    def failed(self, partition: int) -> None:
        """The tick to ``partition`` was not appended: the next may go."""
        with self._lock:
            self._pending.pop(partition, None)

    def reset(self, partition: int, committed: int = -1) -> None:
        """Start ``partition`` afresh (assigned or revoked): its next tick may go.

        Args:
            partition: the partition.
            committed: its committed offset when assigned (negative: none): the fold starts
                there, so any tick of ours below it was folded, by us or by another owner.
                Without it a tick folded elsewhere while the partition was away, or its
                delivery report served after this reset, would hold the partition's ticks
                back for ever when nothing else is appended to it (the chaos test lost 2,052
                ticks so).
        """
        with self._lock:
            self._pending.pop(partition, None)
            self._folded.pop(partition, None)
            if committed >= 0:
                self._folded[partition] = committed

    def folded(self, partition: int, next_offset: int) -> None:
        """The fold committed ``partition`` up to ``next_offset`` (exclusive)."""
        with self._lock:
            self._folded[partition] = max(self._folded.get(partition, -1), next_offset)


def run_ticker(
    settings: KafkaSettings,
    owned: Callable[[], list[int]],
    stop: threading.Event,
    *,
    interval_s: float,
    instance_id: str,
    gate: TickGate | None = None,
) -> None:
    """Append a Tick to each owned partition just after every multiple of ``interval_s``.

    Args:
        settings: the cluster and topic prefix.
        owned: returns the partitions this process folds now.
        stop: set to end the loop.
        interval_s: the tick interval, seconds.
        instance_id: names the ticker in the ticks' idem_keys (with a random suffix, so a
            restarted process never reuses a predecessor's keys).
        gate: holds a partition's next tick back while its last is unfolded (None: no gate).
    """
    commands = Topics.of(settings).commands
    codec = Codec()
    producer = Producer(settings.producer_config(**{"linger.ms": 1, "acks": "all"}))
    ticker_id = f"{instance_id}-{uuid.uuid4().hex[:8]}"
    gate = gate or TickGate()

    def report(err: KafkaError | None, msg: Message) -> None:
        p, offset = msg.partition(), msg.offset()
        if p is None:
            return
        if err is None and offset is not None:
            gate.delivered(p, offset)
        else:
            gate.failed(p)

    for seq in itertools.count():
        now = time.time()
        if stop.wait(interval_s - (now % interval_s) + TICK_OFFSET_S):
            break
        producer.poll(0)  # the last round's delivery reports first
        for p in owned():
            if not gate.may_tick(p):
                continue
            env = cmd.Envelope(
                idem_key=tick_idem_key(ticker_id, p, seq), job_id="", command=cmd.Tick()
            )
            try:
                producer.produce(
                    commands, codec.encode_command(env), partition=p, on_delivery=report
                )
                gate.sent(p)
            except BufferError:
                log.warning("producer queue full", extra={"action": "tick_dropped", "partition": p})
        producer.poll(0)
    producer.flush(5)
