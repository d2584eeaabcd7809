"""What the code does not say about each of cronlog's topics, for its AsyncAPI document.

A topic's key, audience and who writes and reads it (``ROLES``, one row per ``Topics`` field);
``topology/wire/asyncapi.py`` builds the document from it and ``topic_specs``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Message:
    """One kind of record value, and its key."""

    name: str
    title: str
    key: str
    """The record key, described."""
    avro: str | None = None
    """The framed Avro type of the value (``cronlog.Command``); None: not an Avro contract."""
    content_type: str = "application/octet-stream"
    description: str = ""


@dataclass(frozen=True, slots=True)
class Role:
    """What ``topic_specs`` does not say about a topic."""

    public: bool
    """Other services may use it (commands: write; the rest: read); else cronlog's own."""
    description: str
    message: Message
    operation: tuple[str, str] | None = None
    """(operationId, summary) of a client's operation on it: send for commands, else
    receive. None for internal topics."""


COMMAND = Message(
    "Command",
    "A command",
    "job_id, UTF-8 (Tick and PollTasks: no key, an explicit partition)",
    "cronlog.Command",
    description=(
        "A command addressed to one job: idem_key (unique per logical command; a second "
        "command with the same key is a no-op), job_id, tenant, body. Produced with the "
        "Java client's partitioner (murmur2 of the key; topology/kafka/partitioning.py): the fold "
        "dead-letters a command found on another partition than its key's."
    ),
)
RUN_EVENT = Message(
    "RunEvent",
    "A run-event",
    "job_id, UTF-8",
    "cronlog.RunEvent",
    description=(
        "A state change of a job or run, written by the fold in a Kafka transaction: read "
        "with isolation.level=read_committed. event_id is deterministic; dedupe by it."
    ),
)
REPLY = dataclasses.replace(
    RUN_EVENT,
    name="Reply",
    title="A copy of a run-event for the worker that caused it",
    key="worker_id, UTF-8",
    description=(
        "A copy of a RunEvent answering a worker's command: a grant (TaskClaimed), a renewal "
        "(LeaseRenewed), a refusal (CommandRejected), or a poll's PollAnswered. Other events "
        "a worker's command causes (TaskSucceeded, RunSucceeded, ...) are on run-events only."
    ),
)
ROLES: dict[str, Role] = {
    "commands": Role(
        True,
        "The log of record: every input of the scheduler (API, CLI, workers, tickers, other "
        "services). Replaying it rebuilds all state and history.",
        COMMAND,
        ("sendCommand", "Append a command for a job (register, trigger, pause, ...)."),
    ),
    "run_events": Role(
        True,
        "The public changelog: every state change, same partitioning as the commands.",
        RUN_EVENT,
        ("receiveRunEvents", "Follow jobs and runs (read_committed)."),
    ),
    "ready": Role(
        False,
        "Notifications for workers: copies of TaskReady run-events not granted at once "
        "(docs/dispatch.md).",
        RUN_EVENT,
    ),
    "replies": Role(
        False,
        "Answers to a worker's claims, renewals, refused completions and polls, on its partition.",
        REPLY,
    ),
    "dead_letters": Role(
        True,
        "Records the fold could not decode or apply, with the reason; nothing is lost.",
        Message(
            "DeadLetter",
            "A dead letter",
            "the original record's key (its first 1 KiB)",
            "cronlog.DeadLetter",
        ),
        ("receiveDeadLetters", "Watch the records cronlog refused."),
    ),
    "logs": Role(
        True,
        "Task output, chunked per attempt (docs/architecture.md, 'Task logs'); lz4.",
        Message("LogChunk", "A chunk of task output", "run_id, UTF-8", "cronlog.LogChunk"),
        ("receiveTaskLogs", "Read the output of task attempts."),
    ),
    "job_table_changelog": Role(
        False,
        "The scheduler's job table: the latest record per job, written in the fold's "
        "transaction; read by its restore and `cronlog replay --verify`.",
        Message(
            "JobStateRecord",
            "A job's table record",
            "job_id, UTF-8",
            description="A version tag ('v3:') then JSON (topology/wire/state_codec.py); internal.",
        ),
    ),
    "after_relay": Role(
        False,
        "Snapshots of the after relay's index with the run-events offsets they cover.",
        Message(
            "AfterIndexSnapshot",
            "An after-relay snapshot",
            "after-index/v1 (one key)",
            content_type="application/json",
            description="JSON (services/scheduler/after_snapshot.py); internal.",
        ),
    ),
    "snapshots": Role(
        False,
        "State snapshots with the command offsets they cover (`cronlog snapshot`): partition "
        "0 holds manifests, partition 1 the chunks of job records; `cronlog replay` starts "
        "from the newest (docs/architecture.md, 'Retention and snapshots').",
        Message(
            "Snapshot",
            "A snapshot manifest or chunk",
            "chunks: <snapshot id>/<n>; manifests: <snapshot id> (UTF-8)",
            description="Schemaless Avro (topology/snapshots/wire.py); internal.",
        ),
    ),
    "workers": Role(
        True,
        "Worker heartbeats (informational: leases are the fold's); a null value under a "
        "worker_id is its tombstone.",
        Message(
            "WorkerHeartbeat", "A worker heartbeat", "worker_id, UTF-8", "cronlog.WorkerHeartbeat"
        ),
        ("receiveWorkerHeartbeats", "See which workers are alive."),
    ),
}
