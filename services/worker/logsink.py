"""Shipping task output to ``cronlog.logs``: one LogSink per attempt, one LogShipper per worker.

A sink keeps at most ``cap_bytes`` of an attempt's output, cut into LogChunks of at most
``CHUNK_BYTES``; output past the cap is counted, not kept. A chunk goes when it is full, when
output has waited ``flush_s`` (the shipper's flusher thread), and at ``close()`` (the final
chunk, with the totals). Layout and rationale: ``docs/architecture.md``, "Task logs".
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from topology.kafka.config import KafkaSettings
from topology.kafka.retrying import Liveness, kafka_error, start_thread
from topology.wire.log_chunks import CHUNK_BYTES, LogChunk, encode_chunk

log = logging.getLogger("cronlog.worker.logs")
Send = Callable[[str, bytes], None]
"""``send(run_id, value)``: hand one encoded LogChunk to Kafka (key: run_id)."""


@dataclass(frozen=True, slots=True)
class AttemptRef:
    """Which execution a log belongs to (one attempt under one lease epoch)."""

    job_id: str
    run_id: str
    task: str
    attempt: int
    epoch: int
    worker_id: str


class LogSink:
    """One execution's output: ``write`` from the reader thread, ``flush`` from the shipper's.

    Args:
        ref: the execution the output belongs to.
        cap_bytes: bytes kept at most (>= 0); later output only adds to ``bytes_total``.
        send: where encoded chunks go.
        on_close: called once, after the final chunk (the shipper forgets the sink).

    Thread-safe; ``close`` is idempotent, and ``write`` after ``close`` is ignored.
    """

    def __init__(
        self,
        ref: AttemptRef,
        cap_bytes: int,
        send: Send,
        on_close: Callable[[LogSink], None] | None = None,
    ) -> None:
        if cap_bytes < 0:
            raise ValueError(f"cap_bytes must be >= 0, got {cap_bytes}")
        self.ref, self.cap_bytes = ref, cap_bytes
        self._send, self._on_close = send, on_close
        self._lock = threading.Lock()
        self._pending = bytearray()
        self._kept = 0
        """Bytes accepted for keeping (sent or pending)."""
        self._sent = 0
        """Bytes already sent in chunks (the next chunk's offset)."""
        self.bytes_total = 0
        """Bytes of output seen so far, kept or not."""
        self._seq = 0
        self._closed = False

    @property
    def truncated(self) -> bool:
        """True once more output was seen than the cap keeps."""
        return self.bytes_total > self.cap_bytes

    def write(self, data: bytes) -> None:
        """Take ``data`` (output bytes, verbatim); full chunks are sent at once."""
        with self._lock:
            if self._closed or not data:
                return
            self.bytes_total += len(data)
            keep = data[: max(self.cap_bytes - self._kept, 0)]
            self._kept += len(keep)
            self._pending += keep
            while len(self._pending) >= CHUNK_BYTES:
                self._emit(bytes(self._pending[:CHUNK_BYTES]), final=False)
                del self._pending[:CHUNK_BYTES]

    def count(self, n: int) -> None:
        """Add ``n`` bytes of output that were produced but never passed to ``write``."""
        with self._lock:
            if not self._closed:
                self.bytes_total += max(n, 0)

    def flush(self) -> None:
        """Send what is pending as one chunk (nothing if nothing is)."""
        with self._lock:
            if self._pending and not self._closed:
                self._emit(bytes(self._pending), final=False)
                self._pending.clear()

    def close(self, *, skip_if_empty: bool = False) -> None:
        """Send the pending bytes in the final chunk, with ``bytes_total`` and ``truncated``.

        Args:
            skip_if_empty: send nothing at all when the execution produced no output (no
                byte written or counted, no chunk sent): a completed attempt's empty log
                is told by its completion (``output_tail`` "", docs/architecture.md, "Task
                logs"), so a no-op task costs no log record. Revoked and released attempts
                keep their empty final chunk: no completion speaks for them.
        """
        with self._lock:
            if self._closed:
                return
            if not (skip_if_empty and self.bytes_total == 0 and self._seq == 0):
                self._emit(bytes(self._pending), final=True)
            self._pending.clear()
            self._closed = True
        if self._on_close is not None:
            self._on_close(self)

    def _emit(self, data: bytes, *, final: bool) -> None:
        r = self.ref
        chunk = LogChunk(
            r.job_id,
            r.run_id,
            r.task,
            r.attempt,
            r.epoch,
            r.worker_id,
            self._seq,
            self._sent,
            data,
            final,
            self.bytes_total,
            self.truncated,
            self.cap_bytes,
            datetime.now(UTC),
        )
        self._seq += 1
        self._sent += len(data)
        self._send(r.run_id, encode_chunk(chunk))


class LogShipper:
    """The worker's log producer (lz4, batched) and the thread that flushes waiting output.

    Logs are best effort next to commands: a chunk the producer cannot queue within
    ``queue_wait_s`` is dropped and logged (the reader sees a gap in ``offset``), and a
    broken producer loses chunks rather than stall an attempt. Broker trouble is logged once
    per episode (``liveness``); a producer in a fatal state is replaced (chunks are
    idempotent by their key); anything else that ends the flusher thread ends the process.

    Args:
        settings: cluster and cap/flush settings (``log_cap_bytes``, ``log_flush_s``).
        topic: the logs topic.
    """

    def __init__(
        self,
        settings: KafkaSettings,
        topic: str,
        *,
        cap_bytes: int,
        flush_s: float,
        queue_wait_s: float = 10.0,
    ) -> None:
        self.topic, self.cap_bytes, self.flush_s = topic, cap_bytes, flush_s
        self.queue_wait_s = queue_wait_s
        self.settings = settings
        self.liveness = Liveness("log-shipper", log)
        self.producer = self._new_producer()
        self._lock = threading.Lock()
        self._sinks: set[LogSink] = set()
        self._stop = threading.Event()
        self._thread = start_thread("log-flusher", self._flush_loop)

    def _new_producer(self) -> Producer:
        return Producer(
            self.settings.producer_config(
                **{
                    "compression.type": "lz4",
                    "linger.ms": 20,
                    "error_cb": self.liveness.failed,
                    "on_delivery": self._delivered,
                }
            )
        )

    def _delivered(self, err: KafkaError | None, _msg: Message) -> None:
        if err is None:
            self.liveness.recovered()
        else:
            self.liveness.failed(f"a log chunk was not delivered: {err}")

    def open(self, ref: AttemptRef) -> LogSink:
        """Return a new sink for ``ref``'s output, flushed every ``flush_s`` until closed."""
        sink = LogSink(ref, self.cap_bytes, self._send, on_close=self._forget)
        with self._lock:
            self._sinks.add(sink)
        return sink

    def close(self, timeout_s: float = 10.0) -> None:
        """Close every open sink (final chunks), stop the flusher, deliver what is queued."""
        with self._lock:
            sinks = list(self._sinks)
        for sink in sinks:
            sink.close()
        self._stop.set()
        self._thread.join(timeout_s)
        left = self.producer.flush(timeout_s)
        if left:
            log.error(
                "%d log chunks not delivered at shutdown",
                left,
                extra={"action": "logs.undelivered"},
            )

    def _forget(self, sink: LogSink) -> None:
        with self._lock:
            self._sinks.discard(sink)

    def _send(self, run_id: str, value: bytes) -> None:
        deadline = time.monotonic() + self.queue_wait_s
        while True:
            try:
                self.producer.produce(self.topic, key=run_id.encode(), value=value)
                return
            except BufferError:
                if time.monotonic() >= deadline:
                    break
                self.producer.poll(0.05)  # the local queue is full: let deliveries drain it
            except KafkaException as exc:
                log.error("cannot send a log chunk: %s", exc, extra={"run_id": run_id})
                return
        log.error(
            "log chunk dropped: producer queue full for %.0f s",
            self.queue_wait_s,
            extra={"action": "logs.dropped", "run_id": run_id},
        )

    def _flush_loop(self) -> None:
        while not self._stop.wait(self.flush_s):
            with self._lock:
                sinks = list(self._sinks)
            for sink in sinks:
                try:
                    sink.flush()
                except Exception:  # an encode bug must not stop every other log
                    log.exception("flushing a log failed", extra={"run_id": sink.ref.run_id})
            try:
                self.producer.poll(0)
            except KafkaException as exc:
                err = kafka_error(exc)
                if err is None or not err.fatal():
                    raise
                log.error(
                    "queued log chunks are lost",
                    extra={"action": "logs_producer_replaced", "error": err},
                )
                self.producer = self._new_producer()
