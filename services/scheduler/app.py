"""The scheduler: a faust app folding ``cronlog.commands`` into the job table, plus the ticker.

The fold runs ``at_least_once`` with one agent actor; ``topology.fold.BatchFolder`` decides each
batch, this module delivers the batch's events and waits for their acks, then delivers the job
records to the table's changelog (librdkafka, same producer) and waits for those acks, then puts
them into the partition's RocksDB (``topology.job_table``); faust commits the batch after that.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import faust
from faust.transport.drivers.aiokafka import Producer as AIOProducer

from cronlog import commands as cmd
from cronlog.ids import tick_idem_key
from cronlog.time import to_ms
from services.scheduler.faults import CrashPoints
from services.scheduler.settings import SchedulerSettings
from topology.codec import Codec
from topology.delivery import Delivery, DeliveryFailed, Offsets
from topology.due_index import DueIndex
from topology.fold import BatchFolder, Outgoing, Record
from topology.job_table import LocalJobStore, changelog_records
from topology.partitioning import partition_for
from topology.state_codec import load_state
from topology.topics import Topics

log = logging.getLogger("cronlog.scheduler")
DELIVERY_ATTEMPTS = 5
TICK_OFFSET_S = 0.002
"""Ticks are sent this long after each interval boundary (LogAppendTime must pass it)."""


class IdempotentProducer(AIOProducer):
    """aiokafka producer with idempotence and acks=all (faust enables it only for EOS)."""

    def _settings_extra(self) -> dict[str, Any]:
        return {**super()._settings_extra(), "acks": "all", "enable_idempotence": True}


class SchedulerApp(faust.App):
    """faust.App whose producer is idempotent."""

    def _new_producer(self) -> AIOProducer:
        return IdempotentProducer(self.transport, loop=self.loop, beacon=self.beacon)


class FoldStats:
    """Counts and timings of the fold, logged every ``every_s`` seconds (action=fold_stats)."""

    def __init__(self, every_s: float = 10.0) -> None:
        self.every_s = every_s
        self._reset(time.monotonic())

    def _reset(self, now: float) -> None:
        self.since = now
        self.batches = self.records = 0
        self.fold_s = self.deliver_s = self.write_s = 0.0

    def record(self, n: int, fold_s: float, deliver_s: float, write_s: float) -> None:
        """Add one batch; log and reset when the period is over."""
        self.batches += 1
        self.records += n
        self.fold_s += fold_s
        self.deliver_s += deliver_s
        self.write_s += write_s
        now = time.monotonic()
        if now - self.since >= self.every_s:
            log.info(
                "action=fold_stats records=%d batches=%d rate=%.0f/s fold=%.2fs "
                "deliver=%.2fs write=%.2fs",
                self.records,
                self.batches,
                self.records / (now - self.since),
                self.fold_s,
                self.deliver_s,
                self.write_s,
            )
            self._reset(now)


def create_app(settings: SchedulerSettings) -> faust.App:
    """Build the scheduler's faust app (not started).

    Topics must exist already (``topology.bootstrap.ensure_topics``); faust declares none.
    """
    topics = Topics.of(settings)
    n = settings.partitions
    os.makedirs(settings.state_path(), exist_ok=True)
    app = SchedulerApp(
        topics.scheduler_app,
        broker=f"kafka://{settings.bootstrap}",
        store="rocksdb://",
        datadir=settings.state_path(),
        topic_partitions=n,
        topic_allow_declare=False,
        topic_disable_leader=True,
        processing_guarantee="at_least_once",
        table_standby_replicas=settings.standby_replicas,
        consumer_group_instance_id=settings.instance_id,
        broker_commit_interval=0.5,
        broker_session_timeout=settings.session_timeout_s,
        broker_heartbeat_interval=max(1.0, settings.session_timeout_s / 5),
        producer_linger=0.002,
        stream_buffer_maxsize=max(4096, settings.batch_size * 2),
        web_enabled=settings.web_port > 0,
        web_port=settings.web_port or 6066,
        web_bind="127.0.0.1",
    )
    commands = app.topic(
        topics.commands,
        key_type=bytes,
        value_type=bytes,
        partitions=n,
        key_serializer="raw",
        value_serializer="raw",
    )
    mb = 1024 * 1024
    jobs = app.Table(
        "jobs",
        key_type=bytes,
        value_type=bytes,
        partitions=n,
        options={
            "block_cache_size": settings.rocksdb_block_cache_mb * mb,
            "write_buffer_size": settings.rocksdb_write_buffer_mb * mb,
            "max_write_buffer_number": 2,
        },
    )
    codec = Codec()
    due = DueIndex()
    stats = FoldStats(settings.fold_stats_s)
    folder = BatchFolder(topics, n, lambda job_id: jobs.get(job_id.encode()), due, codec)

    async def rebuild_due_index() -> None:
        owned = {
            tp.partition for tp in app.assignor.assigned_actives() if tp.topic == topics.commands
        }
        due.reset(owned)
        started = time.monotonic()
        for key, value in jobs.items():
            p = partition_for(key, n)
            if p in owned:
                deadline = load_state(value).next_deadline()
                due.set(p, key.decode(), to_ms(deadline) if deadline else None)
        log.info(
            "due index rebuilt: %d jobs over partitions %s in %.2fs",
            len(due),
            sorted(owned),
            time.monotonic() - started,
        )

    jobs.on_recover(rebuild_due_index)

    delivery = Delivery(settings)

    local_jobs = LocalJobStore(jobs.data, topics.job_table_changelog)
    faults = CrashPoints()  # off unless CRONLOG_FAULT_CRASH_AT is set (tests of invariant 6)
    local_jobs.check()

    async def deliver(sends: list[Outgoing]) -> Offsets:
        for attempt in itertools.count(1):
            try:
                return await delivery.deliver(sends)
            except DeliveryFailed:
                if attempt >= DELIVERY_ATTEMPTS:
                    # Never write state whose events were not delivered, never ack the batch:
                    # die so the commands are re-delivered to the next owner.
                    log.critical("event delivery failed %d times; exiting", attempt, exc_info=True)
                    os._exit(70)
                log.warning("event delivery failed; retrying", exc_info=True)
                await asyncio.sleep(min(2.0**attempt, 10.0))
        raise AssertionError("unreachable")

    async def fold_batch(batch: list[Any]) -> None:
        t0 = time.perf_counter()
        records = [
            Record(
                e.message.partition,
                e.message.offset,
                round(e.message.timestamp * 1000),
                e.message.key,
                e.message.value or b"",
                e,
            )
            for e in batch
        ]
        out = folder.fold(records)
        t1 = time.perf_counter()
        if out.sends:
            await deliver(out.sends)
            faults.reached("after_events")
        t2 = time.perf_counter()
        if out.writes:
            # Only after the events' acks (invariant 6): a changelog record acked beside an
            # event still in flight would, after a kill -9, recover a record whose dedupe
            # marker suppresses that event for ever. Then RocksDB, then faust's commit.
            acked = await deliver(changelog_records(topics.job_table_changelog, out.writes))
            faults.reached("after_changelog")
            local_jobs.write(out.writes, acked)
            faults.reached("after_store")
        stats.record(len(records), t1 - t0, t2 - t1, time.perf_counter() - t2)

    @app.agent(commands, concurrency=1)
    async def fold(stream: faust.StreamT) -> AsyncIterator[None]:
        async for batch in stream.take_events(settings.batch_size, within=settings.batch_within_s):
            try:
                await fold_batch(batch)
            except Exception:  # not CancelledError: that is a normal stop
                # faust acks a batch even when the agent raises: an exception here would lose
                # its commands and leave delivered events without state. Die instead; the
                # next owner re-folds the batch from the last committed offset.
                log.critical("fold failed on a batch; exiting so it is re-delivered", exc_info=True)
                os._exit(70)
            yield None

    ticker_id = f"{settings.instance_id}-{uuid.uuid4().hex[:8]}"

    @app.task
    async def quiet_debug_logging() -> None:
        # mode's Worker leaves the root logger at DEBUG (handlers filter): aiokafka and faust
        # then build a LogRecord for every message produced, ~25% of a table write's cost.
        for name in ("", "aiokafka", "faust", "mode"):
            logging.getLogger(name).setLevel(settings.log_level_number())

    @app.task
    async def ticker() -> None:
        # Producing only: the fold decides what a Tick means. Key-less, one per partition,
        # sent just after each wall-clock multiple of tick_interval so that ticks on whole
        # seconds fire within milliseconds rather than up to an interval late.
        interval = settings.tick_interval_s
        for seq in itertools.count():
            now = time.time()
            await asyncio.sleep(interval - (now % interval) + TICK_OFFSET_S)
            for p in range(n):
                value = codec.encode_command(
                    cmd.Envelope(
                        idem_key=tick_idem_key(ticker_id, p, seq), job_id="", command=cmd.Tick()
                    )
                )
                await commands.send(key=None, value=value, partition=p)

    return app
