"""Retention of existing topics: compare ``retention.ms`` with the spec, apply what is safe.

Applied with ``incremental_alter_configs``.

Rule (docs/architecture.md, "Retention and snapshots"): a spec that keeps *more* (longer, or
for ever) is applied at once, it can lose nothing; one that keeps *less* is only reported
unless ``KafkaSettings.apply_retention`` is set, because shortening the commands topic
deletes its head at the broker's next check, and that head must first be covered by a
snapshot (``cronlog snapshot``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
)

from cronlog.errors import CronlogError
from topology.kafka.topics import TopicSpec

log = logging.getLogger("cronlog.retention")
KEY = "retention.ms"


@dataclass(frozen=True, slots=True)
class RetentionDrift:
    """One existing topic whose ``retention.ms`` differs from its spec.

    Attributes:
        topic: the topic name.
        current_ms: the topic's ``retention.ms`` now (-1: for ever).
        wanted_ms: the spec's (-1: for ever).
    """

    topic: str
    current_ms: int
    wanted_ms: int

    @property
    def shortens(self) -> bool:
        """True when applying it keeps less than the topic keeps now."""
        if self.wanted_ms < 0:
            return False
        return self.current_ms < 0 or self.wanted_ms < self.current_ms

    def describe(self) -> str:
        """Return e.g. ``cronlog.commands retention.ms -1 (for ever) -> 2592000000 (30.0 d)``."""
        return f"{self.topic} {KEY} {_human(self.current_ms)} -> {_human(self.wanted_ms)}"


def _human(ms: int) -> str:
    return f"{ms} (for ever)" if ms < 0 else f"{ms} ({ms / 86_400_000:.1f} d)"


def retention_drift(
    admin: AdminClient, specs: list[TopicSpec], timeout_s: float
) -> list[RetentionDrift]:
    """Return the existing topics of ``specs`` whose ``retention.ms`` differs from the spec.

    Args:
        admin: an AdminClient of the cluster.
        specs: topics that exist (each with ``retention.ms`` in its config, or skipped).
        timeout_s: per request, seconds.

    Raises:
        CronlogError: a topic's configs could not be described.
    """
    wanted = [s for s in specs if KEY in s.config]
    if not wanted:
        return []
    resources = [ConfigResource(ConfigResource.Type.TOPIC, s.name) for s in wanted]
    drift = []
    for spec, fut in zip(wanted, admin.describe_configs(resources).values(), strict=True):
        try:
            entry = fut.result(timeout=timeout_s).get(KEY)
        except KafkaException as exc:
            raise CronlogError(f"describing topic {spec.name}: {exc}") from exc
        want = int(spec.config[KEY])
        if entry is not None and entry.value is not None and int(entry.value) != want:
            drift.append(RetentionDrift(spec.name, int(entry.value), want))
    return drift


def apply_drift(admin: AdminClient, drift: list[RetentionDrift], timeout_s: float) -> None:
    """Set each topic's ``retention.ms`` to the wanted value (incremental, KIP-339).

    Raises:
        CronlogError: the cluster refused a change.
    """
    if not drift:
        return
    resources = [
        ConfigResource(
            ConfigResource.Type.TOPIC,
            d.topic,
            incremental_configs=[
                ConfigEntry(KEY, str(d.wanted_ms), incremental_operation=AlterConfigOpType.SET)
            ],
        )
        for d in drift
    ]
    for d, fut in zip(drift, admin.incremental_alter_configs(resources).values(), strict=True):
        try:
            fut.result(timeout=timeout_s)
        except KafkaException as exc:
            raise CronlogError(f"setting {d.describe()}: {exc}") from exc


def reconcile_retention(
    admin: AdminClient, specs: list[TopicSpec], timeout_s: float, *, shorten: bool
) -> list[RetentionDrift]:
    """Apply the retention drift that is safe (or all of it with ``shorten``); report the rest.

    What ``topology.kafka.bootstrap.ensure_topics`` calls for the topics that already exist.

    Args:
        admin: an AdminClient of the cluster.
        specs: the existing topics' specs.
        timeout_s: per request, seconds.
        shorten: also apply the drifts that keep less (``KafkaSettings.apply_retention``).

    Returns:
        The drifts left as they are (each logged as a warning ``retention_differs``).

    Raises:
        CronlogError: the cluster could not be asked, or refused a change.
    """
    drift = retention_drift(admin, specs, timeout_s)
    apply = [d for d in drift if shorten or not d.shortens]
    apply_drift(admin, apply, timeout_s)
    for d in apply:
        log.info(d.describe(), extra={"action": "retention_applied", "topic": d.topic})
    left = [d for d in drift if d not in apply]
    for d in left:
        log.warning(
            "%s: not shortened (it would delete the head of the topic); check that a snapshot "
            "covers it, then set CRONLOG_APPLY_RETENTION=true",
            d.describe(),
            extra={"action": "retention_differs", "topic": d.topic},
        )
    return left
