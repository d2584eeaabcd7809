"""Following cronlog through ``cronlog.run-events``: a job's or a run's events, and outcomes.

Read ``read_committed`` (the fold writes in transactions) with manual partition assignment
(no consumer group, nothing committed): a job's events are all on the partition its key maps
to. Events may be delivered more than once (DESIGN.md invariant 6) but always under the same
``event_id``; the stream drops the repeats.
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, TopicPartition

from cronlog import events as ev
from cronlog.errors import CronlogError
from cronlog.vocabulary import RejectReason
from topology.kafka.config import KafkaSettings
from topology.kafka.partitioning import partition_for
from topology.kafka.topics import Topics
from topology.wire.codec import Codec, DecodeError, default_codec

Start = Literal["beginning", "now"]
"""Where a stream starts: the partition's first retained event, or its end when opened."""

RunState = Literal["succeeded", "failed", "cancelled"]
"""A run's terminal state."""

_ENDS: dict[type, RunState] = {
    ev.RunSucceeded: "succeeded",
    ev.RunFailed: "failed",
    ev.RunCancelled: "cancelled",
}
SEEN_CAPACITY = 100_000
"""event_ids remembered for deduplication per stream (the oldest are forgotten first):
re-deliveries come within one transaction's retry, far closer together than this."""


class UndecodableEvent(CronlogError):
    """A run-events record this client cannot read (written by a newer schema version?)."""


class CommandRefused(CronlogError):
    """The fold refused the command being followed (its CommandRejected event).

    Attributes:
        reason: the ``RejectReason`` (``unknown_job``, ``tenant_mismatch``, ...).
        detail: the fold's explanation, naming what is wrong.
    """

    def __init__(self, reason: RejectReason, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class OutcomeTimeout(CronlogError, TimeoutError):
    """A run did not end within the time given; it may still end later."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a run ended.

    Attributes:
        run_id: the run.
        job_id: its job.
        state: ``succeeded``, ``failed`` or ``cancelled``.
        ended: the RunSucceeded / RunFailed / RunCancelled event.
        attempts: every TaskSucceeded and TaskFailed of the run the stream saw, in log order
            (exit codes, failure kinds, output tails).
    """

    run_id: str
    job_id: str
    state: RunState
    ended: ev.RunEvent
    attempts: tuple[ev.RunEvent, ...]


class EventStream:
    """Reads cronlog's run-events for jobs and runs.

    Args:
        settings: cluster, topic prefix and security (``KafkaSettings``); default from the
            environment.
        codec: decodes events; default the shared codec (every shipped schema version).
        consumer_config: extra confluent-kafka consumer settings (``isolation.level`` stays
            ``read_committed``).
        poll_s: how long one poll waits, seconds.

    One stream opens one consumer per call of ``events``; close it by ending the iteration
    (or ``close()`` on the generator).
    """

    def __init__(
        self,
        settings: KafkaSettings | None = None,
        *,
        codec: Codec | None = None,
        consumer_config: Mapping[str, object] | None = None,
        poll_s: float = 0.2,
    ) -> None:
        self.settings = settings or KafkaSettings()
        self.topic = Topics.of(self.settings).run_events
        self._codec = codec or default_codec()
        self._extra = {**dict(consumer_config or {}), "isolation.level": "read_committed"}
        self._poll_s = poll_s

    def events(
        self,
        *,
        job_id: str | None = None,
        run_id: str | None = None,
        start: Start | Mapping[int, int] = "beginning",
        timeout_s: float | None = None,
    ) -> Iterator[ev.RunEvent]:
        """Yield run events in log order, each event_id once.

        Args:
            job_id: only this job's events (read from its one partition). None: every job's,
                from every partition (then order holds per job only).
            run_id: only events of this run (those whose body names it).
            start: ``"beginning"``, ``"now"``, or ``{partition: offset}`` (a ``RunRef``'s
                ``events_partition: events_offset``).
            timeout_s: stop after this many seconds, seconds; None: never.

        Yields:
            ``RunEvent`` (``cronlog.events``); nothing for a job without events.

        Raises:
            UndecodableEvent: a record this client cannot decode (topic/partition@offset).
            KafkaException: the cluster could not be reached for the topic's metadata.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        consumer = Consumer(
            self.settings.consumer_config(f"cronlog-client-{uuid.uuid4().hex}", **self._extra)
        )
        try:
            consumer.assign(self._assignment(consumer, job_id, start))
            seen: OrderedDict[str, None] = OrderedDict()
            key = None if job_id is None else job_id.encode()
            while deadline is None or time.monotonic() < deadline:
                wait = (
                    self._poll_s
                    if deadline is None
                    else min(self._poll_s, deadline - time.monotonic())
                )
                msg = consumer.poll(max(0.0, wait))
                if msg is None or msg.error() is not None:
                    continue
                if key is not None and msg.key() != key:
                    continue  # another job on the same partition: not decoded
                event = self._decode(msg.value() or b"", msg.partition(), msg.offset())
                if event.event_id in seen:
                    continue
                seen[event.event_id] = None
                if len(seen) > SEEN_CAPACITY:
                    seen.popitem(last=False)
                if run_id is None or getattr(event.event, "run_id", None) == run_id:
                    yield event
        finally:
            consumer.close()

    def _assignment(
        self, consumer: Consumer, job_id: str | None, start: Start | Mapping[int, int]
    ) -> list[TopicPartition]:
        meta = consumer.list_topics(self.topic, timeout=10).topics.get(self.topic)
        if meta is None or meta.error is not None or not meta.partitions:
            raise UndecodableEvent(f"topic {self.topic} is not there")
        count = len(meta.partitions)
        parts = range(count) if job_id is None else [partition_for(job_id, count)]
        if isinstance(start, str):
            offset = OFFSET_BEGINNING if start == "beginning" else OFFSET_END
            return [TopicPartition(self.topic, p, offset) for p in parts]
        return [TopicPartition(self.topic, p, start.get(p, OFFSET_BEGINNING)) for p in parts]

    def _decode(self, value: bytes, partition: int | None, offset: int | None) -> ev.RunEvent:
        try:
            return self._codec.decode_event(value)
        except DecodeError as exc:
            raise UndecodableEvent(f"{self.topic}/{partition}@{offset}: {exc}") from exc

    def wait_for_outcome(
        self,
        run_id: str,
        timeout_s: float,
        *,
        job_id: str | None = None,
        idem_key: str | None = None,
        start: Start | Mapping[int, int] = "beginning",
    ) -> Outcome:
        """Wait until run ``run_id`` ends and return how.

        Args:
            run_id: the run (``RunRef.run_id``).
            timeout_s: the longest wait, seconds.
            job_id: its job; reads one partition instead of all of them. Give it.
            idem_key: the command that started the run (``RunRef.idem_key``): its
                CommandRejected, if the fold refuses it, ends the wait with CommandRefused.
            start: where to read from (``RunRef``: ``{ref.events_partition:
                ref.events_offset}``). Default the beginning, which is always right but reads
                the partition's history.

        Returns:
            The Outcome, with the attempts seen on the way.

        Raises:
            CommandRefused: the command ``idem_key`` was refused (unknown job, tenant, ...).
            OutcomeTimeout: the run had not ended after ``timeout_s`` seconds.
            UndecodableEvent: see ``events``.
        """
        attempts: list[ev.RunEvent] = []
        for event in self.events(job_id=job_id, start=start, timeout_s=timeout_s):
            body = event.event
            if isinstance(body, ev.CommandRejected) and idem_key and event.idem_key == idem_key:
                raise CommandRefused(body.reason, body.detail)
            if getattr(body, "run_id", None) != run_id:
                continue
            if isinstance(body, ev.TaskSucceeded | ev.TaskFailed):
                attempts.append(event)
            state = _ENDS.get(type(body))
            if state is not None:
                return Outcome(run_id, event.job_id, state, event, tuple(attempts))
        raise OutcomeTimeout(f"run {run_id} did not end within {timeout_s} s")
