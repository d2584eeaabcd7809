"""The worker's commands to the fold (polls, renewals, completions, releases), sent in batches.

Any thread queues a command (``Outbox.send``); one sender thread encodes and produces all that
is queued, then flushes: librdkafka's flush sends at once whatever ``linger.ms`` says
(librdkafka #3489/#3494) and returns when the broker has acknowledged the batch. What was
queued meanwhile is the next batch: a group commit, so an idle worker's completion leaves at
once (the DAG hop) and a busy worker's completions of the last few milliseconds share one
produce request and one flush.

What a completion means is unchanged: the fold has folded it. A command queued here and lost
with a crashed process is lost as it was in librdkafka's queue before: the lease lapses, the
attempt is given back (not failed) and runs again (docs/dispatch.md, "Failure rules").
Nothing is acknowledged to a task on a completion, so nothing waits for it to be durable; a
graceful stop sends and flushes every queued command (``close``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import KafkaException, Producer

from cronlog import commands as cmd
from topology.kafka.config import KafkaSettings
from topology.kafka.retrying import start_thread
from topology.wire.codec import encode_command

log = logging.getLogger("cronlog.worker")

FLUSH_WAIT_S = 0.5
"""How long one flush waits for the broker's acks before the next batch goes anyway (what is
unacknowledged stays queued in librdkafka and is retried by it)."""
QUEUE_FULL_WAIT_S = 5.0
"""How long a command waits for room in librdkafka's queue (broker unreachable) before it is
given up (logged; its ``failed`` callback runs)."""


@dataclass(slots=True)
class Queued:
    """One command waiting for the sender."""

    job_id: str
    idem_key: str
    command: cmd.Command
    partition: int | None
    failed: Callable[[], object] | None


class Outbox:
    """A producer of the commands topic, fed by any thread, flushed by one.

    Args:
        settings: the cluster (``producer_config``: murmur2, idempotence, acks=all).
        topic: the commands topic.
    """

    def __init__(self, settings: KafkaSettings, topic: str) -> None:
        self.settings, self.topic = settings, topic
        self.producer = Producer(settings.producer_config())
        lock = threading.Lock()
        self._cond = threading.Condition(lock)
        """Wakes the sender: something was queued, or closing."""
        self._drained = threading.Condition(lock)
        """Wakes ``drain``: the queue is empty and no batch is on its way."""
        self._queue: list[Queued] = []
        self._closing = False
        self._busy = False
        self.batches = 0
        """Batches sent (one produce request and one flush each, unless split by size)."""
        self.sent = 0
        """Commands handed to librdkafka."""
        self._thread = start_thread("outbox", self._loop)  # a bug in it ends the process

    def send(
        self,
        job_id: str,
        idem_key: str,
        command: cmd.Command,
        partition: int | None = None,
        failed: Callable[[], object] | None = None,
    ) -> bool:
        """Queue ``command`` for the next batch; returns False once closed (nothing queued).

        ``partition``: a poll's explicit partition (no record key, like a Tick); else the
        job_id is the key. ``failed``: called (in the sender thread) if the command cannot be
        handed to Kafka. Never raises: an attempt thread that died here would hold its slot.
        Idempotency: commands carry their idem_key, so a retried send is harmless.
        """
        with self._cond:
            if self._closing:
                return False
            self._queue.append(Queued(job_id, idem_key, command, partition, failed))
            if not self._busy:
                self._cond.notify()
        return True

    def drain(self, timeout_s: float = 10.0) -> int:
        """Wait until every command queued so far is produced and flushed; return how many
        librdkafka still holds undelivered (0: all acknowledged)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while (self._queue or self._busy) and time.monotonic() < deadline:
                self._drained.wait(max(deadline - time.monotonic(), 0.0))
        return len(self.producer)

    def close(self, timeout_s: float = 10.0) -> int:
        """Send what is queued, flush, and stop the sender; return the commands not delivered."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join(timeout_s)
        return self.producer.flush(max(timeout_s / 2, 1.0))

    def _loop(self) -> None:
        while True:
            with self._cond:
                self._busy = False
                if not self._queue:
                    self._drained.notify_all()
                while not self._queue and not self._closing:
                    self._cond.wait()
                batch, self._queue = self._queue, []
                self._busy = True
                if not batch and self._closing:
                    return
            for queued in batch:
                if not self._produce(queued) and queued.failed is not None:
                    queued.failed()
            self.batches += 1
            self.sent += len(batch)
            try:
                self.producer.flush(FLUSH_WAIT_S)  # sends now and waits for the acks
            except KafkaException as exc:  # fatal: replaced at the next produce
                log.error("flushing commands failed: %s", exc)

    def _produce(self, q: Queued) -> bool:
        """Hand one command to librdkafka; False (logged) when it could not be.

        A producer in a fatal state (librdkafka's idempotence can end in one after a broker
        outage) is replaced.
        """
        name = type(q.command).__name__
        try:
            value = encode_command(
                cmd.Envelope(idem_key=q.idem_key, job_id=q.job_id, command=q.command)
            )
        except Exception:  # a bug, never the broker: this command is lost, the rest go
            log.exception("cannot encode %s", name, extra={"action": "command_unencodable"})
            return False
        deadline = time.monotonic() + QUEUE_FULL_WAIT_S
        replaced = 0
        while True:
            try:
                if q.partition is None:
                    self.producer.produce(self.topic, key=q.job_id.encode(), value=value)
                else:
                    self.producer.produce(self.topic, value=value, partition=q.partition)
                return True
            except BufferError:
                if time.monotonic() >= deadline:
                    log.error("cannot send %s: producer queue full", name)
                    return False
                self.producer.poll(0.1)  # local queue full (broker unreachable): wait for room
            except KafkaException as exc:
                log.error("cannot send %s: %s", name, exc)
                if not (exc.args and exc.args[0].fatal()) or replaced >= 3:
                    return False
                log.warning("producer is in a fatal state; replacing it")
                self.producer = Producer(self.settings.producer_config())
                replaced += 1
