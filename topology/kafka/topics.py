"""cronlog's topics as data: names, partition counts, retention, cleanup policy."""

from __future__ import annotations

from dataclasses import dataclass, field

from cronlog.tenants import is_tenant_name
from topology.kafka.config import KafkaSettings

DAY_MS = 24 * 3600 * 1000
LOG_RETENTION_MS = 7 * DAY_MS
"""How long task output stays on the logs topic, milliseconds (the API's copy outlives it)."""
WORKERS_RETENTION_MS = DAY_MS
"""How long a worker's last heartbeat stays on the workers topic, milliseconds: a worker killed
outright writes no tombstone, so its last heartbeat goes with its segment after this."""
SNAPSHOT_MARGIN_MS = 7 * DAY_MS
"""How much longer the snapshots topic keeps a record than the commands topic does,
milliseconds: a snapshot outlives every command after it (docs/architecture.md, "Retention
and snapshots")."""
SNAPSHOT_MANIFESTS = 0
"""The snapshots topic's partition of manifests (one small record per complete snapshot)."""
SNAPSHOT_CHUNKS = 1
"""The snapshots topic's partition of chunks (the job records, ~800 kB per record)."""


def retention_ms(days: int) -> int:
    """Return ``retention.ms`` for a retention in days (-1: for ever stays -1)."""
    return -1 if days < 0 else days * DAY_MS


def snapshot_retention_ms(settings: KafkaSettings) -> int:
    """Return how long the snapshots topic keeps a record, milliseconds (-1: for ever).

    For ever when the commands are kept for ever; else the longer of the commands' and
    run-events' retention plus ``SNAPSHOT_MARGIN_MS``, so a snapshot is never deleted before
    the commands that follow it (nor the run-event it anchors ``replay --verify`` on).
    """
    kept = [settings.commands_retention_days, settings.run_events_retention_days]
    if settings.commands_retention_days < 0:
        return -1
    return max(retention_ms(d) for d in kept if d >= 0) + SNAPSHOT_MARGIN_MS


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
    snapshots: str

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
            snapshots=f"{p}cronlog.snapshots",
        )


INGRESS = "cronlog.ingress."
"""The name of a tenant's ingress topic after the prefix, before the tenant
(``<prefix>cronlog.ingress.<tenant>``; docs/security.md, "Who may send as which tenant")."""
INGRESS_RETENTION_MS = 7 * DAY_MS
"""How long an ingress topic keeps a command, milliseconds: the relay forwards it at once."""


def ingress_topic(settings: KafkaSettings, tenant: str) -> str:
    """Return the ingress topic of ``tenant``.

    Raises:
        ValueError: ``tenant`` is not a tenant name (``cronlog.tenants.TENANT_PATTERN``).
    """
    if not is_tenant_name(tenant):
        raise ValueError(f"{tenant!r} is not a tenant name (a-z 0-9 _ -)")
    return f"{settings.topic_prefix}{INGRESS}{tenant}"


def ingress_pattern(settings: KafkaSettings) -> str:
    """Return the subscription regex of every ingress topic (librdkafka: a leading ``^``).

    A topic name holds only ``a-z A-Z 0-9 . _ -``, of which only ``.`` means something to a
    regex outside brackets: it alone is escaped (librdkafka's own regex engine is small).
    """
    return "^" + (settings.topic_prefix + INGRESS).replace(".", "\\.") + ".+$"


def ingress_tenant(settings: KafkaSettings, topic: str) -> str | None:
    """Return the tenant whose ingress ``topic`` is, or None when it is not a valid one."""
    head = settings.topic_prefix + INGRESS
    tenant = topic[len(head) :] if topic.startswith(head) else ""
    return tenant if is_tenant_name(tenant) else None


def ingress_spec(settings: KafkaSettings, tenant: str) -> TopicSpec:
    """Return the spec of ``tenant``'s ingress topic.

    The commands' partition count (keyed by ``job_id``, so that one job's commands stay in
    order), kept ``INGRESS_RETENTION_MS``.
    """
    return TopicSpec(
        ingress_topic(settings, tenant),
        settings.partitions,
        {"retention.ms": str(INGRESS_RETENTION_MS), "cleanup.policy": "delete"},
    )


def topic_specs(settings: KafkaSettings) -> list[TopicSpec]:
    """Return every topic cronlog needs, with its partition count and configs.

    - commands: the log of record; kept ``commands_retention_days`` (30 by default, -1 for
      ever); broker-stamped time (LogAppendTime).
    - run-events: the public changelog; kept ``run_events_retention_days`` (for ever by
      default); same partitioning as commands.
    - ready: task instances ready to claim, for workers; 7 days.
    - replies: claim/renewal answers keyed by worker_id; 1 day.
    - dead-letters: undecodable or invalid records with the reason; kept
      ``dead_letters_retention_days`` (30).
    - logs: task output as LogChunks keyed by run_id (``topology/wire/log_chunks.py``); 7 days
      (``LOG_RETENTION``), lz4-compressed by the worker's producer.
    - the scheduler's job-table changelog (faust's naming): compacted, same partitions.
    - after-relay: snapshots of the after relay's index with the run-events offsets they
      cover (``services/scheduler/after_snapshot.py``); one partition, compacted (one key), 1-hour
      segments so the cleaner keeps it to about one hour of snapshots.
    - workers: worker heartbeats keyed by worker_id (``topology/wire/heartbeats.py``); one
      partition, compacted (a worker's latest heartbeat, or its tombstone) with 10-minute
      segments, and deleted after ``WORKERS_RETENTION_MS`` so the last heartbeat of a worker
      that died without a tombstone does not stay for ever.
    - snapshots: state snapshots of every job record with the command offsets they cover
      (``topology/snapshots/snapshot.py``); two partitions, ``SNAPSHOT_MANIFESTS`` and
      ``SNAPSHOT_CHUNKS``; deleted after ``snapshot_retention_ms``.
    """
    t = Topics.of(settings)
    n = settings.partitions

    def kept(days: int) -> dict[str, str]:
        return {"retention.ms": str(retention_ms(days)), "cleanup.policy": "delete"}

    return [
        TopicSpec(
            t.commands,
            n,
            {**kept(settings.commands_retention_days), "message.timestamp.type": "LogAppendTime"},
        ),
        TopicSpec(t.run_events, n, kept(settings.run_events_retention_days)),
        TopicSpec(t.ready, n, {"retention.ms": str(7 * DAY_MS), "cleanup.policy": "delete"}),
        TopicSpec(t.replies, n, {"retention.ms": str(DAY_MS), "cleanup.policy": "delete"}),
        TopicSpec(t.dead_letters, n, kept(settings.dead_letters_retention_days)),
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
        TopicSpec(
            t.snapshots,
            2,
            {"retention.ms": str(snapshot_retention_ms(settings)), "cleanup.policy": "delete"},
        ),
    ]
