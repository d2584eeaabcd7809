"""The fold runtime: a transactional read-process-write loop on confluent-kafka + rocksdict.

Shaped like Kafka Streams' exactly-once (EOS v2, KIP-447) and Quix Streams' checkpointing: one
consumer in the scheduler group on ``cronlog.commands`` (cooperative-sticky, static membership,
``read_committed``), one transactional producer per process. ``topology.fold.folder.BatchFolder``
decides what is available; several decide passes go into one transaction, sized by time
(``commit_interval_ms``) and size; its run-events, ready and reply copies, dead letters,
continuation Ticks, the latest changelog record per job touched *and the consumed offsets*
commit in one transaction, in a thread of its own while the fold decides the next
(``services/scheduler/pipeline.py``, ``services/scheduler/fold_loop.py``); RocksDB is written
after the commit. A partition is folded only once its store is restored
(``topology.fold.restore``) and its due index rebuilt. Rules and measurements:
docs/architecture.md, "The fold runtime".
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, TopicPartition

from services.scheduler import metrics
from services.scheduler.faults import CrashPoints
from services.scheduler.fold_loop import FoldLoop
from services.scheduler.fold_stats import FoldStats
from services.scheduler.held import HeldReport
from services.scheduler.membership import ConsumerFenced, Rejoins, fold_consumer_config
from services.scheduler.pipeline import OverlaidCache, Pipeline
from services.scheduler.settings import SchedulerSettings
from services.scheduler.stable import StableGate
from services.scheduler.ticker import TickGate
from services.scheduler.transaction import BatchTransactions
from topology.fold.due_index import DueIndex
from topology.fold.folder import BatchFolder
from topology.fold.markers import FoldMarkers
from topology.fold.partition_store import PartitionStore
from topology.fold.restore import CONSUMER_CONFIG as RESTORE_CONSUMER
from topology.fold.restore import last_write_committed, ready_ms, restore
from topology.fold.spans import sdk_tracer
from topology.fold.state_cache import StateCache
from topology.kafka.topics import Topics
from topology.kafka.watchdog import Watchdog
from topology.wire.registry import codec_for

log = logging.getLogger("cronlog.scheduler")


class FoldRuntime(FoldLoop):
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
        revoked since it was read is not sought back (``_seek_back``)."""
        self.lock = threading.Lock()
        self.stop = stop or threading.Event()
        self.stats = FoldStats(settings.fold_stats_s)
        self.lag = metrics.ConsumerLag(self.topics.commands)
        self.cache = StateCache(settings.state_cache)
        self.pipeline = Pipeline(
            settings.commit_interval_ms / 1000, settings.batch_size, settings.commit_max_bytes
        )
        self._seeks: dict[int, tuple[int, int]] = {}
        """partition -> (offset, its revocation count when read): ``_rewind``'s seeks."""
        self._polling = False
        """True inside the consumer's poll (a rebalance callback may run): seeks wait."""
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
            OverlaidCache(self.cache, self.pipeline),
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

        A consumer fenced as a static member is replaced in place (``_rejoin``). On stop the
        in-flight transaction is finished; the open one is dropped (its records are read
        again by the next owner, from the committed offsets).

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
                    self._step()
                except ConsumerFenced as exc:
                    self._rejoin(exc)
            self._settle(seek=False)
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
        self._settle(seek=False)  # what the fenced consumer read is read again by the next
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

    # The folder's reads: what is decided but not committed first (the pipeline's overlay).

    def _load(self, partition: int, job_id: str) -> bytes | None:
        found, value = self.pipeline.record(partition, job_id)
        if found:
            return value
        store = self.stores.get(partition)
        return store.get(job_id) if store is not None else None

    def _load_marker(self, partition: int, key: str) -> bytes | None:
        found, value = self.pipeline.marker(partition, key)
        if found:
            return value
        store = self.stores.get(partition)
        return store.marker(key) if store is not None else None

    def _expiring(self, partition: int, upto: int, most: int) -> list[tuple[int, str]]:
        store = self.stores.get(partition)
        if store is None:
            return []
        return self.pipeline.expiring(partition, lambda n: store.expiring(upto, n), upto, most)

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
        self._settle(seek=True)  # what was decided for them is dropped, the rest read again
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
            self.pipeline.shutdown()

    def owned_partitions(self) -> list[int]:
        """Return the partitions this process folds now (for the ticker)."""
        with self.lock:
            return sorted(self.owned)
