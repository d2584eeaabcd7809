"""Idempotent topic bootstrap: create missing topics, refuse mismatched partition counts."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    NewTopic,
)

from cronlog.errors import CronlogError
from topology.kafka.config import KafkaSettings
from topology.kafka.replication import WANTED_REPLICAS, Replication, replication_for
from topology.kafka.retention import reconcile_retention
from topology.kafka.retrying import Unavailable, call_with_retry
from topology.kafka.topics import TopicSpec, topic_specs

log = logging.getLogger("cronlog.bootstrap")


class TopologyMismatch(CronlogError):
    """A topic exists with a partition count other than the spec's."""


def ensure_topics(settings: KafkaSettings, timeout_s: float = 30.0) -> list[str]:
    """Create every missing cronlog topic and check the existing ones.

    Topics are created with the replication of ``topology/kafka/replication.py`` for the brokers in
    the cluster's metadata (or ``settings.replication_factor``): 3 replicas and
    ``min.insync.replicas=2`` on 3 or more brokers, else one per broker, with a warning
    (logged when topics are created). Existing topics with fewer replicas than that are only
    warned about (Kafka changes a replication factor by a partition reassignment, an
    operator's decision).

    Args:
        settings: cluster and naming.
        timeout_s: per admin request, seconds.

    Returns:
        Names of the topics created (empty when all existed).

    An existing topic's ``retention.ms`` is brought to the spec's when that keeps more, and
    only reported (a warning) when it keeps less, unless ``settings.apply_retention``
    (``topology/kafka/retention.py``).

    Raises:
        TopologyMismatch: an existing topic has a different partition count.
        CronlogError: the cluster could not be reached or refused a creation.
        Unavailable: topics are missing and ``settings.replication_factor`` is above the
            brokers in the metadata (some may be down: worth retrying).

    Idempotency: running it twice creates nothing the second time.
    """
    admin = AdminClient(settings.admin_config())
    specs = topic_specs(settings)
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise CronlogError(f"cannot reach Kafka at {settings.bootstrap}: {exc}") from exc
    existing = metadata.topics
    _check_partitions([s for s in specs if s.name in existing], existing)
    _check_timestamp_type(admin, [s for s in specs if s.name in existing], timeout_s)
    reconcile_retention(
        admin,
        [s for s in specs if s.name in existing],
        timeout_s,
        shorten=settings.apply_retention,
    )
    brokers = len(metadata.brokers)
    wanted = settings.replication_factor or min(WANTED_REPLICAS, brokers)
    _warn_under_replicated([s for s in specs if s.name in existing], existing, wanted)
    missing = [s for s in specs if s.name not in existing]
    if not missing:
        return []
    # chosen (and logged) only to create: a restart while a broker is down is no news
    replication = _replication(settings, brokers)
    futures = admin.create_topics(
        [
            NewTopic(
                s.name,
                s.partitions,
                replication.factor,
                config={**s.config, **replication.topic_config()},
            )
            for s in missing
        ],
        operation_timeout=timeout_s,
    )
    created = []
    for name, fut in futures.items():
        try:
            fut.result(timeout=timeout_s)
            created.append(name)
        except KafkaException as exc:
            if exc.args[0].name() != "TOPIC_ALREADY_EXISTS":  # lost a race: fine
                raise CronlogError(f"creating topic {name}: {exc}") from exc
    _wait_for_leaders(admin, [s.name for s in missing], timeout_s)
    _check_partitions(missing, admin.list_topics(timeout=timeout_s).topics)
    # a topic another client created meanwhile (a lost race, or one the metadata did not
    # show yet) is checked as an existing one: it may have been made with CreateTime
    _check_timestamp_type(admin, [s for s in missing if s.name not in created], timeout_s)
    return created


def ensure_topics_retrying(
    settings: KafkaSettings,
    deadline_s: float | None = None,
    stop: threading.Event | None = None,
) -> list[str]:
    """Run ``ensure_topics``, retrying transient errors until it works.

    What a service runs at start: the broker may not be started yet, or still be starting,
    leaders still being elected. A service waits for as long as it takes (it has nothing
    better to do), logging the reason once (``action=broker_trouble thread=ensuring cronlog's
    topics error=…``) and the recovery once; a scheduler once gave up after 120 s with a raw
    traceback (issue 25).

    Args:
        settings: cluster and naming.
        deadline_s: give up after this many seconds (a command line's wait); None: never.
        stop: SIGTERM; ends the waiting with ``Stopped``.

    Returns:
        Names of the topics created.

    Raises:
        TopologyMismatch: at once, as ``ensure_topics``.
        CronlogError: the cluster refused (not transient), or not reached within
            ``deadline_s``.
        Stopped: ``stop`` was set while waiting.
    """
    return call_with_retry(
        lambda: ensure_topics(settings),
        what="ensuring cronlog's topics",
        deadline_s=deadline_s,
        stop=stop,
    )


def _replication(settings: KafkaSettings, brokers: int) -> Replication:
    """The replication for ``brokers`` brokers, logged (a warning below 3 replicas).

    Raises:
        Unavailable: ``settings.replication_factor`` is above ``brokers``.
    """
    try:
        replication = replication_for(brokers, settings.replication_factor)
    except ValueError as exc:
        # transient: brokers down now may be back soon (ensure_topics_retrying waits for them)
        raise Unavailable(f"choosing the replication of cronlog's topics: {exc}") from exc
    if replication.warning:
        log.warning(replication.warning, extra={"action": "topics_replication_low"})
    else:
        log.info(
            "replication of cronlog's topics",
            extra={
                "action": "topics_replication",
                "brokers": brokers,
                "replication_factor": replication.factor,
                "min_insync_replicas": replication.min_insync,
            },
        )
    return replication


def _warn_under_replicated(
    specs: list[TopicSpec], existing: Mapping[str, Any], wanted: int
) -> None:
    """Warn about existing topics with fewer replicas than ``wanted``."""
    for spec in specs:
        partitions = existing[spec.name].partitions.values()
        have = min((len(p.replicas) for p in partitions), default=wanted)
        if have < wanted:
            log.warning(
                "created when the cluster had fewer brokers; raise it with a partition "
                "reassignment (docs/operations.md)",
                extra={
                    "action": "topic_under_replicated",
                    "topic": spec.name,
                    "replicas": have,
                    "wanted": wanted,
                },
            )


def _check_timestamp_type(admin: AdminClient, specs: list[TopicSpec], timeout_s: float) -> None:
    """Refuse an existing topic whose spec asks for LogAppendTime but which stamps CreateTime.

    The fold's clock is the record timestamp: a client-stamped (CreateTime) command topic lets
    one producer's skewed clock move every job's clock (DESIGN.md, "Time is data").
    """
    wanted = [s for s in specs if s.config.get("message.timestamp.type")]
    if not wanted:
        return
    resources = [ConfigResource(ConfigResource.Type.TOPIC, s.name) for s in wanted]
    for spec, fut in zip(wanted, admin.describe_configs(resources).values(), strict=True):
        try:
            entries = fut.result(timeout=timeout_s)
        except KafkaException as exc:
            raise CronlogError(f"describing topic {spec.name}: {exc}") from exc
        entry = entries.get("message.timestamp.type")
        want = spec.config["message.timestamp.type"]
        if entry is not None and entry.value != want:
            raise TopologyMismatch(
                f"topic {spec.name} has message.timestamp.type={entry.value}, the spec says "
                f"{want}; the fold's clock must be broker-stamped, refusing to run"
            )


def _wait_for_leaders(admin: AdminClient, names: list[str], timeout_s: float) -> None:
    """Return once every partition of ``names`` has a leader (clients fail before that)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        topics = admin.list_topics(timeout=timeout_s).topics
        if all(
            name in topics
            and topics[name].partitions
            and all(p.leader >= 0 for p in topics[name].partitions.values())
            for name in names
        ):
            return
        time.sleep(0.2)
    raise Unavailable(f"topics {names} have partitions without a leader after {timeout_s}s")


def _check_partitions(specs: list[TopicSpec], existing: Mapping[str, Any]) -> None:
    for spec in specs:
        meta = existing.get(spec.name)
        if meta is None:
            continue
        count = len(meta.partitions)
        if count != spec.partitions:
            raise TopologyMismatch(
                f"topic {spec.name} has {count} partitions, the spec says {spec.partitions}; "
                "partitioning is part of the contract, refusing to run"
            )
