"""The ticker: time enters the log as a Tick per owned partition, just after each interval.

It only produces; the fold decides what a Tick means (DESIGN.md, "Time is data"). Only the
partitions this process folds get its ticks, so the commands topic grows by one Tick per
partition per interval, not one per partition per scheduler process. A duplicate or late
tick (a rebalance moved a partition while a tick was in flight) is harmless.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import uuid
from collections.abc import Callable

from confluent_kafka import Producer

from cronlog import commands as cmd
from cronlog.ids import tick_idem_key
from topology.codec import Codec
from topology.config import KafkaSettings
from topology.topics import Topics

log = logging.getLogger("cronlog.ticker")
TICK_OFFSET_S = 0.002
"""Ticks are sent this long after each interval boundary (LogAppendTime must pass it)."""


def run_ticker(
    settings: KafkaSettings,
    owned: Callable[[], list[int]],
    stop: threading.Event,
    *,
    interval_s: float,
    instance_id: str,
) -> None:
    """Append a Tick to each owned partition just after every multiple of ``interval_s``.

    Args:
        settings: the cluster and topic prefix.
        owned: returns the partitions this process folds now.
        stop: set to end the loop.
        interval_s: the tick interval, seconds.
        instance_id: names the ticker in the ticks' idem_keys (with a random suffix, so a
            restarted process never reuses a predecessor's keys).
    """
    commands = Topics.of(settings).commands
    codec = Codec()
    producer = Producer(settings.producer_config(**{"linger.ms": 1, "acks": "all"}))
    ticker_id = f"{instance_id}-{uuid.uuid4().hex[:8]}"
    for seq in itertools.count():
        now = time.time()
        if stop.wait(interval_s - (now % interval_s) + TICK_OFFSET_S):
            break
        for p in owned():
            env = cmd.Envelope(
                idem_key=tick_idem_key(ticker_id, p, seq), job_id="", command=cmd.Tick()
            )
            try:
                producer.produce(commands, codec.encode_command(env), partition=p)
            except BufferError:
                log.warning("action=tick_dropped partition=%d: producer queue full", p)
        producer.poll(0)
    producer.flush(5)
