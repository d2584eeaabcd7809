"""The after relay: run-events in, UpstreamRunEnded commands out (job after job).

Reads every partition of ``cronlog.run-events`` (manual assignment), keeps an ``AfterIndex``,
and appends an UpstreamRunEnded keyed by each downstream job when an upstream run ends. Its
progress is a consumer group's committed offsets, committed only after the commands of every
event below them were delivered; on start it rebuilds the index from its latest snapshot
(``cronlog.after-relay``, written at committed offsets) and the log from there up to the
committed offsets, without sending. Design and guarantees: docs/architecture.md, "Job after job".
Transient broker errors restart the session with capped backoff (logged once per episode);
anything else ends the scheduler process (``topology.kafka.retrying.fatal``).
"""

from __future__ import annotations

import logging
import threading
import time

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from cronlog import events as ev
from cronlog.after_index import OUTCOMES, AfterIndex
from cronlog.commands import Envelope
from cronlog.errors import CronlogError
from services.scheduler.after_snapshot import (
    SNAPSHOT_KEY,
    SNAPSHOT_MAX_BYTES,
    AfterSnapshot,
    SnapshotError,
    decode_snapshot,
    encode_snapshot,
)
from topology.kafka.config import KafkaSettings
from topology.kafka.log_reader import offset_of, partition_count, read_partition, watermarks
from topology.kafka.retrying import (
    Liveness,
    Stopped,
    Unavailable,
    call_with_retry,
    check_topic,
    is_transient,
    record_ok,
    start_thread,
)
from topology.kafka.topics import Topics
from topology.wire.avro_mapping import avro_name
from topology.wire.codec import Codec, DecodeError

log = logging.getLogger("cronlog.after_relay")
FLUSH_TIMEOUT_S = 30.0
"""A batch's commands not delivered within this long fail the session (nothing committed)."""
SNAPSHOT_SCAN = 16
"""How many of the last snapshot records a starting relay considers (several relays write
to the one key; the cleaner may not have compacted them yet)."""


RUN_ENDS = frozenset(avro_name(t) for t in OUTCOMES)
"""The run-ending events, by Avro full name: decoded only when their job has a downstream."""
DEFINITIONS = frozenset(avro_name(t) for t in (ev.JobRegistered, ev.JobRedefined, ev.JobDeleted))
"""The events that change who is ``after`` whom: always decoded."""


class RelayError(CronlogError):
    """The relay cannot go on: a command refused for good (the process ends)."""


class RelayUnavailable(RelayError, Unavailable):
    """The relay could not deliver its commands in time; the session restarts."""


def relay_group(settings: KafkaSettings) -> str:
    """Return the consumer group whose committed offsets are the relay's progress."""
    return f"{settings.topic_prefix}cronlog-after-relay"


class AfterRelay:
    """One relay; ``run`` until ``stop`` is set (every scheduler process runs one).

    Args:
        settings: the cluster and topic prefix.
        commit_interval_s: how often delivered progress is committed, seconds: after a crash
            at most this much of the log (plus one batch) is relayed again, and the fold
            dedupes that tail by idem_key.
        snapshot_interval_s: how often a snapshot of the index is written at the offsets
            just committed, seconds (and once after each rebuild and at stop): a start folds
            at most about this much of the log, plus what was written while it was down.
    """

    def __init__(
        self,
        settings: KafkaSettings,
        *,
        commit_interval_s: float = 1.0,
        snapshot_interval_s: float = 60.0,
    ) -> None:
        self.settings = settings
        topics = Topics.of(settings)
        self.topic = topics.run_events
        self.commands = topics.commands
        self.snapshots = topics.after_relay
        self.commit_interval_s = commit_interval_s
        self.snapshot_interval_s = snapshot_interval_s
        self.codec = Codec()
        self.liveness = Liveness("after-relay", log)

    def run(self, stop: threading.Event) -> None:
        """Relay until ``stop`` is set.

        A session that fails with a transient error starts over from the committed offsets
        (progress is durable) after a capped backoff; the episode is logged once.

        Raises:
            Exception: anything not transient (a bug, a fatal or permanent broker error).
        """
        try:
            call_with_retry(
                lambda: self._session(stop),
                what="after relay session",
                liveness=self.liveness,
                stop=stop,
            )
        except Stopped:
            return

    def _session(self, stop: threading.Event) -> None:
        consumer = Consumer(
            self.settings.consumer_config(
                relay_group(self.settings),
                **{"enable.partition.eof": False, "error_cb": self.liveness.failed},
            )
        )
        producer = Producer(
            self.settings.producer_config(acks="all", error_cb=self.liveness.failed)
        )
        try:
            index, start, folded = self._rebuild(consumer)
            self.liveness.recovered()
            snapshots = partition_count(consumer, self.snapshots) is not None
            if snapshots and folded:  # the next start need not fold that again
                self._snapshot(producer, index, start)
            consumer.assign([TopicPartition(self.topic, p, o) for p, o in start.items()])
            self._relay(consumer, producer, index, dict(start), stop, snapshots=snapshots)
        finally:
            consumer.close()

    def _rebuild(self, consumer: Consumer) -> tuple[AfterIndex, dict[int, int], int]:
        """Return the index below the committed offsets, where to go on, and its cost.

        The cost is how many run-events were folded to build it.

        Starts from the newest usable snapshot (``AfterSnapshot.usable``) and folds the log
        from its offsets, or from each partition's first offset when there is none. A
        partition without a committed offset (the relay's first start) starts at its end:
        history written before any relay ran is not relayed (downstream jobs registered
        later would otherwise get runs for old upstream runs).
        """
        n = partition_count(consumer, self.topic)
        if n is None:  # created a moment ago by another process, or not yet
            raise RelayUnavailable(f"topic {self.topic!r} does not exist (yet)")
        tps = consumer.committed([TopicPartition(self.topic, p) for p in range(n)], timeout=10)
        marks = watermarks(consumer, self.topic, n)
        start = {
            tp.partition: tp.offset if tp.offset >= 0 else marks[tp.partition][1] for tp in tps
        }
        started = time.monotonic()
        snapshot = self._latest_snapshot(consumer, start)
        if snapshot is None:
            index, since = AfterIndex(), {p: marks[p][0] for p in range(n)}
        else:
            index = AfterIndex.restored(snapshot.upstream_of, snapshot.ticks)
            since = {p: max(marks[p][0], snapshot.offsets[p]) for p in range(n)}
        folded = 0
        for p in range(n):
            for batch in read_partition(consumer, self.topic, p, since[p], start[p]):
                folded += len(batch)
                for m in batch:
                    self._decode_apply(index, m)
        fresh = [
            TopicPartition(self.topic, tp.partition, start[tp.partition])
            for tp in tps
            if tp.offset < 0
        ]
        if fresh:
            consumer.commit(offsets=fresh, asynchronous=False)
        log.info(
            "after relay started",
            extra={
                "action": "after_relay_started",
                "partitions": n,
                "snapshot": snapshot is not None,
                "folded": folded,
                "rebuilt_in": f"{time.monotonic() - started:.2f}s",
                "start": start,
            },
        )
        return index, start, folded

    def _latest_snapshot(self, consumer: Consumer, start: dict[int, int]) -> AfterSnapshot | None:
        """Return the usable snapshot covering the most of the log, or None.

        Reads the last SNAPSHOT_SCAN records of the snapshot topic; undecodable ones and
        ones past ``start`` (``AfterSnapshot.usable``) are skipped.
        """
        if partition_count(consumer, self.snapshots) is None:
            log.warning(
                "no snapshot topic",
                extra={"action": "after_relay_no_snapshot_topic", "topic": self.snapshots},
            )
            return None
        low, high = watermarks(consumer, self.snapshots, 1)[0]
        best: AfterSnapshot | None = None
        for batch in read_partition(
            consumer, self.snapshots, 0, max(low, high - SNAPSHOT_SCAN), high
        ):
            for m in batch:
                if m.key() != SNAPSHOT_KEY or m.value() is None:
                    continue
                try:
                    found = decode_snapshot(m.value() or b"")
                except SnapshotError as exc:
                    log.warning(
                        "snapshot skipped",
                        extra={
                            "action": "after_relay_snapshot_skipped",
                            "offset": m.offset(),
                            "reason": exc,
                        },
                    )
                    continue
                if found.usable(start) and (
                    best is None or sum(found.offsets.values()) >= sum(best.offsets.values())
                ):
                    best = found
        return best

    def _snapshot(self, producer: Producer, index: AfterIndex, committed: dict[int, int]) -> None:
        """Write the index at ``committed``: offsets whose commands were all delivered.

        A failure is logged, not raised: a snapshot only shortens the next start, and a
        missing or older one is still correct (it is folded forward from its own offsets).
        """
        upstream_of, ticks = index.state()
        data = encode_snapshot(AfterSnapshot(dict(committed), upstream_of, ticks))
        counts = {"bytes": len(data), "after_jobs": len(upstream_of), "active_runs": len(ticks)}
        if len(data) > SNAPSHOT_MAX_BYTES:
            log.warning(
                "snapshot too large: not written",
                extra={"action": "after_relay_snapshot_too_large", **counts},
            )
            return
        errors: list[KafkaError] = []

        def delivered(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                errors.append(err)

        producer.produce(self.snapshots, key=SNAPSHOT_KEY, value=data, on_delivery=delivered)
        if producer.flush(FLUSH_TIMEOUT_S) or errors:
            log.warning(
                "snapshot not delivered",
                extra={"action": "after_relay_snapshot_failed", **counts, "errors": errors[:3]},
            )
        else:
            log.info("snapshot written", extra={"action": "after_relay_snapshot_written", **counts})

    def _relay(
        self,
        consumer: Consumer,
        producer: Producer,
        index: AfterIndex,
        position: dict[int, int],
        stop: threading.Event,
        *,
        snapshots: bool,
    ) -> None:
        committed = dict(position)
        last_commit = last_snapshot = time.monotonic()
        errors: list[KafkaError] = []

        def delivered(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                errors.append(err)

        while True:
            stopping = stop.is_set()
            sent = 0
            self.liveness.beat()
            self.liveness.probe(lambda: check_topic(consumer, self.topic))
            for m in consumer.consume(num_messages=500, timeout=0.5):
                if not record_ok(m, self.liveness):
                    continue
                for env in self._decode_apply(index, m):
                    producer.produce(
                        self.commands,
                        key=env.job_id.encode(),
                        value=self.codec.encode_command(env),
                        on_delivery=delivered,
                    )
                    sent += 1
                    log.info(
                        "upstream run ended: command relayed",
                        extra={
                            "action": "after_relayed",
                            "job_id": env.job_id,
                            "upstream_run_id": getattr(env.command, "upstream_run_id", ""),
                        },
                    )
                position[m.partition() or 0] = offset_of(m) + 1
            if sent:
                self._flush(producer, errors)
            if position != committed and (
                stopping or time.monotonic() - last_commit >= self.commit_interval_s
            ):
                self._flush(producer, errors)  # never commit past an undelivered command
                consumer.commit(
                    offsets=[TopicPartition(self.topic, p, o) for p, o in position.items()],
                    asynchronous=False,
                )
                committed, last_commit = dict(position), time.monotonic()
                if snapshots and (
                    stopping or last_commit - last_snapshot >= self.snapshot_interval_s
                ):
                    self._snapshot(producer, index, committed)  # index == the log < committed
                    last_snapshot = last_commit
            if stopping:
                return

    def _flush(self, producer: Producer, errors: list[KafkaError]) -> None:
        """Wait for every queued command's ack.

        Raises:
            RelayUnavailable: some were not acknowledged in time, or failed transiently.
            RelayError: one was refused for good (too large, not authorised, …).
        """
        left = producer.flush(FLUSH_TIMEOUT_S)
        if left or errors:
            detail = f"{left} commands undelivered, errors: {errors[:3]}"
            if all(is_transient(e) for e in errors):
                raise RelayUnavailable(detail)
            raise RelayError(detail)

    def _decode_apply(self, index: AfterIndex, m: Message) -> list[Envelope]:
        """Apply one run-event to ``index``; return the commands it asks for.

        Only job definitions and run ends of jobs with a downstream are decoded: the event
        is told from the record's first bytes (``Codec.event_name``) and its job from the
        key (``job_id``, as the fold writes it). A record whose event cannot be told that way
        (Confluent framing, an unknown schema) is decoded, as before.
        """
        value = m.value() or b""
        name = self.codec.event_name(value)
        if name is not None and name not in DEFINITIONS:
            key = m.key()
            if name not in RUN_ENDS or (
                key is not None and not index.wants_end(key.decode(errors="replace"))
            ):
                return []
        try:
            record = self.codec.decode_event(value)
        except DecodeError as exc:  # not ours to dead-letter: the fold wrote it
            log.warning(
                "run-event not decodable: skipped",
                extra={
                    "action": "after_relay_undecodable",
                    "partition": m.partition(),
                    "offset": m.offset(),
                    "reason": exc.reason,
                },
            )
            return []
        return index.apply(record)


def start_after_relay(settings: KafkaSettings) -> tuple[threading.Thread, threading.Event]:
    """Start a relay in a daemon thread; set the returned event to stop it.

    Whatever ends the relay but the event (a bug, a fatal or permanent broker error) ends
    the process (``topology.kafka.retrying.start_thread``).
    """
    stop = threading.Event()
    relay = AfterRelay(settings)
    return start_thread("after-relay", lambda: relay.run(stop)), stop
