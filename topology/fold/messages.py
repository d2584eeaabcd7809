"""The messages a fold decision sends: run-events and their copies, poll answers, dead letters.

Also the refusal of a command that would outgrow the job record. Pure with respect to Kafka:
they return ``Outgoing`` messages the batch commits (``topology/fold/folder.py`` decides which).
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from datetime import datetime

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.decide import REPLY_COMMANDS
from cronlog.dedupe import event_key
from cronlog.ids import event_id, grant_idem_key
from cronlog.time import from_ms
from cronlog.vocabulary import RejectReason
from topology.fold.batch import Outgoing, Record
from topology.fold.dead_letters import dead_letter
from topology.kafka.topics import Topics
from topology.wire.codec import Codec

log = logging.getLogger("cronlog.fold")

ANSWERS = (ev.TaskClaimed, ev.LeaseRenewed, ev.CommandRejected)
"""The events of a worker command copied to the worker's replies: what a worker reads there
(a grant, a renewal, a refusal; ``services/worker/worker.py``, docs/dispatch.md). The other
events of its commands (TaskSucceeded, RunSucceeded, TaskReady of the next task …) are on
run-events only: no worker waits for them, and each copy was a broker record per run."""


def event_messages(
    topics: Topics,
    codec: Codec,
    env: cmd.Addressed,
    at: datetime,
    index: int,
    event: ev.Event,
    *,
    granted: Collection[tuple[str, str]] = (),
    notify: bool = True,
) -> list[Outgoing]:
    """Return the messages of one event: the run-event and its copies.

    Args:
        topics: topic names.
        codec: the Avro codec.
        env: the command that caused it.
        at: the decision's now (the job's clock), aware UTC.
        index: its position among the command's events for the job.
        event: the event.
        granted: (run_id, task) the same decision granted at once (eager dispatch): their
            TaskReady gets no ready copy.
        notify: False: no ready copy of a TaskReady (a ledger tenant's job with no free
            tenant slot: no worker could be granted it; its TenantSlotsReceived notifies).

    Returns:
        The run-event; a ready copy of a TaskReady (and of a TenantSlotsReceived: the job's
        ready tasks, held back for a tenant slot, may start now); a reply copy of a worker
        command's answers (``ANSWERS``: grants, renewals, refusals).
    """
    run_event = ev.RunEvent(
        event_id=event_id(event_key(env, event, at), env.job_id, index),
        job_id=env.job_id,
        at=at,
        idem_key=env.idem_key,
        index=index,
        event=event,
    )
    value = codec.encode_event(run_event)
    key = env.job_id.encode()
    sends = [Outgoing(topics.run_events, key, value)]
    if isinstance(event, ev.TaskReady) and (event.run_id, event.task) not in granted:
        if notify:
            sends.append(Outgoing(topics.ready, key, value))
    elif isinstance(event, ev.TenantSlotsReceived) and event.count:  # tasks may start
        sends.append(Outgoing(topics.ready, key, value))
    worker = getattr(env.command, "worker_id", None)
    if worker and isinstance(event, ANSWERS) and isinstance(env.command, REPLY_COMMANDS):
        sends.append(Outgoing(topics.replies, worker.encode(), value))
    return sends


def poll_answer(
    topics: Topics,
    codec: Codec,
    rec: Record,
    env: cmd.Envelope,
    *,
    worker_id: str,
    poll_id: str,
    granted: int,
) -> Outgoing:
    """Return the PollAnswered of a poll (sent to the worker's replies after its grants).

    Args:
        topics: topic names.
        codec: the Avro codec.
        rec: the record of the poll (a PollTasks, or a CompleteTask's ``claim_next``).
        env: its command.
        worker_id: the worker polling.
        poll_id: the poll's id (its idem_key for a completion).
        granted: how many task instances the poll was granted.
    """
    answer = ev.PollAnswered(
        worker_id=worker_id, poll_id=poll_id, partition=rec.partition, granted=granted
    )
    key = grant_idem_key(env.idem_key, rec.partition, rec.offset)
    run_event = ev.RunEvent(
        event_id=event_id(key, "", 0),
        job_id="",
        at=from_ms(rec.timestamp_ms),
        idem_key=key,
        index=0,
        event=answer,
    )
    return Outgoing(topics.replies, worker_id.encode(), codec.encode_event(run_event))


def too_large(env: cmd.Addressed, detail: str) -> ev.CommandRejected:
    """Return the refusal (``record_too_large``) of a command whose effect would not fit."""
    command = env.command
    return ev.CommandRejected(
        command=cmd.command_kind(command),
        reason=RejectReason.RECORD_TOO_LARGE,
        detail=detail,
        run_id=getattr(command, "run_id", None),
        task=getattr(command, "task", None),
        worker_id=getattr(command, "worker_id", None),
    )


def dead_letter_message(
    topics: Topics, codec: Codec, rec: Record, error_type: str, reason: str
) -> Outgoing:
    """Return the dead letter of a command record the fold could not fold (and log it).

    Args:
        topics: topic names.
        codec: the Avro codec.
        rec: the record.
        error_type: the exception's class name.
        reason: why.
    """
    log.warning("dead-lettering %s/%s@%s: %s", topics.commands, rec.partition, rec.offset, reason)
    dl = dead_letter(
        topics.commands,
        rec.partition,
        rec.offset,
        rec.timestamp_ms,
        rec.key,
        rec.value,
        error_type,
        reason,
    )
    return Outgoing(topics.dead_letters, dl.key, codec.encode_dead_letter(dl))
