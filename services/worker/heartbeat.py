"""A worker's heartbeat on ``cronlog.workers``: who it is, its slots, the leases it holds.

Every ``heartbeat_s`` seconds a thread cuts a ``WorkerHeartbeat`` (``topology/wire/heartbeats.py``)
from a callable that lists the held leases, and produces it keyed by the worker_id on the
compacted workers topic; ``stop()`` produces a tombstone so readers forget the worker at once.
A worker killed outright writes none: readers hold it as lost once its last heartbeat is older
than its ttl (``TTL_INTERVALS`` heartbeat intervals).

Heartbeats inform people and tools (``GET /api/v1/workers``); nothing decides on them, so a
lost or late one is harmless and they go without idempotence on a producer of their own.
Broker trouble is counted and logged once per episode (``topology.kafka.retrying.Liveness``); any
other failure ends the process (``start_thread``): the thread never dies quietly.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

from confluent_kafka import KafkaError, Message, Producer

from services.worker.settings import WorkerSettings
from topology.kafka.retrying import Liveness, start_thread
from topology.kafka.topics import Topics
from topology.wire.codec import encode_heartbeat
from topology.wire.heartbeats import TTL_INTERVALS, HeldLease, WorkerHeartbeat

log = logging.getLogger("cronlog.worker.heartbeat")


class Heartbeat:
    """Announces one worker on the workers topic until ``stop()``.

    Args:
        settings: the worker's (worker_id, slots, heartbeat_s, cluster).
        leases: returns the leases the worker holds now; called from the heartbeat thread.
    """

    thread_name = "heartbeat"

    def __init__(self, settings: WorkerSettings, leases: Callable[[], Sequence[HeldLease]]) -> None:
        self.settings, self.leases = settings, leases
        self.topic = Topics.of(settings).workers
        self.interval = timedelta(seconds=settings.heartbeat_s)
        self.started_at = datetime.now(UTC)
        self.liveness = Liveness(self.thread_name, log)
        ttl_ms = round(self.interval.total_seconds() * 1000) * TTL_INTERVALS
        self.producer = Producer(
            settings.producer_config(
                **{
                    "enable.idempotence": False,  # a repeated heartbeat is harmless
                    "linger.ms": 0,
                    "message.timeout.ms": max(ttl_ms, 5000),  # older ones vouch for nothing
                    "error_cb": self.liveness.failed,
                }
            )
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def beat(self, now: datetime | None = None) -> WorkerHeartbeat:
        """Return the heartbeat of this worker as of ``now`` (default: the wall clock)."""
        held = tuple(self.leases())
        s = self.settings
        return WorkerHeartbeat(
            worker_id=s.worker_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            slots=s.slots,
            free_slots=max(0, s.slots - len(held)),
            leases=held,
            started_at=self.started_at,
            at=now or datetime.now(UTC),
            ttl=self.interval * TTL_INTERVALS,
        )

    def start(self) -> None:
        """Send a heartbeat now and every ``heartbeat_s`` seconds, in a daemon thread."""
        self._thread = start_thread(self.thread_name, self._run)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop beating and say so: a tombstone under the worker_id, flushed up to
        ``timeout_s`` seconds (a worker that cannot reach the broker is lost after its ttl)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self._produce(None)
        left = self.producer.flush(timeout_s)
        if left:
            log.warning("heartbeat tombstone not delivered within %.0fs", timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.liveness.beat()
            self._produce(encode_heartbeat(self.beat()))
            self.producer.poll(0)  # serve delivery reports
            self._stop.wait(self.interval.total_seconds())

    def _produce(self, value: bytes | None) -> None:
        try:
            self.producer.produce(
                self.topic,
                key=self.settings.worker_id.encode(),
                value=value,
                on_delivery=self._delivered,
            )
        except BufferError:  # the local queue is full: the broker has been away a while
            self.liveness.failed("heartbeat queue full")

    def _delivered(self, err: KafkaError | None, _msg: Message) -> None:
        if err is None:
            self.liveness.recovered()
        else:
            self.liveness.failed(err)
