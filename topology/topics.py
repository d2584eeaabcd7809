"""cronlog's topics as data: names, partition counts, retention, cleanup policy."""

from __future__ import annotations

from dataclasses import dataclass, field

from topology.config import KafkaSettings

DAY_MS = 24 * 3600 * 1000
LOG_RETENTION_MS = 7 * DAY_MS
"""How long task output stays on the logs topic, milliseconds (the API's copy outlives it)."""
WORKERS_RETENTION_MS = DAY_MS
"""How long a worker's last heartbeat stays on the workers topic, milliseconds: a worker killed
outright writes no tombstone, so its last heartbeat goes with its segment after this."""


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """One topic cronlog owns.

    Attributes:
        name: full topic name (prefix included).
        partitions: partition count; a mismatch with the cluster is refused.
        config: topic-level configs (``retention.ms``, ``cleanup.policy``, ...).
    """

    name: str
    partitions: int
    config: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Topics:
    """The names of cronlog's topics for one settings object."""

    commands: str
    run_events: str
    ready: str
    replies: str
    dead_letters: str
    logs: str
    scheduler_app: str
    job_table_changelog: str
    after_relay: str
    workers: str

    @classmethod
    def of(cls, settings: KafkaSettings) -> Topics:
        """Return the topic names under ``settings.topic_prefix``."""
        p = settings.topic_prefix
        return cls(
            commands=f"{p}cronlog.commands",
            run_events=f"{p}cronlog.run-events",
            ready=f"{p}cronlog.ready",
            replies=f"{p}cronlog.replies",
            dead_letters=f"{p}cronlog.dead-letters",
            logs=f"{p}cronlog.logs",
            scheduler_app=f"{p}cronlog-scheduler",
            job_table_changelog=f"{p}cronlog-scheduler-jobs-changelog",
            after_relay=f"{p}cronlog.after-relay",
            workers=f"{p}cronlog.workers",
        )


def topic_specs(settings: KafkaSettings) -> list[TopicSpec]:
    """Return every topic cronlog needs, with its partition count and configs.

    - commands: the log of record; kept forever; broker-stamped time (LogAppendTime).
    - run-events: the public changelog; kept forever; same partitioning as commands.
    - ready: task instances ready to claim, for workers; 7 days.
    - replies: claim/renewal answers keyed by worker_id; 1 day.
    - dead-letters: undecodable or invalid records with the reason; kept forever.
    - logs: task output as LogChunks keyed by run_id (``topology/logs.py``); 7 days
      (``LOG_RETENTION``), lz4-compressed by the worker's producer.
    - the scheduler's job-table changelog (faust's naming): compacted, same partitions.
    - after-relay: snapshots of the after relay's index with the run-events offsets they
      cover (``topology/after_snapshot.py``); one partition, compacted (one key), 1-hour
      segments so the cleaner keeps it to about one hour of snapshots.
    - workers: worker heartbeats keyed by worker_id (``topology/heartbeats.py``); one
      partition, compacted (a worker's latest heartbeat, or its tombstone) with 10-minute
      segments, and deleted after ``WORKERS_RETENTION_MS`` so the last heartbeat of a worker
      that died without a tombstone does not stay for ever.
    """
    t = Topics.of(settings)
    n = settings.partitions
    forever = {"retention.ms": "-1", "cleanup.policy": "delete"}
    return [
        TopicSpec(t.commands, n, {**forever, "message.timestamp.type": "LogAppendTime"}),
        TopicSpec(t.run_events, n, dict(forever)),
        TopicSpec(t.ready, n, {"retention.ms": str(7 * DAY_MS), "cleanup.policy": "delete"}),
        TopicSpec(t.replies, n, {"retention.ms": str(DAY_MS), "cleanup.policy": "delete"}),
        TopicSpec(t.dead_letters, n, dict(forever)),
        TopicSpec(t.logs, n, {"retention.ms": str(LOG_RETENTION_MS), "cleanup.policy": "delete"}),
        TopicSpec(t.job_table_changelog, n, {"cleanup.policy": "compact"}),
        TopicSpec(t.after_relay, 1, {"cleanup.policy": "compact", "segment.ms": str(3600 * 1000)}),
        TopicSpec(
            t.workers,
            1,
            {
                "cleanup.policy": "compact,delete",
                "segment.ms": str(600 * 1000),
                "retention.ms": str(WORKERS_RETENTION_MS),
                "min.cleanable.dirty.ratio": "0.1",
            },
        ),
    ]
