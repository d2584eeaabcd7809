"""Reads ``cronlog.run-events`` from given offsets to its end (read_committed), in batches,
keeping each partition's watermark and the day each event is filed under (``days``)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, datetime
from functools import partial

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from cronlog import events as ev
from cronlog.time import from_ms
from services.archive import days
from services.archive.rows import Position
from services.archive.settings import ArchiveSettings
from services.archive.store import ArchiveError
from topology.kafka.retrying import call_with_retry
from topology.kafka.topics import Topics
from topology.wire.codec import DecodeError, decode_event

BATCH = 2000
log = logging.getLogger("cronlog.archive")
SILENCE_S = 30.0
RETRY_S = 30.0
"""How long a transient broker error (a partition without a leader yet) is retried, seconds."""


@dataclass(frozen=True, slots=True)
class Item:
    """One record read: where, the event (or why it could not be decoded), its day."""

    where: Position
    """Its partition and offset."""
    record: ev.RunEvent | None
    """The decoded run-event; None when undecodable (``error`` says why)."""
    at: datetime
    """The event's ``at``; for an undecodable record, its Kafka timestamp."""
    day: date
    """The UTC day of its partition's watermark: the day it is filed under."""
    value: bytes = b""
    """The record's raw value as it is on the topic (an undecodable one is kept, never
    dropped); the archive's ``record`` column."""
    error: str = ""
    """Why it could not be decoded; empty for a decoded record."""


@dataclass
class TopicReader:
    """A pass over the run-events topic from ``starts`` to the end offsets seen at open.

    Args:
        settings: the cluster, topic prefix and client security settings.
        starts: partition -> first offset to read; absent partitions start at their beginning.
        floor: the watermark every partition starts from (the end of the last archived day):
            a record read later is never filed under an earlier, committed day.
        stop_at: a partition stops at its first record whose watermark reaches it (that
            record is not returned; its offset is the partition's stop); None: read to the end.

    Attributes:
        marks: partition -> watermark so far.
        stops: partition -> the first offset not returned, for every finished partition.
        first_of_day: partition -> day -> offset of its first record filed under that day.
    """

    settings: ArchiveSettings
    starts: dict[int, int]
    floor: datetime | None = None
    stop_at: datetime | None = None
    marks: dict[int, datetime | None] = field(default_factory=dict)
    stops: dict[int, int] = field(default_factory=dict)
    first_of_day: dict[int, dict[date, int]] = field(default_factory=dict)

    def batches(self) -> Iterator[list[Item]]:
        """Yield the records in batches, in offset order within each partition.

        Raises:
            ArchiveError: a start offset lies below the partition's first retained offset
                (events were deleted before they were archived: a gap), or the topic is missing.
            TimeoutError: nothing arrived for 30 s before the end offsets were reached.
        """
        topic = Topics.of(self.settings).run_events
        consumer = Consumer(
            self.settings.consumer_config(f"cronlog-archive-{uuid.uuid4().hex[:12]}")
        )
        try:
            meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
            if meta is None or meta.error is not None or not meta.partitions:
                raise ArchiveError(f"topic {topic} does not exist")
            ends: dict[int, int] = {}
            assign = []
            for p in sorted(meta.partitions):
                low, high = call_with_retry(
                    partial(consumer.get_watermark_offsets, TopicPartition(topic, p), timeout=10),
                    what=f"watermarks of {topic}/{p}",
                    deadline_s=RETRY_S,
                )
                start = self.starts.get(p)
                if start is not None and start < low:
                    raise ArchiveError(
                        f"{topic}/{p}: offsets {start}..{low - 1} were deleted before they were "
                        "archived (retention shorter than the hot window plus export lag?)"
                    )
                if start is None and low > 0:
                    log.warning(
                        "the archive's first export starts here; run-events before it were "
                        "deleted before there was an archive",
                        extra={
                            "action": "archive_head_gone",
                            "topic": topic,
                            "partition": p,
                            "first_offset": low,
                        },
                    )
                self.marks[p] = self.floor
                self.first_of_day[p] = {}
                ends[p] = high
                first = low if start is None else start
                if first >= high:
                    self.stops[p] = first
                else:
                    assign.append(
                        TopicPartition(topic, p, OFFSET_BEGINNING if start is None else start)
                    )
            if assign:
                consumer.assign(assign)
                yield from self._consume(consumer, topic, ends)
        except KafkaException as exc:
            raise ArchiveError(f"reading {topic}: {exc}") from exc
        finally:
            consumer.close()

    def _consume(
        self, consumer: Consumer, topic: str, ends: dict[int, int]
    ) -> Iterator[list[Item]]:
        silent = 0.0
        while len(self.stops) < len(ends):
            msgs = consumer.consume(BATCH, timeout=1.0)
            items: list[Item] = []
            for m in msgs:
                p, offset = m.partition(), m.offset()
                if m.error() is not None or p is None or offset is None:
                    continue
                if p in self.stops or offset >= ends[p]:
                    continue
                item = self._item(p, offset, m.value() or b"", m.timestamp()[1])
                if item is None:  # past stop_at: this partition is done
                    self._stop(consumer, topic, p, offset)
                    continue
                items.append(item)
                if offset + 1 >= ends[p]:
                    self._stop(consumer, topic, p, offset + 1)
            # a transaction's commit marker takes an offset but is never delivered: the
            # position (past it), not the last record, says a partition is done. Asked on
            # every pass (a local call), not only when nothing came: on a live topic the
            # other partitions always deliver, and a partition ending on a marker never ended
            open_ = [TopicPartition(topic, p) for p in ends if p not in self.stops]
            for tp in consumer.position(open_) if open_ else ():
                if tp.offset >= ends[tp.partition]:
                    self._stop(consumer, topic, tp.partition, ends[tp.partition])
            silent = 0.0 if msgs else silent + 1.0
            if silent >= SILENCE_S and len(self.stops) < len(ends):
                raise TimeoutError(f"{topic}: no records for {SILENCE_S:.0f}s before the end")
            if items:
                yield items

    def _stop(self, consumer: Consumer, topic: str, partition: int, offset: int) -> None:
        self.stops[partition] = offset
        consumer.pause([TopicPartition(topic, partition)])

    def _item(self, partition: int, offset: int, value: bytes, ts_ms: int) -> Item | None:
        """Return the record as an Item, or None when it is past ``stop_at``."""
        record: ev.RunEvent | None
        try:
            record, error = decode_event(value), ""
            at = record.at
        except DecodeError as exc:
            record, error, at = None, str(exc), from_ms(max(ts_ms, 0))
        mark = days.advance(self.marks[partition], at)
        if self.stop_at is not None and mark >= self.stop_at:
            return None
        self.marks[partition] = mark
        day = days.day_of(mark)
        self.first_of_day[partition].setdefault(day, offset)
        return Item(Position(partition, offset), record, at, day, value, error)

    def next_offsets(self, day: date) -> dict[int, int]:
        """Return partition -> the first offset filed after the complete ``day``
        (``days.next_offsets``)."""
        return days.next_offsets(self.first_of_day, self.stops, day)
