"""The fold loop: poll, decide into the open transaction, commit in the pipeline, store.

``FoldLoop`` is ``FoldRuntime``'s loop half (``services/scheduler/runtime.py`` holds the
assignment and restore half). A transaction is handed to the pipeline's commit thread
(``services/scheduler/pipeline.py``) when it is due; when it returns its job records and
markers are written to RocksDB and the state cache, or, on an abort, everything uncommitted
is rewound: overlay, due and ready indexes, and the consumer's positions.
"""

from __future__ import annotations

import logging
import threading
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from opentelemetry.trace import Tracer

from services.scheduler import metrics
from services.scheduler.faults import CrashPoints
from services.scheduler.fold_stats import FoldStats
from services.scheduler.membership import ConsumerFenced
from services.scheduler.pipeline import Pipeline, Unit
from services.scheduler.ticker import TickGate
from services.scheduler.transaction import BatchTransactions
from topology.fold.due_index import DueIndex
from topology.fold.folder import BatchFolder, BatchResult, Record
from topology.fold.markers import MarkerChanges
from topology.fold.partition_store import PartitionStore
from topology.fold.spans import batch_attributes, batch_span
from topology.fold.state_cache import StateCache
from topology.kafka.retrying import fatal, is_fatal, is_transient
from topology.kafka.topics import Topics
from topology.wire.codec import RegistryUnavailable

log = logging.getLogger("cronlog.scheduler")


class FoldLoop:
    """The loop half of ``FoldRuntime`` (which sets every attribute below).

    Thread safety: the fold's thread only; the pipeline's commit thread runs ``txn.commit``.
    """

    topics: Topics
    consumer: Consumer
    folder: BatchFolder
    pipeline: Pipeline
    txn: BatchTransactions
    due: DueIndex
    ready: DueIndex
    cache: StateCache
    stores: dict[int, PartitionStore]
    owned: set[int]
    revocations: dict[int, int]
    tick_gate: TickGate
    faults: CrashPoints
    stats: FoldStats
    stop: threading.Event
    tracer: Tracer | None
    _seeks: dict[int, tuple[int, int]]
    _polling: bool

    def _step(self) -> None:
        """One pass of the pipeline: finish a returned commit, decide what is there, and
        hand the open transaction to the commit thread when it is due."""
        pipe = self.pipeline
        if pipe.inflight is not None and (pipe.done() or pipe.full()):
            self._finish()  # waits only when the open one is full
        msgs = [] if pipe.full() else self._poll(idle=pipe.open is None and pipe.inflight is None)
        if msgs:
            with batch_span(self.tracer):
                self._decide(msgs)
        elif pipe.inflight is not None:
            self._finish()  # nothing to decide meanwhile: wait for the commit
        if pipe.open is not None and pipe.inflight is None and (not msgs or pipe.ripe()):
            self._begin_commit()  # idle: at once; under load: every interval, or when full

    def _poll(self, idle: bool) -> list[Message]:
        """Return what is available: when ``idle`` wait up to 0.1 s for one record, then take
        the rest already fetched (at most what the open transaction has room for) without
        waiting. Records of partitions a rebalance callback rewound are dropped (read again)."""
        self._polling = True
        try:
            first = self.consumer.poll(0.1 if idle else 0)
            msgs = [] if first is None else [first]
            if first is not None:
                msgs += self.consumer.consume(self.pipeline.room() - 1, timeout=0)
        finally:
            self._polling = False
        if self._seeks:
            again = self._seek_back()
            msgs = [m for m in msgs if m.partition() not in again]
        return msgs

    def _decide(self, msgs: list[Message]) -> None:
        """Decide one pass into the open transaction (begun here if none is open)."""
        records, starts, ends = self._records(msgs)
        if not records:
            return
        read_at = {p: self.revocations.get(p, 0) for p in starts}
        if self.pipeline.open is None:
            self.pipeline.open = Unit()
            self.due.begin()
            self.ready.begin()
        unit = self.pipeline.open
        unit.cover(starts, read_at)
        t0 = time.perf_counter()
        try:
            out = self.folder.fold(records)
        except RegistryUnavailable as exc:
            # A Confluent-framed command whose schema the registry could not give: the record
            # is fine, so it is neither dead-lettered nor skipped; it is folded again.
            log.warning(
                "batch retried in 1 s",
                extra={"action": "schema_registry_unavailable", "error": exc},
            )
            self._settle(seek=True)
            self.stop.wait(1.0)
            return
        batch_attributes(len(records), ends, out.decisions)
        unit.add(out, ends, len(records), time.perf_counter() - t0)
        self.stats.passed(len(records))

    def _begin_commit(self) -> None:
        unit = self.pipeline.open
        if unit is None:
            return
        group = self.consumer.consumer_group_metadata()  # read here: the consumer's thread
        self.pipeline.submit(lambda: self.txn.commit(unit.out, unit.ends, group))

    def _finish(self) -> None:
        """Wait for the in-flight commit; store what it committed, or rewind on an abort.

        Raises:
            ConsumerFenced: the group refused the offsets as from a fenced static member.
            Fenced: the producer was fenced too often.
        """
        unit, offsets, commit_s, wait_s = self.pipeline.result()
        if offsets is None:  # aborted: nothing of it happened, nor of what was decided after
            fenced, self.txn.member_fenced = self.txn.member_fenced, None
            self._rewind(seek=fenced is None)
            if fenced is not None:  # the offsets told first: the consumer is fenced too
                raise ConsumerFenced(f"offsets refused: {fenced}")
            return
        out = unit.out
        self.due.commit()
        self.ready.commit()
        for p, end in unit.ends.items():
            self.tick_gate.folded(p, end)
        if out.sends or out.writes:  # the crash points of invariant 6's tests
            self.faults.reached("after_commit")
        t0 = time.perf_counter()
        self._write(out, offsets)
        self.cache.update(out.states)
        self.pipeline.retire()  # after the store and the cache have it
        if out.sends or out.writes:
            self.faults.reached("after_store")
        store_s = time.perf_counter() - t0
        self.stats.record(out, unit.records, unit.fold_s, commit_s, store_s, wait_s)
        metrics.batch(unit.records, out.decisions, commit_s, len(self.due))

    def _settle(self, seek: bool) -> None:
        """Finish the in-flight commit, then drop the open transaction (a rewind)."""
        if self.pipeline.inflight is not None:
            try:
                self._finish()
            except ConsumerFenced:
                if seek:
                    raise
        self._rewind(seek)

    def _rewind(self, seek: bool) -> None:
        """Forget every uncommitted transaction and read its records again.

        The overlay, the due and ready indexes go back to the last commit (the state cache
        and the tick gate only ever see committed transactions); the consumer is sought back
        to each partition's first uncommitted offset, at once, or after the poll when a
        rebalance callback is running (``_seek_back``).
        """
        units = self.pipeline.take_all()
        self.due.rollback()
        self.ready.rollback()
        if not seek:
            return
        for u in units:  # oldest first: its start is the earliest
            for p, offset in u.starts.items():
                self._seeks.setdefault(p, (offset, u.read_at.get(p, 0)))
        if not self._polling:
            self._seek_back()

    def _seek_back(self) -> set[int]:
        """Seek the consumer back as ``_rewind`` asked; return the partitions sought.

        A partition revoked since its records were read (the aborted commit was often the
        rebalance's doing) is not sought: it is not this consumer's, or it came back with a
        new assignment that reads from the committed offset, and a seek there fails
        (``_OUTDATED``: the chaos run's scheduler died of it with a raw traceback). A seek
        that fails on a partition still held leaves its position unknown: the process ends
        (exit 70) rather than go on past records it did not fold.
        """
        seeks, self._seeks = self._seeks, {}
        for p, (offset, read_at) in seeks.items():
            if self.revocations.get(p, 0) != read_at or p not in self.owned:
                continue
            try:
                self.consumer.seek(TopicPartition(self.topics.commands, p, offset))
            except KafkaException as exc:
                if is_fatal(exc.args[0]):
                    raise ConsumerFenced(f"consumer: {exc.args[0]}") from exc
                fatal("fold", f"cannot read partition {p} again from offset {offset}: {exc}")
        return set(seeks)

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
