"""The fold runtime: a transactional read-process-write loop on confluent-kafka + rocksdict.

Shaped like Kafka Streams' exactly-once (EOS v2, KIP-447) and Quix Streams' checkpointing: one
consumer in the scheduler group on ``cronlog.commands`` (cooperative-sticky, static membership,
``read_committed``), one transactional producer per process. A batch is what is available (up to
``batch_size`` records); ``topology.fold.folder.BatchFolder`` decides it; its run-events, ready and
reply copies, dead letters, continuation Ticks, the latest changelog record per job touched *and the
consumed offsets* commit in one transaction; RocksDB is written after the commit. A partition
is folded only once its store is restored (``topology.fold.restore``) and its due index rebuilt.
Rules and measurements: docs/architecture.md, "The fold runtime".
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from services.scheduler import metrics
from services.scheduler.faults import CrashPoints
from services.scheduler.fold_stats import FoldStats
from services.scheduler.held import HeldReport
from services.scheduler.membership import ConsumerFenced, Rejoins, fold_consumer_config
from services.scheduler.settings import SchedulerSettings
from services.scheduler.stable import StableGate
from services.scheduler.ticker import TickGate
from services.scheduler.transaction import BatchTransactions
from topology.fold.due_index import DueIndex
from topology.fold.folder import BatchFolder, BatchResult, Record
from topology.fold.markers import FoldMarkers, MarkerChanges
from topology.fold.partition_store import PartitionStore
from topology.fold.restore import CONSUMER_CONFIG as RESTORE_CONSUMER
from topology.fold.restore import last_write_committed, ready_ms, restore
from topology.fold.spans import batch_attributes, batch_span, sdk_tracer
from topology.fold.state_cache import StateCache
from topology.kafka.retrying import fatal, is_fatal, is_transient
from topology.kafka.topics import Topics
from topology.kafka.watchdog import Watchdog
from topology.wire.codec import RegistryUnavailable
from topology.wire.registry import codec_for

log = logging.getLogger("cronlog.scheduler")


class FoldRuntime:
    """One scheduler process's fold: assignment, restore, batches, transactions.

    Args:
        settings: the scheduler's settings.
        faults: crash points for the tests of invariant 6 (off unless configured).
        stop: SIGTERM's event (default a new one): ends the loop and any retry wait.

    Thread safety: ``run`` is the only thread that touches the consumer, the transactional
    producer, the stores and the due index; ``owned`` is read by the ticker under ``lock``.
    """

    def __init__(
        self,
        settings: SchedulerSettings,
        faults: CrashPoints | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        self.settings = settings
        self.topics = Topics.of(settings)
        self.n = settings.partitions
        self.faults = faults or CrashPoints()
        self.codec = codec_for(settings)  # with the schema registry when one is set
        self.due = DueIndex()
        self.due.reset(())
        self.ready = DueIndex()
        """The ready index (jobs with a grantable task instance, by ready_rank)."""
        self.ready.reset(())
        self.stores: dict[int, PartitionStore] = {}
        self.pending: list[int] = []
        self.owned: set[int] = set()
        self.revocations: dict[int, int] = {}
        """partition -> how many times it was revoked (or lost): a batch whose partition was
        revoked since it was read is not sought back (``_retry``)."""
        self.lock = threading.Lock()
        self.stop = stop or threading.Event()
        self.stats = FoldStats(settings.fold_stats_s)
        self.lag = metrics.ConsumerLag(self.topics.commands)
        self.cache = StateCache(settings.state_cache)
        self.tracer = sdk_tracer("cronlog.scheduler")
        """``fold.batch`` spans; None when tracing is off (``services/tracing.py``)."""
        self.folder = BatchFolder(
            self.topics,
            self.n,
            self._load,
            self.due,
            self.codec,
            settings.tick_slice,
            self.ready,
            self.cache,
            markers=FoldMarkers(settings.idem_rules(), self._load_marker, self._expiring),
        )
        self.consumer = Consumer(fold_consumer_config(settings, self.topics.scheduler_app))
        self.rejoins = Rejoins()
        self.restorer = Consumer(
            settings.consumer_config(f"{self.topics.scheduler_app}-restore", **RESTORE_CONSUMER)
        )
        self.watchdog = Watchdog("fold")
        held = HeldReport(settings, self.topics.scheduler_app, self.topics.commands)
        self.stable = StableGate(
            self.consumer,
            self.topics.commands,
            on_long_wait=held.report,
            long_wait_s=settings.unstable_report_s,
        )
        self.tick_gate = TickGate()
        """Shared with the ticker: a partition's next tick waits until its last is folded."""
        self.txn = BatchTransactions(settings, self.consumer, self.faults, self.stop, self.watchdog)

    # -- the loop ----------------------------------------------------------------------------

    def run(self) -> None:
        """Fold until ``stop`` is set (SIGTERM), then leave cleanly.

        A consumer fenced as a static member is replaced in place (``_rejoin``).

        Raises:
            Fenced: the producer was fenced too often, or the consumer (the caller exits the
                process).
        """
        self.watchdog.start()
        self.txn.init()
        self._subscribe()
        try:
            while not self.stop.is_set():
                try:
                    self._restore_pending()
                    self.lag.refresh(self.consumer, self.owned)  # every few s, not per batch
                    msgs = self._poll()
                    if msgs:
                        with batch_span(self.tracer):
                            self._process(msgs)
                except ConsumerFenced as exc:
                    self._rejoin(exc)
        finally:
            self._close()

    def _subscribe(self) -> None:
        self.consumer.subscribe(
            [self.topics.commands],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_revoke,
        )

    def _rejoin(self, exc: ConsumerFenced) -> None:
        """Replace a fenced consumer with a new one of the same group.instance.id
        (services/scheduler/membership.py): what it held is dropped as lost, the producer
        stays (its transactional.id and epoch keep fencing zombies).

        Raises:
            Fenced: fenced more than REJOIN_LIMIT times in a minute.
        """
        self.rejoins.allow(exc)
        self.due.rollback()
        self.ready.rollback()
        gone = sorted(self.owned | set(self.pending))
        self._forget(gone)
        old, self.consumer = (
            self.consumer,
            Consumer(fold_consumer_config(self.settings, self.topics.scheduler_app)),
        )
        self.stable.consumer = self.txn.consumer = self.consumer
        with contextlib.suppress(KafkaException, RuntimeError):  # a fenced one may say anything
            old.close()
        self._subscribe()
        metrics.owned(len(self.owned), len(self.due))
        log.warning(
            "consumer fenced as a static member; a new consumer rejoined the group",
            extra={"action": "consumer_rejoined", "dropped": gone, "error": exc},
        )

    def _poll(self) -> list[Message]:
        """Return what is available: wait up to 0.1 s for one record, then take the rest
        already fetched (at most ``batch_size``) without waiting."""
        first = self.consumer.poll(0.1)
        if first is None:
            return []
        return [first, *self.consumer.consume(self.settings.batch_size - 1, timeout=0)]

    def _process(self, msgs: list[Message]) -> None:
        records, starts, ends = self._records(msgs)
        if not records:
            return
        read_at = {p: self.revocations.get(p, 0) for p in starts}
        t0 = time.perf_counter()
        self.due.begin()
        self.ready.begin()
        try:
            out = self.folder.fold(records)
        except RegistryUnavailable as exc:
            # A Confluent-framed command whose schema the registry could not give: the record
            # is fine, so it is neither dead-lettered nor skipped; the batch is folded again.
            log.warning(
                "batch retried in 1 s",
                extra={"action": "schema_registry_unavailable", "error": exc},
            )
            self._retry(starts, read_at)
            self.stop.wait(1.0)
            return
        batch_attributes(len(records), ends, out.decisions)
        t1 = time.perf_counter()
        offsets = self.txn.commit(out, ends)
        t2 = time.perf_counter()
        if offsets is None:  # aborted: nothing of the batch happened; fold it again
            fenced, self.txn.member_fenced = self.txn.member_fenced, None
            if fenced is not None:  # the offsets told first: the consumer is fenced too
                raise ConsumerFenced(f"offsets refused: {fenced}")
            self._retry(starts, read_at)
            return
        self.due.commit()
        self.ready.commit()
        for p, end in ends.items():
            self.tick_gate.folded(p, end)
        if out.sends or out.writes:  # the crash points of invariant 6's tests
            self.faults.reached("after_commit")
        self._write(out, offsets)
        self.cache.update(out.states)
        if out.sends or out.writes:
            self.faults.reached("after_store")
        self.stats.record(out, len(records), t1 - t0, t2 - t1, time.perf_counter() - t2)
        metrics.batch(len(records), out.decisions, t2 - t1, len(self.due))

    def _retry(self, starts: dict[int, int], read_at: dict[int, int]) -> None:
        """Forget a batch that did not happen and read it again from its first offsets.

        A partition revoked since the batch was read (the aborted commit was often the
        rebalance's doing) is not sought: it is not this consumer's, or it came back with a
        new assignment that reads from the committed offset, and a seek there fails
        (``_OUTDATED``: the chaos run's scheduler died of it with a raw traceback). A seek
        that fails on a partition still held leaves its position unknown: the process ends
        (exit 70) rather than go on past records it did not fold.
        """
        self.due.rollback()
        self.ready.rollback()
        for p, offset in starts.items():
            if self.revocations.get(p, 0) != read_at.get(p, 0) or p not in self.owned:
                continue
            try:
                self.consumer.seek(TopicPartition(self.topics.commands, p, offset))
            except KafkaException as exc:
                if is_fatal(exc.args[0]):
                    raise ConsumerFenced(f"consumer: {exc.args[0]}") from exc
                fatal("fold", f"cannot read partition {p} again from offset {offset}: {exc}")

    def _records(self, msgs: list[Message]) -> tuple[list[Record], dict[int, int], dict[int, int]]:
        records: list[Record] = []
        starts: dict[int, int] = {}
        ends: dict[int, int] = {}
        unready: dict[int, int] = {}
        for m in msgs:
            err = m.error()
            if err is not None:
                self._consumer_error(err)
                continue
            p, offset = m.partition(), m.offset()
            if p is None or offset is None:
                continue
            if p not in self.owned:  # not restored yet: read again once it is
                unready.setdefault(p, offset)
                continue
            _, ts = m.timestamp()
            records.append(Record(p, offset, ts, m.key(), m.value() or b""))
            starts.setdefault(p, offset)
            ends[p] = offset + 1
        for p, offset in unready.items():
            self.consumer.seek(TopicPartition(self.topics.commands, p, offset))
        return records, starts, ends

    def _consumer_error(self, err: KafkaError) -> None:
        # A consumer's fatal error arrives as an error event coded _FATAL (fatal() is not set
        # on it): a static member fenced by its own rejoin after a coordinator stall
        # (KAFKA-20985; Kafka Streams shuts down on it). The consumer is dead: a new one
        # rejoins (``_rejoin``).
        if is_fatal(err):
            raise ConsumerFenced(f"consumer: {err}")
        if err.code() != KafkaError._PARTITION_EOF:
            log.warning(
                "consumer error",
                extra={"action": "consume_error", "error": err, "transient": is_transient(err)},
            )

    def _write(self, out: BatchResult, offsets: dict[int, int]) -> None:
        rows: dict[int, list[tuple[str, bytes | None, int | None, int | None]]] = {}
        marks: dict[int, MarkerChanges] = {}
        for job_id, w in out.writes.items():
            rows.setdefault(w.partition, []).append((job_id, w.value, w.deadline_ms, w.ready_ms))
        for (p, key), value in out.markers.items():
            marks.setdefault(p, {})[(p, key)] = value
        for p in rows.keys() | marks.keys():
            store = self.stores.get(p)
            if store is not None:
                store.write(
                    rows.get(p, []), offsets.get(p), marks.get(p), before=out.markers_before
                )

    def _load(self, partition: int, job_id: str) -> bytes | None:
        store = self.stores.get(partition)
        return store.get(job_id) if store is not None else None

    def _load_marker(self, partition: int, key: str) -> bytes | None:
        store = self.stores.get(partition)
        return store.marker(key) if store is not None else None

    def _expiring(self, partition: int, upto: int, most: int) -> list[tuple[int, str]]:
        store = self.stores.get(partition)
        return store.expiring(upto, most) if store is not None else []

    # -- assignment --------------------------------------------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if consumer is not self.consumer:  # a fenced one, closing: nothing is its any more
            return
        consumer.incremental_assign(partitions)
        consumer.pause(partitions)  # folded once restored (_restore_pending)
        new = [tp.partition for tp in partitions]
        for p in new:
            self.cache.drop(p)  # its store may be restored from the changelog now
        self.pending += [p for p in new if p not in self.pending]
        metrics.ownership("assigned", len(new))
        log.info(
            "partitions assigned",
            extra={"action": "partitions_assigned", "partitions": sorted(new)},
        )

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        gone = [tp.partition for tp in partitions]
        if consumer is not self.consumer:  # a fenced one, closing: _rejoin dropped it all
            with contextlib.suppress(KafkaException):
                consumer.incremental_unassign(partitions)
            return
        self._forget(gone)
        consumer.incremental_unassign(partitions)
        metrics.ownership("revoked", len(gone))
        log.info(
            "partitions revoked", extra={"action": "partitions_revoked", "partitions": sorted(gone)}
        )
        self._log_owned()

    def _forget(self, gone: list[int]) -> None:
        """Drop what this process keeps of partitions it no longer holds."""
        for p in gone:
            self.revocations[p] = self.revocations.get(p, 0) + 1
        with self.lock:
            self.owned.difference_update(gone)
        for p in gone:
            self.lag.forget(p)
            self.due.drop_partition(p)
            self.ready.drop_partition(p)
            self.cache.drop(p)
            self.stable.forget(p)
            self.tick_gate.reset(p)
            if p in self.pending:
                self.pending.remove(p)
            store = self.stores.pop(p, None)
            if store is not None:
                store.close()
        metrics.owned(len(self.owned), len(self.due))

    def _restore_pending(self) -> None:
        # A partition whose offset is not stable yet waits; one such ask per pass at most, so
        # that many waiting partitions do not starve the ones already folding.
        for p in list(self.pending):
            if self.stop.is_set():
                return
            if not self.stable.due(p):
                continue
            if not self.stable.stable(p):
                return
            self.pending.remove(p)
            self._restore(p)

    def _restore(self, p: int) -> None:
        tp = TopicPartition(self.topics.commands, p)
        started = time.monotonic()
        # The offset is stable (StableGate): a previous owner's transaction has ended, so the
        # changelog read to its end holds whatever that owner committed.
        path = Path(self.settings.state_path()) / f"jobs-{p}"
        if not self.settings.keep_local_state:
            PartitionStore.wipe(path)
        store = PartitionStore(path, self.settings.rocksdb_write_buffer_mb)
        self.faults.reached("during_restore")
        changelog = self.topics.job_table_changelog
        if not last_write_committed(
            self.restorer, changelog, p, store.changelog_offset(), stop=self.stop
        ):
            log.warning(
                "the store's last changelog record is not committed (an aborted "
                "transaction); rebuilt from the changelog",
                extra={"action": "store_ahead", "partition": p, "offset": store.changelog_offset()},
            )
            store = self._wiped(store, path)
        done = restore(self.restorer, changelog, p, store, self.stop)
        if store.changelog_offset() >= done.end:  # the store is ahead: not this changelog's
            log.warning(
                "rebuilt from the changelog", extra={"action": "store_ahead", "partition": p}
            )
            store = self._wiped(store, path)
            done = restore(self.restorer, changelog, p, store, self.stop)
        store.index_ready(ready_ms)  # once, for a store written before the ready index
        self.stores[p] = store
        jobs = self.due.add_partition(p, store.deadlines())
        ready = self.ready.add_partition(p, store.ready())
        # our ticks below the committed offset were folded (by us or a previous owner)
        self.tick_gate.reset(p, self.stable.offsets.get(p, -1))
        with self.lock:
            self.owned.add(p)
        metrics.owned(len(self.owned), len(self.due))
        self.consumer.resume([tp])
        log.info(
            "partition restored",
            extra={
                "action": "partition_restored",
                "partition": p,
                "changelog_records": done.records,
                "due_jobs": jobs,
                "ready_jobs": ready,
                "seconds": round(time.monotonic() - started, 2),
            },
        )
        self._log_owned()

    def _log_owned(self) -> None:
        log.info(
            "partitions owned",
            extra={"action": "partitions_owned", "partitions": self.owned_partitions()},
        )

    def _wiped(self, store: PartitionStore, path: Path) -> PartitionStore:
        store.close()
        PartitionStore.wipe(path)
        return PartitionStore(path, self.settings.rocksdb_write_buffer_mb)

    def _close(self) -> None:
        self.watchdog.stop()
        try:
            self.consumer.close()
        finally:
            self.restorer.close()
            for store in self.stores.values():
                store.close()
            self.stores.clear()

    def owned_partitions(self) -> list[int]:
        """Return the partitions this process folds now (for the ticker)."""
        with self.lock:
            return sorted(self.owned)
