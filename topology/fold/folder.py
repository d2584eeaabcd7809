"""The generic fold adapter: a batch of command records in; events, records and ticks out.

Per record (DESIGN.md, "The adapter protocol"): decode (undecodable → dead letter), check the
key and partition, then dedupe by idem_key and decide/evolve through
``cronlog.decide.handle`` against an in-batch overlay of job records. A Tick decides its
partition's due jobs from the due index, at most ``tick_slice`` of them; if more are due, the
batch appends a continuation Tick to the same partition, which the fold reads after what was
appended meanwhile. A poll (PollTasks, or a CompleteTask's ``claim_next``) grants the
partition's ready task instances from the ready index, best ``ready_rank`` first (one
``PollJob`` decision per job), and is answered with PollAnswered on the worker's replies
(docs/dispatch.md). Commands keyed ``LEDGER_KEY`` go to the tenant ledger
(``topology/fold/ledger.py``), and a ledger tenant's job's slot events append the ledger's
commands. The runtime (``services/scheduler/runtime.py``) commits everything a batch decided
in one Kafka transaction, then writes the job records to RocksDB.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from datetime import datetime

from opentelemetry.trace import Tracer

from cronlog import commands as cmd
from cronlog import dispatch
from cronlog import events as ev
from cronlog.decide import handle
from cronlog.errors import CronlogError
from cronlog.idem import IdemRules
from cronlog.ids import continuation_idem_key, grant_idem_key
from cronlog.job import JobState
from cronlog.ledger import LEDGER_KEY
from cronlog.slots import free_slots, gated
from cronlog.time import from_ms, to_ms
from topology.fold.batch import BatchResult, Outgoing, Record, Write
from topology.fold.dead_letters import key_head
from topology.fold.due_index import DueIndex
from topology.fold.ledger import LedgerFold, ledger_commands
from topology.fold.markers import FoldMarkers
from topology.fold.messages import dead_letter_message, event_messages, poll_answer, too_large
from topology.fold.record_limits import (
    CLAIM_RESERVE_BYTES,
    MANUAL_STARTS,
    MAX_OUTPUT_BYTES,
    MAX_RECORD_BYTES,
    RESERVED_CLAIMS,
    TOO_LARGE_RETRY_MS,
    unended,
)
from topology.fold.spans import sdk_tracer, traced_decision
from topology.fold.state_cache import StateCache
from topology.kafka.partitioning import partition_for
from topology.kafka.topics import Topics
from topology.wire.codec import Codec, RegistryUnavailable
from topology.wire.state_codec import dump_state, load_state

__all__ = [
    "ANY_TIME_MS",
    "TICK_SLICE",
    "BatchFolder",
    "BatchResult",
    "Outgoing",
    "Record",
    "Write",
]

log = logging.getLogger("cronlog.fold")
TICK_SLICE = 250
"""At most this many due jobs are decided per Tick (~50 ms of fold time); the rest continue
on a Tick the batch appends to the same partition."""
GRANT_LOOK_PAST = 16
"""Per poll, at most this many jobs beyond its slots are looked at (jobs that grant nothing
are looked past; this bounds what a poll costs)."""
ANY_TIME_MS = 2**62
"""``pop_due``'s "now" for the ready index: every ready job qualifies, best rank first."""


class BatchFolder:
    """Folds batches of command records for the partitions this process owns.

    Args:
        topics: topic names.
        partitions: partition count of the commands topic.
        load: (partition, job_id) → stored record bytes or None (reads the table).
        due: the due index; updated as each command is decided, so a Tick later in the same
            batch sees deadlines set earlier in it (batch boundaries never change the outcome).
        codec: the Avro codec.
        tick_slice: most due jobs one Tick decides (TICK_SLICE).
        ready: the ready index (jobs with a grantable task instance, by ``ready_rank``),
            kept like the due index; default: a new one owning every partition.
        cache: states this process committed (``topology/fold/state_cache.py``), read before
            ``load``; None decodes every record (``cronlog replay``).
        tracer: makes a ``fold.command`` span per decision (``topology/fold/spans.py``); default:
            the installed SDK provider's, or none at all when tracing is off.
        markers: the dedupe markers of external commands (``topology/fold/markers.py``) over
            the partitions' marker stores; default: the default horizon over no stored
            markers (each batch remembers only its own; the record's window still holds).
    """

    def __init__(
        self,
        topics: Topics,
        partitions: int,
        load: Callable[[int, str], bytes | None],
        due: DueIndex,
        codec: Codec,
        tick_slice: int = TICK_SLICE,
        ready: DueIndex | None = None,
        cache: StateCache | None = None,
        tracer: Tracer | None = None,
        markers: FoldMarkers | None = None,
    ) -> None:
        self.tracer = sdk_tracer("cronlog.fold", tracer)
        self.topics = topics
        self.partitions = partitions
        self.load = load
        self.due = due
        self.codec = codec
        self.tick_slice = tick_slice
        if ready is None:
            ready = DueIndex()
            ready.reset(range(partitions))
        self.ready = ready
        self.cache = cache
        self.ledger = LedgerFold(topics, load, codec)
        self.markers = markers or FoldMarkers(IdemRules(), lambda p, k: None, lambda p, u, n: [])

    def fold(self, records: list[Record]) -> BatchResult:
        """Decide a batch. Never raises for bad input: such records become dead letters.

        Raises:
            RegistryUnavailable: a Confluent-framed record's schema could not be fetched (the
                record may be fine): nothing of the batch is kept; fold it again later.
        """
        out = BatchResult()
        overlay: dict[str, JobState | None] = {}
        self.ledger.begin()
        self.markers.begin()
        for rec in records:
            point = self.markers.savepoint()
            try:
                self._fold_one(rec, overlay, out)
            except RegistryUnavailable:
                raise  # the record is fine, the registry is not: the caller folds it again
            except CronlogError as exc:
                self.markers.rollback(point)
                out.sends.append(
                    dead_letter_message(self.topics, self.codec, rec, type(exc).__name__, str(exc))
                )
            except Exception as exc:  # a bug must not stop the fold or lose the record
                self.markers.rollback(point)
                log.exception(
                    "fold failed on %s/%s@%s", self.topics.commands, rec.partition, rec.offset
                )
                reason = f"internal error: {exc!r}"
                out.sends.append(
                    dead_letter_message(self.topics, self.codec, rec, type(exc).__name__, reason)
                )
        self.ledger.finish(out)
        out.markers = self.markers.changes()
        out.markers_before = self.markers.stored_before()
        return out

    def _state(
        self, partition: int, job_id: str, overlay: dict[str, JobState | None]
    ) -> JobState | None:
        if job_id in overlay:
            return overlay[job_id]
        if self.cache is not None and (cached := self.cache.get(partition, job_id)) is not None:
            return cached
        raw = self.load(partition, job_id)
        return load_state(raw) if raw is not None else None

    def _fold_one(self, rec: Record, overlay: dict[str, JobState | None], out: BatchResult) -> None:
        env = self.codec.decode_command(rec.value)
        record_time = from_ms(rec.timestamp_ms)
        out.commands += 1
        if isinstance(env.command, cmd.Tick):
            self._tick(rec, env, record_time, overlay, out)
            return
        if isinstance(env.command, cmd.PollTasks):
            poll = env.command
            granted = self._grant_ready(
                rec, env, poll.worker_id, poll.slots, overlay, out, poll.lease_token
            )
            out.sends.append(
                poll_answer(
                    self.topics,
                    self.codec,
                    rec,
                    env,
                    worker_id=poll.worker_id,
                    poll_id=poll.poll_id,
                    granted=granted,
                )
            )
            return
        if not env.job_id or not env.idem_key:
            raise CronlogError(
                "job_id and idem_key may not be empty (only a Tick or a poll has no job)"
            )
        if rec.key is None or rec.key != env.job_id.encode():
            head = key_head(rec.key)
            raise CronlogError(f"record key {head} does not match job_id {env.job_id!r}")
        if partition_for(rec.key, self.partitions) != rec.partition:
            raise CronlogError(
                f"wrong_partition: key {env.job_id!r} maps to partition "
                f"{partition_for(rec.key, self.partitions)}, record is on {rec.partition}"
            )
        if env.job_id == LEDGER_KEY:
            self.ledger.fold(rec, env, record_time, out)
            return
        events = self._apply(rec, env, record_time, overlay, out)
        command = env.command
        if isinstance(command, cmd.CompleteTask) and command.claim_next > 0:
            # the freed slot: the tasks the completion readied, granted in its own decision
            # (eager dispatch: cronlog.dispatch.take_next), then the partition's, as a poll
            worker, took = command.worker_id, len(dispatch.granted(events))
            more = command.claim_next - took
            took += self._grant_ready(rec, env, worker, more, overlay, out, command.lease_token)
            out.sends.append(
                poll_answer(
                    self.topics,
                    self.codec,
                    rec,
                    env,
                    worker_id=worker,
                    poll_id=env.idem_key,
                    granted=took,
                )
            )

    def _grant_ready(
        self,
        rec: Record,
        env: cmd.Envelope,
        worker_id: str,
        most: int,
        overlay: dict[str, JobState | None],
        out: BatchResult,
        lease_token: str = "",
    ) -> int:
        """Grant ``worker_id`` up to ``most`` ready task instances of the record's partition.

        Smallest ``ready_rank`` first, one PollJob decision per job. A job that granted what
        it could (or nothing: its record is full, its tasks are at ``max_active_tasks``) is
        looked past, so it holds back no other job's work; at most ``most`` +
        ``GRANT_LOOK_PAST`` jobs are looked at per poll, which bounds a poll's cost.

        Returns:
            How many were granted.
        """
        key = grant_idem_key(env.idem_key, rec.partition, rec.offset)
        total, seen, passed = 0, set[str](), list[str]()
        while total < most and len(seen) < most + GRANT_LOOK_PAST:
            popped = self.ready.pop_due(rec.partition, ANY_TIME_MS, 1)
            if not popped:
                break
            if popped[0] in seen:  # decided once in this poll: look past it
                passed.append(popped[0])
                continue
            seen.add(popped[0])
            poll = cmd.PollJob(worker_id=worker_id, slots=most - total, lease_token=lease_token)
            job_env = cmd.Addressed(idem_key=key, job_id=popped[0], command=poll)
            events = self._apply(rec, job_env, from_ms(rec.timestamp_ms), overlay, out)
            total += len(dispatch.granted(events))
        for job_id in passed:
            state = self._state(rec.partition, job_id, overlay)
            self.ready.set(rec.partition, job_id, _ready_ms(state))
        return total

    def _tick(
        self,
        rec: Record,
        env: cmd.Envelope,
        record_time: datetime,
        overlay: dict[str, JobState | None],
        out: BatchResult,
    ) -> None:
        """Decide the partition's due jobs, at most ``tick_slice``; continue if more are due.

        The continuation is a Tick appended to the same partition (idem_key lineage
        ``continuation_idem_key``), so a replay reads it from the log like any command.
        """
        due = self.due.pop_due(rec.partition, rec.timestamp_ms, self.tick_slice)
        for job_id in due:
            job_env = cmd.Envelope(idem_key=env.idem_key, job_id=job_id, command=env.command)
            self._apply(rec, job_env, record_time, overlay, out)
        self.markers.expire(rec.partition, record_time)
        if len(due) == self.tick_slice and self.due.has_due(rec.partition, rec.timestamp_ms):
            more = cmd.Envelope(
                idem_key=continuation_idem_key(env.idem_key), job_id="", command=cmd.Tick()
            )
            out.sends.append(
                Outgoing(self.topics.commands, None, self.codec.encode_command(more), rec.partition)
            )

    def _apply(
        self,
        rec: Record,
        env: cmd.Addressed,
        record_time: datetime,
        overlay: dict[str, JobState | None],
        out: BatchResult,
    ) -> list[ev.Event]:
        """Decide one command for one job; return the events applied."""
        if self.tracer is not None:
            decide = functools.partial(self._decide, rec, env, record_time, overlay, out)
            return traced_decision(self.tracer, env, decide)
        return self._decide(rec, env, record_time, overlay, out)

    def _decide(
        self,
        rec: Record,
        env: cmd.Addressed,
        record_time: datetime,
        overlay: dict[str, JobState | None],
        out: BatchResult,
    ) -> list[ev.Event]:
        """``_apply`` without its span."""
        state = self._state(rec.partition, env.job_id, overlay)
        self.markers.at(rec.partition)
        point = self.markers.savepoint()
        new, events = handle(state, env, record_time, self.markers)
        out.decisions += 1
        # an unchanged state (a duplicate, a refusal, an empty poll) is neither checked nor written
        stored = dump_state(new) if new is not None and new is not state else None
        limit = MAX_RECORD_BYTES
        if new is not None and new is not state and isinstance(env.command, MANUAL_STARTS):
            limit -= CLAIM_RESERVE_BYTES * min(unended(new), RESERVED_CLAIMS)
        # a grant of tenant slots is never refused for size: the ledger counted it already
        # (refused, the slot would be lost); it adds a few bytes to the record
        refused = (
            stored is not None
            and len(stored) > limit
            and not isinstance(env.command, cmd.GrantSlots)
        )
        if refused:
            self.markers.rollback(point)  # not applied: its marker goes too
            new, events = (
                state,
                [too_large(env, f"the job record would grow past {limit} bytes")],
            )
        at = new.clock if new is not None else record_time
        grants = dispatch.granted(events)  # eager dispatch: their TaskReady needs no ready copy
        # a ledger tenant's job, or a grant (cronlog.slots): the slot events' commands, and
        # no ready notification while it has no free slot
        slotted = isinstance(env.command, cmd.GrantSlots) or (new is not None and gated(new))
        notify = not slotted or new is None or free_slots(new) != 0
        sends = [
            s
            for i, e in enumerate(events)
            for s in event_messages(
                self.topics, self.codec, env, at, i, e, granted=grants, notify=notify
            )
        ]
        if any(len(s.value) > MAX_OUTPUT_BYTES for s in sends):
            if not isinstance(env.command, cmd.Tick):
                raise CronlogError(
                    f"output_too_large: an event of this command would exceed "
                    f"{MAX_OUTPUT_BYTES} bytes; nothing applied"
                )
            refused, new = True, state
            self.markers.rollback(point)
            events = [too_large(env, f"an event would exceed {MAX_OUTPUT_BYTES} bytes")]
            sends = [
                s
                for i, e in enumerate(events)
                for s in event_messages(self.topics, self.codec, env, at, i, e)
            ]
        out.sends += sends
        if slotted:
            out.sends += ledger_commands(self.codec, self.topics, env, at, events, new)
        overlay[env.job_id] = new
        out.states[env.job_id] = (rec.partition, new)
        if new is None:
            return events
        deadline = new.next_deadline()
        deadline_ms = to_ms(deadline) if deadline is not None else None
        if refused and isinstance(env.command, cmd.Tick) and deadline_ms is not None:
            deadline_ms = max(deadline_ms, to_ms(record_time) + TOO_LARGE_RETRY_MS)
        ready_ms = _ready_ms(new)
        if new is not state:  # unchanged (a duplicate, a refusal): nothing to write
            value = stored if stored is not None else dump_state(new)
            out.writes[env.job_id] = Write(rec.partition, value, deadline_ms, ready_ms)
        self.due.set(rec.partition, env.job_id, deadline_ms)
        self.ready.set(rec.partition, env.job_id, ready_ms)
        return events


def _ready_ms(state: JobState | None) -> int | None:
    since = state.ready_rank() if state is not None else None
    return to_ms(since) if since is not None else None
