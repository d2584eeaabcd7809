"""The API's read model: a background consumer of ``cronlog.run-events`` feeding the projection.

Every partition is assigned manually (no group membership, no commits): the consumed offsets
live in the same RocksDB as the documents and are written in the same atomic batch, so after
a restart the projection resumes exactly where its documents stop. Writers await
``wait_for(idem_key)`` to answer only once their command's effect is readable.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from collections.abc import Callable
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from cronlog import events as ev
from services.api.readmodel import retention as history
from services.api.readmodel import views
from services.api.readmodel.health import ReaderHealth
from services.api.readmodel.keys import job_key
from services.api.readmodel.projection import apply
from services.api.readmodel.store import FORMAT, Batch, Store
from topology.kafka.config import KafkaSettings
from topology.kafka.retrying import (
    Liveness,
    Unavailable,
    call_with_retry,
    check_topic,
    record_ok,
)
from topology.kafka.topics import Topics
from topology.wire.codec import DecodeError, decode_event

log = logging.getLogger("cronlog.api.read_model")
ApplyOne = Callable[[Batch, Message, int, int], None]
"""``one(batch, message, partition, offset)``: put one record's documents into ``batch``."""
POLL_BATCH = 500
"""At most this many records are applied per RocksDB write batch."""


class ReadModel(ReaderHealth):
    """The projection of the run-events topic, kept up to date by a daemon thread.

    Reads (``job``, ``jobs``, ``runs``, ``run``, ``events_for``) may come from any thread.
    Transient broker errors are retried (``topology.kafka.retrying``) and shown by ``liveness``;
    anything else ends the process (``topology.kafka.retrying.fatal``).
    """

    thread_name = "read-model"
    store_format = FORMAT
    """The format tag of this model's store (``store.Store``)."""

    def __init__(self, settings: KafkaSettings, path: Path, *, fault: str = "") -> None:
        """Open the store at ``path``; nothing is consumed before ``start()``.

        ``fault`` is for tests only: ``fatal`` makes the thread meet a fatal KafkaError once
        assigned, ``stall`` makes it hang without a heartbeat.
        """
        self.settings = settings
        self.fault = fault
        self.liveness = Liveness(self.thread_name, log)
        self.topic = Topics.of(settings).run_events
        self.store = Store(path, self.store_format)
        self.write_lock = threading.Lock()
        """Held while a batch of records is applied and committed, and by each pruning step
        (``pruner``): the two writers never interleave. Reads never take it."""
        self.archived: history.ArchiveLookup = history.no_archive
        """Where ``run`` looks for a run the read model does not hold (pruned): the cold
        archive's hook; by default nothing is archived."""
        self._lock = threading.Lock()
        self._waiters: dict[str, list[asyncio.Future[None]]] = {}
        self._version = 0
        self._watchers: list[asyncio.Future[None]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._targets: dict[int, int] = {}
        self._positions: dict[int, int] = {}
        self._ready = threading.Event()

    # -- lifecycle (start: ReaderHealth's; caught up: see ``ready``) --------------------------
    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop consuming, wait up to ``timeout_s`` seconds for the thread, close the store."""
        super().stop(timeout_s)
        self.store.close()

    @property
    def ready(self) -> bool:
        """True once every partition was consumed up to the end offset seen at start."""
        return self._ready.is_set()

    def lag(self) -> int | None:
        """Return how many records remain before ``ready`` (None before assignment)."""
        if not self._targets:
            return None
        return sum(max(0, t - self._positions.get(p, 0)) for p, t in self._targets.items())

    # -- reads -------------------------------------------------------------------------------
    def job(self, job_id: str) -> dict[str, Any] | None:
        """Return job ``job_id`` as the API shows it, or None (see ``views.job_view``)."""
        return views.get_job(self.store, job_id)

    def stored_job(self, job_id: str) -> dict[str, Any] | None:
        """Return the stored document of job ``job_id`` (``projection``'s), or None."""
        return self.store.get_json(job_key(job_id))

    def jobs(self, status: str | None = None) -> list[dict[str, Any]]:
        """Return every job, ordered by job_id, optionally filtered by status."""
        return views.list_jobs(self.store, status)

    def runs(self, job_id: str, limit: int) -> list[dict[str, Any]]:
        """Return a job's runs, newest scheduled_for first, at most ``limit``."""
        return views.list_runs(self.store, job_id, limit)

    def run(self, run_id: str) -> dict[str, Any] | None:
        """Return run ``run_id``, or None; a run not held here is asked of ``archived``."""
        return views.get_run(self.store, run_id) or self.archived(run_id)

    def skipped(self, job_id: str, limit: int) -> list[dict[str, Any]]:
        """Return a job's skipped ticks, newest first, at most ``limit``."""
        return views.list_skipped(self.store, job_id, limit)

    def ticks(self, job_id: str, after: datetime, count: int) -> list[dict[str, str]] | None:
        """Return the next ``count`` ticks of job ``job_id`` after ``after``, or None if the
        job is unknown (see ``views.preview``)."""
        doc = self.store.get_json(job_key(job_id))
        return views.preview(doc, after, count) if doc is not None else None

    def events_for(self, idem_key: str, job_id: str | None = None) -> list[ev.RunEvent]:
        """Return the events command ``idem_key`` caused so far (see ``views.events_for``)."""
        return views.events_for(self.store, idem_key, job_id)

    async def wait_for(
        self, idem_key: str, timeout_s: float, job_id: str | None = None
    ) -> list[ev.RunEvent]:
        """Wait until the events of command ``idem_key`` are applied, and return them.

        Args:
            idem_key: the command's idem_key.
            timeout_s: how long to wait, seconds.
            job_id: only events for this job (a client may reuse a key for another job).

        Returns:
            The command's events (those applied in the same batch as its first one; the fold
            publishes a command's events in one flush). Empty on timeout. A command applied
            earlier (a retried Idempotency-Key) returns its stored events at once.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            fut: asyncio.Future[None] = loop.create_future()
            with self._lock:  # register before looking: a commit in between still wakes us
                self._waiters.setdefault(idem_key, []).append(fut)
            try:
                events = self.events_for(idem_key, job_id)
                remaining = deadline - loop.time()
                if events or remaining <= 0:
                    return events
                try:
                    await asyncio.wait_for(fut, remaining)
                except TimeoutError:
                    return self.events_for(idem_key, job_id)
            finally:
                with self._lock:
                    waiting = self._waiters.get(idem_key, [])
                    if fut in waiting:
                        waiting.remove(fut)
                    if not waiting:
                        self._waiters.pop(idem_key, None)

    @property
    def version(self) -> int:
        """How many record batches were applied since start: grows whenever the documents
        change (the console's live updates wait on it with ``changed``)."""
        return self._version

    async def changed(self, seen: int, timeout_s: float) -> int:
        """Wait until ``version`` differs from ``seen`` or ``timeout_s`` seconds passed.

        Returns:
            The current ``version`` (equal to ``seen`` on timeout).
        """
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with self._lock:  # register before looking: a batch in between still wakes us
            self._watchers.append(fut)
        try:
            if self._version == seen:
                await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            pass
        finally:
            with self._lock:
                if fut in self._watchers:
                    self._watchers.remove(fut)
        return self._version

    def _notify(self, idem_keys: set[str]) -> None:
        with self._lock:
            self._version += 1
            futures = [f for key in idem_keys for f in self._waiters.pop(key, [])]
            futures += self._watchers
            self._watchers = []
        for fut in futures:
            try:
                fut.get_loop().call_soon_threadsafe(_wake, fut)
            except RuntimeError:  # the waiter's loop is closed (shutdown)
                continue

    # -- the consumer thread -----------------------------------------------------------------
    def _run(self) -> None:
        conf = self.settings.consumer_config(
            f"{self.settings.topic_prefix}cronlog-api-{uuid.uuid4().hex}",
            **{"enable.partition.eof": False, "error_cb": self.liveness.failed},
        )
        consumer = Consumer(conf)
        try:
            self._assign(consumer)
            while not self._stop.is_set():
                self.liveness.beat()
                self._inject_fault()
                messages = consumer.consume(POLL_BATCH, timeout=0.2)
                if messages:
                    self._apply(messages)
                self.liveness.probe(lambda: check_topic(consumer, self.topic))
                if not self._ready.is_set():
                    self._check_caught_up(consumer)
        finally:
            consumer.close()

    def _inject_fault(self) -> None:
        if self.fault == "fatal":
            raise KafkaException(
                KafkaError(KafkaError._FATAL, "injected by CRONLOG_API_TEST_FAULT", fatal=True)
            )
        if self.fault == "stall":
            self._stop.wait()

    def _assign(self, consumer: Consumer) -> None:
        partitions = self._wait_for_topic(consumer)
        offsets, wipe = {}, False
        for p in partitions:
            tp = TopicPartition(self.topic, p)
            low, high = call_with_retry(
                partial(consumer.get_watermark_offsets, tp, timeout=10),
                what=f"reading the offsets of {self.topic}/{p}",
                liveness=self.liveness,
                stop=self._stop,
            )
            self._targets[p] = high
            raw = self.store.get(self._offset_key(p))
            offsets[p] = int(raw) if raw is not None else low
            wipe = wipe or not low <= offsets[p] <= high  # topic recreated or truncated
            self._positions[p] = offsets[p]
        if wipe or self.store.get(b"meta:topic") not in (None, self.topic.encode()):
            log.warning(
                "read model does not match the topic; rebuilding from offset 0",
                extra={"action": "read_model.rebuild", "topic": self.topic},
            )
            self.store.wipe()
            offsets = dict.fromkeys(partitions, OFFSET_BEGINNING)
            self._positions = dict.fromkeys(partitions, 0)
        self.store.write({b"meta:topic": self.topic.encode()})
        consumer.assign([TopicPartition(self.topic, p, o) for p, o in offsets.items()])
        log.info(
            "read model assigned",
            extra={"action": "read_model.assign", "topic": self.topic, "lag": self.lag()},
        )

    def _wait_for_topic(self, consumer: Consumer) -> list[int]:
        def partitions() -> list[int]:
            meta = consumer.list_topics(self.topic, timeout=10).topics.get(self.topic)
            if meta is None or meta.error is not None or not meta.partitions:
                raise Unavailable(f"topic {self.topic} does not exist (yet)")
            return sorted(meta.partitions)

        return call_with_retry(
            partitions, what=f"listing {self.topic}", liveness=self.liveness, stop=self._stop
        )

    def _offset_key(self, partition: int) -> bytes:
        return b"off:" + self.topic.encode() + b"\x00" + b"%d" % partition

    def _apply(self, messages: list[Message]) -> None:
        with self.write_lock:
            touched = self._apply_locked(messages)
        self._notify(touched)

    def _apply_locked(self, messages: list[Message]) -> set[str]:
        touched = set[str]()

        def one(batch: Batch, msg: Message, partition: int, offset: int) -> None:
            try:
                record = decode_event(msg.value() or b"")
                apply(batch, record)
                touched.add(record.idem_key)
            except DecodeError as exc:  # not ours to dead-letter: the fold wrote it; skip
                log.error(
                    "undecodable run-event at %s/%d@%d: %s",
                    msg.topic(),
                    partition,
                    offset,
                    exc,
                    extra={"action": "read_model.undecodable"},
                )
            except Exception:  # a projection bug must not wedge the API: skip and say so
                log.exception(
                    "cannot apply run-event at %s/%d@%d",
                    msg.topic(),
                    partition,
                    offset,
                    extra={"action": "read_model.apply_failed"},
                )

        self._apply_each(messages, one)
        return touched

    def _apply_each(self, messages: list[Message], one: ApplyOne) -> None:
        """Apply every usable record with ``one`` and store the offset after it, all in one
        atomic batch: the documents and the position they reflect cannot disagree.

        ``one`` must not raise for a bad record (it logs and skips it): its offset is stored
        all the same, so a poison record never wedges the reader.
        """
        batch = Batch(self.store)
        for msg in messages:
            partition, offset = msg.partition(), msg.offset()
            if not record_ok(msg, self.liveness) or partition is None or offset is None:
                continue
            one(batch, msg, partition, offset)
            batch.put(self._offset_key(partition), b"%d" % (offset + 1))
            self._positions[partition] = offset + 1
        batch.commit()

    def _check_caught_up(self, consumer: Consumer) -> None:
        if not self._targets:
            return
        for tp in consumer.position([TopicPartition(self.topic, p) for p in self._targets]):
            if tp.offset >= 0:  # control records advance the position past the last message
                self._positions[tp.partition] = max(self._positions[tp.partition], tp.offset)
        if all(self._positions[p] >= t for p, t in self._targets.items()):
            self._ready.set()
            log.info("read model caught up", extra={"action": "read_model.ready"})


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
