"""The generic fold adapter: a batch of command records in, events out, then table records.

Order per batch (DESIGN.md, "The adapter protocol"): decode each record (undecodable → dead
letter), dedupe by idem_key and decide/evolve through ``cronlog.decide.handle`` against an
in-batch overlay of job records, *deliver every outgoing message and wait for the acks*, and only
then write the job records. A crash anywhere before the writes re-delivers the batch, which
recomputes the same events with the same event_ids.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.decide import WORKER_COMMANDS, handle
from cronlog.errors import CronlogError
from cronlog.ids import event_id
from cronlog.job import JobState
from cronlog.time import from_ms, to_ms
from cronlog.vocabulary import CommandKind, RejectReason
from topology.codec import Codec, DeadLetter
from topology.due_index import DueIndex
from topology.partitioning import partition_for
from topology.state_codec import dump_state, load_state
from topology.topics import Topics

log = logging.getLogger("cronlog.fold")
MAX_DEAD_LETTER_VALUE = 256 * 1024
"""A dead letter keeps at most this many bytes of the bad record's value (the head)."""
MAX_DEAD_LETTER_KEY = 1024
"""...and of its key (the head; a job_id key is at most 512 bytes). The dead letter carries the
key twice (body and record key): a huge one would make it a record no producer can send."""
MAX_RECORD_BYTES = 512 * 1024
"""A command whose resulting job record would exceed this is refused (record_too_large):
the record must fit one changelog message whatever the input."""


@dataclass(frozen=True, slots=True)
class Record:
    """One command record as the adapter sees it.

    Attributes:
        partition, offset: where it was read from.
        timestamp_ms: the record timestamp (LogAppendTime on the commands topic), epoch ms.
        key, value: raw bytes.
        context: the stream processor's own event object (opaque here; needed for table writes).
    """

    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes
    context: object = None


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A message to deliver before any state is written.

    Attributes:
        partition: explicit partition, or None for the producer's murmur2 partitioner.
    """

    topic: str
    key: bytes | None
    value: bytes
    partition: int | None = None


@dataclass
class BatchResult:
    """What one batch decided: messages to deliver, then job records to write.

    Attributes:
        sends: in order of decision.
        writes: job_id → (context of the last record that touched it, partition, stored bytes).
        commands: how many command records were decoded.
    """

    sends: list[Outgoing] = field(default_factory=list)
    writes: dict[str, tuple[object, int, bytes]] = field(default_factory=dict)
    commands: int = 0


class BatchFolder:
    """Folds batches of command records for the partitions this process owns.

    Args:
        topics: topic names.
        partitions: partition count of the commands topic.
        load: job_id → stored record bytes or None (reads the table).
        due: the due index; updated as each command is decided, so a Tick later in the same
            batch sees deadlines set earlier in it (batch boundaries never change the outcome).
        codec: the Avro codec.
    """

    def __init__(
        self,
        topics: Topics,
        partitions: int,
        load: Callable[[str], bytes | None],
        due: DueIndex,
        codec: Codec,
    ) -> None:
        self.topics = topics
        self.partitions = partitions
        self.load = load
        self.due = due
        self.codec = codec

    def fold(self, records: list[Record]) -> BatchResult:
        """Decide a batch. Never raises for bad input: such records become dead letters."""
        out = BatchResult()
        overlay: dict[str, JobState | None] = {}
        for rec in records:
            try:
                self._fold_one(rec, overlay, out)
            except CronlogError as exc:
                self._dead_letter(rec, type(exc).__name__, str(exc), out)
            except Exception as exc:  # a bug must not stop the fold or lose the record
                log.exception(
                    "fold failed on %s/%s@%s", self.topics.commands, rec.partition, rec.offset
                )
                self._dead_letter(rec, type(exc).__name__, f"internal error: {exc!r}", out)
        return out

    def _state(self, job_id: str, overlay: dict[str, JobState | None]) -> JobState | None:
        if job_id in overlay:
            return overlay[job_id]
        raw = self.load(job_id)
        return load_state(raw) if raw is not None else None

    def _fold_one(self, rec: Record, overlay: dict[str, JobState | None], out: BatchResult) -> None:
        env = self.codec.decode_command(rec.value)
        record_time = from_ms(rec.timestamp_ms)
        out.commands += 1
        if isinstance(env.command, cmd.Tick):
            for job_id in self.due.pop_due(rec.partition, rec.timestamp_ms):
                job_env = cmd.Envelope(idem_key=env.idem_key, job_id=job_id, command=env.command)
                self._apply(rec, job_env, record_time, overlay, out)
            return
        if rec.key is None or rec.key != env.job_id.encode():
            raise CronlogError(f"record key {_head(rec.key)} does not match job_id {env.job_id!r}")
        if partition_for(rec.key, self.partitions) != rec.partition:
            raise CronlogError(
                f"wrong_partition: key {env.job_id!r} maps to partition "
                f"{partition_for(rec.key, self.partitions)}, record is on {rec.partition}"
            )
        self._apply(rec, env, record_time, overlay, out)

    def _apply(
        self,
        rec: Record,
        env: cmd.Envelope,
        record_time: datetime,
        overlay: dict[str, JobState | None],
        out: BatchResult,
    ) -> None:
        state = self._state(env.job_id, overlay)
        new, events = handle(state, env, record_time)
        stored = dump_state(new) if new is not None else None
        if stored is not None and len(stored) > MAX_RECORD_BYTES:
            new, stored = state, None
            events = [
                ev.CommandRejected(
                    command=CommandKind(type(env.command).__name__),
                    reason=RejectReason.RECORD_TOO_LARGE,
                    detail=f"the job record would grow past {MAX_RECORD_BYTES} bytes",
                )
            ]
            if state is not None:
                stored = dump_state(state)
        overlay[env.job_id] = new
        if new is not None and stored is not None:
            out.writes[env.job_id] = (rec.context, rec.partition, stored)
            deadline = new.next_deadline()
            self.due.set(rec.partition, env.job_id, to_ms(deadline) if deadline else None)
        at = new.clock if new is not None else record_time
        for i, event in enumerate(events):
            self._emit(env, at, i, event, out)

    def _emit(
        self, env: cmd.Envelope, at: datetime, index: int, event: ev.Event, out: BatchResult
    ) -> None:
        run_event = ev.RunEvent(
            event_id=event_id(env.idem_key, env.job_id, index),
            job_id=env.job_id,
            at=at,
            idem_key=env.idem_key,
            index=index,
            event=event,
        )
        value = self.codec.encode_event(run_event)
        key = env.job_id.encode()
        out.sends.append(Outgoing(self.topics.run_events, key, value))
        if isinstance(event, ev.TaskReady):
            out.sends.append(Outgoing(self.topics.ready, key, value))
        worker = getattr(env.command, "worker_id", None)
        if isinstance(env.command, WORKER_COMMANDS) and worker:
            out.sends.append(Outgoing(self.topics.replies, worker.encode(), value))

    def _dead_letter(self, rec: Record, error_type: str, reason: str, out: BatchResult) -> None:
        log.warning(
            "dead-lettering %s/%s@%s: %s", self.topics.commands, rec.partition, rec.offset, reason
        )
        at = from_ms(rec.timestamp_ms)  # the record's time, not a clock: replay stays identical
        value = rec.value
        if len(value) > MAX_DEAD_LETTER_VALUE:
            reason += (
                f" (value truncated to its first {MAX_DEAD_LETTER_VALUE} of "
                f"{len(value)} bytes; the original stays at this offset)"
            )
            value = value[:MAX_DEAD_LETTER_VALUE]
        key = rec.key
        if key is not None and len(key) > MAX_DEAD_LETTER_KEY:
            reason += f" (key truncated to its first {MAX_DEAD_LETTER_KEY} of {len(key)} bytes)"
            key = key[:MAX_DEAD_LETTER_KEY]
        dl = DeadLetter(
            self.topics.commands,
            rec.partition,
            rec.offset,
            key,
            value,
            error_type,
            reason,
            at,
            at,
        )
        out.sends.append(Outgoing(self.topics.dead_letters, key, self.codec.encode_dead_letter(dl)))


def _head(key: bytes | None) -> str:
    """Return ``repr(key)``, cut after 64 bytes (with the full length) for a longer key."""
    if key is None or len(key) <= 64:
        return repr(key)
    return f"{key[:64]!r}... ({len(key)} bytes)"
